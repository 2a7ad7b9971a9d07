"""Build the demo target and draft models into SPECDASH_MODELS_DIR, unless they are current.

The build (workers/host/demo_models.py) needs torch, so it runs as a child process with the vLLM
environment's python. A marker file records which version of the recipe and of its
training text made the models; a matching marker means there is nothing to do.
"""

import hashlib
import subprocess
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from experiments.prompts.catalog import PROMPT_SETS_DIR

BUILDER_MODULE = "workers.host.demo_models"
MARKER_NAME = "demo_models.version"
MODEL_NAMES = ("target", "draft")


def build_version() -> str:
    """A digest of the build recipe and the prompt sets it trains on: edit either, rebuild."""
    digest = hashlib.sha256()
    recipe = Path(settings.BASE_DIR) / "workers" / "host" / "demo_models.py"
    for path in [recipe, *sorted(PROMPT_SETS_DIR.glob("*.json"))]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def models_are_current(models_dir: Path, version: str) -> bool:
    marker = models_dir / MARKER_NAME
    if not marker.is_file() or marker.read_text().strip() != version:
        return False
    return all((models_dir / name / "config.json").is_file() for name in MODEL_NAMES)


class Command(BaseCommand):
    help = "Build the tiny demo target and draft models (about 5 CPU minutes) unless they are current."

    def add_arguments(self, parser):
        parser.add_argument("--force", action="store_true", help="rebuild even if the models are current")

    def handle(self, *args, force: bool = False, **options):
        models_dir = Path(settings.SPECDASH_MODELS_DIR)
        version = build_version()
        if not force and models_are_current(models_dir, version):
            self.stdout.write(f"Demo models in {models_dir} are current; nothing to build.")
            return
        models_dir.mkdir(parents=True, exist_ok=True)
        # A build that fails halfway must not leave a marker vouching for what is there.
        (models_dir / MARKER_NAME).unlink(missing_ok=True)
        self.stdout.write(f"Building demo models into {models_dir} with {settings.SPECDASH_VLLM_PYTHON}.")
        command = [settings.SPECDASH_VLLM_PYTHON, "-m", BUILDER_MODULE, "--out", str(models_dir)]
        result = subprocess.run(command, cwd=settings.BASE_DIR, check=False)
        if result.returncode != 0:
            raise CommandError(f"The demo model build failed with exit code {result.returncode}.")
        (models_dir / MARKER_NAME).write_text(version + "\n")
        self.stdout.write(
            self.style.SUCCESS(f"Demo models written to {models_dir / 'target'} and {models_dir / 'draft'}.")
        )
