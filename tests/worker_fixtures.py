"""A real Celery worker process for integration tests, on the test database and the
test Redis database. Import the fixtures from here into a test module."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from experiments.models import Experiment
from tests import phases
from workers.server.launch import server_pid_dir
from workers.server.orphans import stop_orphaned_servers

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


@dataclass(frozen=True)
class WorkerProcess:
    """A started worker: its Celery node name (what its runs record as worker_name) and log."""

    node: str
    log_path: Path
    process: subprocess.Popen = field(repr=False)


@contextlib.contextmanager
def celery_worker(queue: str, env: dict[str, str] | None = None) -> Iterator[Path]:
    """A worker process on `queue`, with `env` added to its environment (its settings), named
    after the queue and the test database; yields its log's path, stops it on exit."""
    with celery_workers([(queue, None, env)]) as (worker,):
        yield worker.log_path


@contextlib.contextmanager
def celery_workers(specs: list[tuple[str, str | None, dict[str, str] | None]]) -> Iterator[list[WorkerProcess]]:
    """Several worker processes at once, one per (queues, name, env) in `specs`: `queues` is
    the comma-separated list its `-Q` takes, `name` makes its node name distinct (None: named
    after the queue), `env` is added to its environment (its settings). They start side by
    side, and each is stopped on every exit path, with the vLLM servers it left behind if it
    had to be killed."""
    with contextlib.ExitStack() as stack:
        workers = [stack.enter_context(_worker_process(queues, name, env)) for queues, name, env in specs]
        for worker in workers:
            _wait_for_log(worker.log_path, "ready.", timeout_s=60, process=worker.process)
        yield workers


def server_pid_records(worker_name: str) -> list[str]:
    """The server-pid records a worker keeps now (each names the command of a server it runs)."""
    return [path.read_text() for path in server_pid_dir(worker_name).glob("*.pid")]


def worker_node_name(queues: str, name: str | None) -> str:
    """Distinct per test database, so two test sessions on one machine keep separate
    server-pid records and logs."""
    database = connection.settings_dict["NAME"]
    label = name or queues.replace(",", "-")
    stem = database if label == "cpu" else f"{label}-{database}"
    return f"test-cpu-{stem}@{socket.gethostname()}"


@contextlib.contextmanager
def _worker_process(queues: str, name: str | None, env: dict[str, str] | None) -> Iterator[WorkerProcess]:
    if phases.running not in (None, "real"):
        raise RuntimeError(f"a Celery worker started in the {phases.running} phase: mark its test `worker`")
    ARTIFACTS.mkdir(exist_ok=True)
    node = worker_node_name(queues, name)
    log_path = ARTIFACTS / f"celery-worker-{node.partition('@')[0].removeprefix('test-cpu-')}.log"
    env = dict(os.environ) | (env or {})
    env["DJANGO_SETTINGS_MODULE"] = "specdash.settings_test"
    env["SPECDASH_DB_NAME"] = connection.settings_dict["NAME"]
    env["SPECDASH_TEST_REDIS_URL"] = settings.CELERY_BROKER_URL
    args = [
        sys.executable, "-m", "celery", "-A", "specdash", "worker",
        "-Q", queues, "-n", node, "--concurrency", "1", "--prefetch-multiplier", "1",
        "--loglevel", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat",
    ]  # fmt: skip
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield WorkerProcess(node=node, log_path=log_path, process=process)
    finally:
        _worker_stop(process, node)


def _worker_stop(process: subprocess.Popen, node: str) -> None:
    """A warm shutdown: the worker stops its pool children and its current server itself.
    Past 60 s it is killed, and the vLLM servers it recorded (they run in sessions of their
    own, out of the worker's process group) are stopped here."""
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        stop_orphaned_servers(server_pid_dir(node))


def _wait_for_log(path: Path, text: str, *, timeout_s: float, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if text in path.read_text():
            return
        if process.poll() is not None:
            raise RuntimeError(f"the Celery worker exited:\n{path.read_text()[-3000:]}")
        time.sleep(0.2)
    raise TimeoutError(f"the Celery worker did not log {text!r} within {timeout_s} s")


@contextlib.contextmanager
def shared_rows(django_db_blocker) -> Iterator[None]:
    """Around a module-scoped fixture whose experiment several tests assert on: the fixture
    writes its rows (and the worker stores its results) inside `django_db_blocker.unblock()`,
    outside any test's transaction, and the database is flushed when the module is done, as a
    transactional test flushes after itself. The tests that read those rows use plain
    `django_db` (a transaction rolled back) and the `shared_rows` mark, which runs them after
    every other test (tests/conftest.py): no transactional test's flush falls between them, and
    their flush falls before no test that expects the database as migrations left it."""
    try:
        yield
    finally:
        with django_db_blocker.unblock():
            call_command("flush", interactive=False, verbosity=0)


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
