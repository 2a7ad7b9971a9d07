"""The demo on a fresh `./dev up`: this checkout cloned into a folder of its own, brought up on
free ports (a specdash already running is left alone) with the demo-model cache asked for, `up`
timed (wall and CPU), then `./dev manage check_demo --runs N` in the clone (each run's settle
state, wall time and server starts; experiments/management/commands/check_demo.py), then
`./dev down` and the clone removed. Free of Django: the clone's own ./dev does the work."""

import os
import resource
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from workers.bench.faults.stack import free_port


@dataclass(frozen=True)
class Options:
    """What scripts/check_demo.py asks for (its --help says each)."""

    checkout: Path
    folder: Path
    runs: int
    cache: Path | None
    share_venvs: bool
    keep: bool


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _clone(options: Options) -> Path:
    clone = options.folder / "specdash"
    subprocess.run(["git", "clone", "--quiet", str(options.checkout), str(clone)], check=True)
    if options.share_venvs:
        # `up` keeps a venv whose requirements stamp matches: the checkout's are reused as they are.
        for venv in (".venv", ".venv-vllm"):
            (clone / venv).symlink_to(options.checkout / venv)
    return clone


def _environment(options: Options) -> dict[str, str]:
    ports = {"SPECDASH_DB_PORT": free_port(), "SPECDASH_REDIS_PORT": free_port(), "SPECDASH_WEB_PORT": free_port()}
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECDASH_")} | {k: str(v) for k, v in ports.items()}
    if options.cache:
        env["SPECDASH_MODEL_CACHE"] = str(options.cache)
    return env


def run(options: Options) -> int:
    """Clone, up, check, down; the exit status of the check (0 when it ran)."""
    options.folder.mkdir(parents=True, exist_ok=True)
    clone = _clone(options)
    env = _environment(options)
    try:
        wall, cpu = time.monotonic(), _children_cpu_s()
        subprocess.run([str(clone / "dev"), "up"], env=env, check=True)
        print(f"up: {time.monotonic() - wall:.0f} s wall, {_children_cpu_s() - cpu:.0f} s CPU", flush=True)
        check = [str(clone / "dev"), "manage", "check_demo", "--runs", str(options.runs)]
        return subprocess.run(check, env=env, check=False).returncode
    finally:
        subprocess.run([str(clone / "dev"), "down"], env=env, check=False)
        if not options.keep:
            shutil.rmtree(options.folder, ignore_errors=True)
