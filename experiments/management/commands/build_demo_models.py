"""Put the demo target and draft models into SPECDASH_MODELS_DIR, from this machine's cache or built.

The cache and the build (workers/host/model_cache.py, workers/host/demo_models.py) need the
vLLM environment (torch, and its library versions are part of the cache key), so they run as
a child process with that environment's python. A current checkout costs a fraction of a
second; a cache hit links the models in; only a miss trains them (docs/benchmarks.md says how
long that takes).
"""

import subprocess
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

CACHE_MODULE = "workers.host.model_cache"


def cache_command(models_dir: Path, *, force: bool = False) -> list[str]:
    command = [settings.SPECDASH_VLLM_PYTHON, "-m", CACHE_MODULE, "--models-dir", str(models_dir)]
    return command + (["--force"] if force else [])


class Command(BaseCommand):
    help = "Put the tiny demo target and draft models in place: from the machine's cache, or built into it."

    def add_arguments(self, parser):
        parser.add_argument("--force", action="store_true", help="rebuild the cached models even if they verify")

    def handle(self, *args, force: bool = False, **options):
        models_dir = Path(settings.SPECDASH_MODELS_DIR)
        result = subprocess.run(cache_command(models_dir, force=force), cwd=settings.BASE_DIR, check=False)
        if result.returncode != 0:
            raise CommandError(f"The demo models could not be put in place (exit code {result.returncode}).")
