"""Scenarios that stop or starve a process: the pool process running the load, the whole
worker, the vLLM server killed mid-run; a server that never becomes healthy, one that runs
out of memory."""

import os
import re
import signal
import time

from django.contrib.auth.models import User

from experiments.models import Experiment
from workers.bench.faults.outcomes import (
    counts,
    finished,
    first_error,
    host_memory_gib,
    pool_child,
    row,
    running_run,
    server_logs,
    server_pgid,
    submit,
    taken_back,
)
from workers.bench.faults.rows import Row
from workers.bench.faults.stack import LogMark, Stack, wait_for


def kill_worker_child(stack: Stack, owner: User) -> Row:
    experiment = submit(stack, owner)
    run = running_run(experiment)
    log = LogMark(stack, "worker-cpu")
    os.kill(pool_child(stack), signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: taken_back(run), timeout_s=120, what="the run taken back", every_s=0.2)
    taken = time.monotonic()
    finished(experiment)
    said = log.since()
    redelivered = re.search(rf"received experiment {experiment.id}$", said, re.M)
    orphan_stopped = "stopped an orphaned vLLM server" in said
    seen = (
        "run queued again at once, measured again on a fresh server"
        if redelivered and orphan_stopped
        else f"run taken back; worker log: task delivered again {bool(redelivered)}, orphaned server stopped "
        f"{orphan_stopped}"
    )
    return row("worker killed mid-run", "kill -9 of the pool process running the load", experiment, killed, taken, seen)


def kill_whole_worker(stack: Stack, owner: User) -> Row:
    experiment = submit(stack, owner)
    run = running_run(experiment)
    control = LogMark(stack, "control")
    os.killpg(stack.processes["worker-cpu"].pid, signal.SIGKILL)
    killed = time.monotonic()
    stack.processes.pop("worker-cpu").wait()
    stack.worker_start()  # a supervisor restarts it; the message itself waits for the visibility timeout
    wait_for(lambda: taken_back(run), timeout_s=120, what="the run taken back", every_s=0.2)
    taken = time.monotonic()
    finished(experiment)
    reaped = f"re-dispatching experiment {experiment.id}: its worker process stopped beating" in control.since()
    return row(
        "whole worker killed mid-run",
        "kill -9 of the worker's process group, worker restarted",
        experiment,
        killed,
        taken,
        "reaper took the experiment back after the 30 s beat limit"
        if reaped
        else "run taken back, but the control worker's log does not say the reaper re-dispatched it",
    )


def kill_server(stack: Stack, owner: User) -> Row:
    experiment = submit(stack, owner)
    run = running_run(experiment)
    log = LogMark(stack, "worker-cpu")
    os.killpg(server_pgid(stack), signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: taken_back(run), timeout_s=120, what="the run taken back", every_s=0.2)
    taken = time.monotonic()
    finished(experiment)
    fresh = "starting a fresh server" in log.since()
    return row(
        "vLLM server killed mid-run",
        "kill -9 of the server's process group",
        experiment,
        killed,
        taken,
        "fresh server started, run measured again"
        if fresh
        else "run taken back, but the worker log does not say a fresh server started",
    )


def _under_worker_env(stack: Stack, owner: User, **env: str) -> tuple[Experiment, float]:
    """A small experiment run to its end by a worker restarted with `env`, then the worker as it
    was; (the experiment, seconds from submission to its end: the restart after is not part of it)."""
    stack.stop("worker-cpu")
    stack.worker_start(**env)
    try:
        experiment = submit(stack, owner)
        started = time.monotonic()
        ended = finished(experiment)
        return ended, time.monotonic() - started
    finally:
        stack.stop("worker-cpu")
        stack.worker_start()


def server_never_healthy(stack: Stack, owner: User) -> Row:
    ended, seconds = _under_worker_env(stack, owner, SPECDASH_SERVER_START_TIMEOUT_S="10")
    _, duplicated = counts(ended)
    error = first_error(ended).splitlines()[0]
    return Row(
        "server never healthy",
        "start timeout 10 s, below the demo server's start-up",
        f"runs failed: {error}",
        0,
        duplicated,
        round(seconds, 1),
    )


def server_out_of_memory(stack: Stack, owner: User) -> Row:
    ended, seconds = _under_worker_env(stack, owner, SPECDASH_CPU_KVCACHE_GIB="4096")
    _, duplicated = counts(ended)
    tail = first_error(ended)
    errors = [line for line in tail.splitlines() if re.search(r"Error|memory", line) and "Warning" not in line]
    outcome = f"runs failed with the server's log: {(errors[-1] if errors else tail[:80]).strip()[:160]}"
    # The cause as vLLM states it, from the server's whole log, and whether the run kept it.
    lines = [line for log in server_logs(stack, ended) for line in log.read_text(errors="replace").splitlines()]
    causes = [match.group(0).strip() for line in lines if (match := re.search(r"\w*Error\b.*memory.*", line))]
    if causes:
        in_run = [cause for cause in causes if cause in tail]
        kept = "in the run's error" if in_run else "only in the server's log, not in the run's error"
        first_sentence = re.split(r"(?<=\.)\s", (in_run or causes)[0], maxsplit=1)[0][:200]
        outcome += f"; vLLM's reason, {kept}: {first_sentence}"
    return Row(
        "server out of memory",
        f"KV cache of 4096 GiB asked (SPECDASH_CPU_KVCACHE_GIB) on a host of {host_memory_gib():.1f} GiB",
        outcome,
        0,
        duplicated,
        round(seconds, 1),
    )
