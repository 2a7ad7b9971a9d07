"""The servers a killed worker process left behind (workers/server/orphans.py): stopped by the
worker's next pool process and by `./dev down`, and nothing else with them."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from celery.signals import worker_process_init

from tests.workers.server.stand_in import REPO, fake_args, owner_process, running_members, sleeper
from workers import tasks
from workers.server import launch


@contextlib.contextmanager
def _orphaned_server(tmp_path, pid_dir: Path):
    """A stand-in server recorded in `pid_dir` whose owner was killed (SIGKILL: the worker
    process cleans nothing up), beside a record whose process id was reused by a stranger.
    Yields the server's process group and the stranger; kills whatever is left on exit."""
    # The stand-in server has "vllm" in its command line, as the orphan check requires.
    owner = owner_process(tmp_path, fake_args("vllm-fake"), pid_dir)
    stranger = sleeper("not-ours")
    pgid = None
    try:
        pgid = int(owner.stdout.readline())
        owner.kill()
        owner.wait()
        assert len(running_members(pgid)) == 2  # the server and its engine child, orphaned
        (pid_dir / f"{stranger.pid}.pid").write_text("a record whose process id was reused")
        yield pgid, stranger
    finally:
        owner.kill()
        if pgid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        stranger.kill()
        stranger.wait()


def _assert_stopped(pgid: int, stranger: subprocess.Popen, pid_dir: Path) -> None:
    deadline = time.monotonic() + 10
    while running_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running_members(pgid) == []
    assert stranger.poll() is None  # a group that is not a vLLM server is left alone
    assert list(pid_dir.iterdir()) == []


def test_the_worker_init_hook_stops_the_servers_of_a_killed_worker(tmp_path, settings, monkeypatch, caplog):
    settings.DATA_DIR = tmp_path
    monkeypatch.setitem(tasks._worker, "name", "cpu@killed")
    pid_dir = launch.server_pid_dir("cpu@killed")
    with _orphaned_server(tmp_path, pid_dir) as (pgid, stranger):
        worker_process_init.send(sender=None)

        _assert_stopped(pgid, stranger, pid_dir)
        assert f"stopped an orphaned vLLM server (process group {pgid})" in caplog.text


def test_dev_down_stops_the_server_a_killed_worker_left_and_nothing_else(tmp_path):
    # `./dev down` kills a worker still busy after its grace period, then runs this module on its folder.
    pid_dir = tmp_path / "server-pids" / "cpu@host"
    with _orphaned_server(tmp_path, pid_dir) as (pgid, stranger):
        done = subprocess.run(
            [sys.executable, "-m", "workers.server.orphans", str(pid_dir)],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip

        assert done.stdout == f"stopped a vLLM server the worker left behind (process group {pgid})\n"
        _assert_stopped(pgid, stranger, pid_dir)
        # Run again, or on a worker that never started a server: nothing to stop, no error.
        again = subprocess.run(
            [sys.executable, "-m", "workers.server.orphans", str(tmp_path / "server-pids" / "cpu@other")],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert again.stdout == ""
