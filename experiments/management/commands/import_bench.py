"""Import a directory (or a list) of `vllm bench serve --save-result` files as a read-only
experiment, as the Import page does.

--method takes a line of the page's "Methods" field, once per arm whose files name no
speculative config (experiments/imports/methods.py): --method "ngram k=3 = ngram 3"."""

from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

from experiments import teams
from experiments.imports import bench_files, services
from experiments.imports import methods as import_methods


class Command(BaseCommand):
    help = __doc__.split("\n\n")[0]

    def add_arguments(self, parser):
        parser.add_argument("paths", nargs="+", help="result files, or directories whose *.json files to import")
        parser.add_argument("--owner", required=True, help="username the experiment belongs to")
        parser.add_argument("--name", required=True, help="the experiment's name")
        parser.add_argument("--team", help="the team it goes to (the owner's; needed when they are in several)")
        parser.add_argument(
            "--method",
            action="append",
            default=[],
            help="for files without a speculative config: 'label (or file name) = method k', or '… = {config JSON}'",
        )

    def handle(self, *args, **options):
        owner = get_user_model().objects.filter(username=options["owner"]).first()
        if owner is None:
            raise CommandError(f"There is no user {options['owner']!r}.")
        team = Group.objects.filter(name=options["team"]).first() if options["team"] else None
        if options["team"] and team is None:
            raise CommandError(f"There is no team {options['team']!r}.")
        files = [file for path in map(Path, options["paths"]) for file in self._files(path)]
        try:
            read = bench_files.bench_files_read([(file.name, file.read_bytes()) for file in files])
            read = import_methods.files_with_methods(read, import_methods.methods_parse("\n".join(options["method"])))
            experiment = services.experiment_import(owner=owner, name=options["name"], files=read, team=team)
        except (bench_files.BenchFileRefused, teams.TeamRefused) as refused:
            raise CommandError(f"nothing imported:\n{refused}") from None
        self.stdout.write(f"imported {len(read)} files as experiment {experiment.pk}")

    @staticmethod
    def _files(path: Path) -> list[Path]:
        if path.is_dir():
            return sorted(path.glob("*.json"))
        if not path.is_file():
            raise CommandError(f"{path}: no such file or directory.")
        return [path]
