"""Import a directory (or a list) of `vllm bench serve --save-result` files as a read-only
experiment, as the Import page does."""

from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from experiments import bench_files, imports


class Command(BaseCommand):
    help = __doc__.split("\n\n")[0]

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", help="result files, or directories whose *.json files to import")
        parser.add_argument("--owner", required=True, help="username the experiment belongs to")
        parser.add_argument("--name", required=True, help="the experiment's name")

    def handle(self, *args, **options):
        owner = get_user_model().objects.filter(username=options["owner"]).first()
        if owner is None:
            raise CommandError(f"There is no user {options['owner']!r}.")
        files = [file for path in map(Path, options["paths"]) for file in self._files(path)]
        try:
            read = bench_files.bench_files_read([(file.name, file.read_bytes()) for file in files])
            experiment = imports.experiment_import(owner=owner, name=options["name"], files=read)
        except bench_files.BenchFileRefused as refused:
            raise CommandError(f"nothing imported:\n{refused}") from None
        self.stdout.write(f"imported {len(read)} files as experiment {experiment.pk}")

    @staticmethod
    def _files(path: Path) -> list[Path]:
        if path.is_dir():
            return sorted(path.glob("*.json"))
        if not path.is_file():
            raise CommandError(f"{path}: no such file or directory.")
        return [path]
