"""A real Celery worker process for integration tests, on the test database and the
test Redis database. Import the fixtures from here into a test module."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.db import connection

from experiments.models import Experiment

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, django_db_blocker):
    """Start `celery worker` as a child process serving the `cpu` queue; stop it after the session.

    The worker is named after the test database, so two test sessions on one machine (each
    with its own SPECDASH_DB_NAME and SPECDASH_TEST_REDIS_URL) keep separate server-pid
    records and logs: a worker stops only the orphaned vLLM servers of its own name.
    """
    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()
    with celery_worker("cpu") as log_path:
        yield log_path


@contextlib.contextmanager
def celery_worker(queue: str, env: dict[str, str] | None = None) -> Iterator[Path]:
    """A worker process on `queue`, with `env` added to its environment (its settings), named
    after the queue and the test database; yields its log's path, stops it on exit."""
    ARTIFACTS.mkdir(exist_ok=True)
    database = connection.settings_dict["NAME"]
    name = database if queue == "cpu" else f"{queue}-{database}"
    log_path = ARTIFACTS / f"celery-worker-{name}.log"
    env = dict(os.environ) | (env or {})
    env["DJANGO_SETTINGS_MODULE"] = "specdash.settings_test"
    env["SPECDASH_DB_NAME"] = database
    env["SPECDASH_TEST_REDIS_URL"] = settings.CELERY_BROKER_URL
    args = [
        sys.executable, "-m", "celery", "-A", "specdash", "worker",
        "-Q", queue, "-n", f"test-cpu-{name}@%h", "--concurrency", "1", "--prefetch-multiplier", "1",
        "--loglevel", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        _wait_for_log(log_path, "ready.", timeout_s=60, process=process)
        yield log_path
    finally:
        process.terminate()  # a warm shutdown: the worker stops its pool children itself
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _wait_for_log(path: Path, text: str, *, timeout_s: float, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in path.read_text():
            return
        if process.poll() is not None:
            raise RuntimeError(f"the Celery worker exited:\n{path.read_text()[-3000:]}")
        time.sleep(0.2)
    raise TimeoutError(f"the Celery worker did not log {text!r} within {timeout_s} s")


def wait_for_experiment(experiment_id: int, *, timeout_s: float) -> Experiment:
    """Poll until the experiment is finished or failed."""
    deadline = time.monotonic() + timeout_s
    done = (Experiment.Status.FINISHED, Experiment.Status.FAILED)
    while time.monotonic() < deadline:
        experiment = Experiment.objects.get(id=experiment_id)
        if experiment.status in done:
            return experiment
        time.sleep(1)
    raise TimeoutError(f"experiment {experiment_id} still {experiment.status} after {timeout_s} s")
