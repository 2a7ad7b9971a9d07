"""Scenarios that take a service away or repeat a message: Redis down while a form is posted,
PostgreSQL restarted during ingestion, the same task delivered twice, cancellations mid-run
and while a server starts, the web server restarted while a page polls."""

import contextlib
import threading
import time

from django.contrib.auth.models import User
from django.db import connection

from experiments.execution import services as execution
from experiments.models import Block, Experiment, RequestRecord, Run
from workers.bench.faults.browser import Browser
from workers.bench.faults.outcomes import PASSWORD, finished, group_gone, row, running_run, server_pgid, submit
from workers.bench.faults.rows import Row
from workers.bench.faults.stack import LogMark, Stack, wait_for
from workers.tasks import experiment_execute


def experiment_form(stack: Stack) -> dict[str, str]:
    """The experiment form as a person fills it in: the demo target, an n-gram arm, one block."""
    return {
        "name": "submitted while Redis was down", "description": "", "target_model": str(stack.models / "target"),
        "worker_queue": "cpu", "dtype": "float32", "max_model_len": "512", "workload_kind": "builtin",
        "prompt_set": "code_edit", "max_tokens": "32", "num_prompts": "12", "temperature": "0", "top_p": "1",
        "seed": "0", "concurrency_levels": "1, 2", "repetitions": "1", "server_per_block": "on",
        "equivalence_margin": "2", "warmup_requests": "1", "arms-TOTAL_FORMS": "1", "arms-INITIAL_FORMS": "0",
        "arms-0-method": "ngram", "arms-0-num_speculative_tokens": "3", "arms-0-prompt_lookup_min": "2",
        "arms-0-prompt_lookup_max": "4",
    }  # fmt: skip


def redis_down_at_submission(stack: Stack, owner: User) -> Row:
    browser = Browser(stack.url)
    browser.post("/login/", {"username": owner.username, "password": PASSWORD})
    stack.stop("redis")
    status, page = browser.post("/experiments/new/", experiment_form(stack))
    experiment = Experiment.objects.latest("id")
    waiting = "waiting for the task queue" in page
    stack.redis_start()
    back = time.monotonic()
    # The beat asks every 10 s; a consumer that lost Redis reconnects with a backoff of up to 30 s.
    wait_for(lambda: Experiment.objects.get(id=experiment.id).dispatched_at, timeout_s=180, what="dispatched")
    return row(
        "Redis down at submission",
        f"Redis stopped, form posted (HTTP {status}), Redis started",
        experiment,
        back,
        time.monotonic(),
        f"saved{', page said it waits for the broker' if waiting else ''}, dispatched once Redis answered",
    )


def postgres_restart_at_ingestion(stack: Stack, owner: User) -> Row:
    # Half-way through a run of 24 requests of 48 tokens, one at a time: PostgreSQL stays down
    # until the run has ended and its store has failed.
    experiment = submit(stack, owner, num_prompts=24, max_tokens=48, concurrency_levels=[1])
    running_run(experiment, done_at_least=12)
    stack.pg_stop()
    time.sleep(20)
    stack.pg_start()
    back = time.monotonic()
    connection.close()
    wait_for(lambda: experiment.runs.filter(status=Run.Status.SUCCEEDED).exists(), timeout_s=120, what="stored")
    stored = time.monotonic()
    spooled = "its results wait in" in (stack.folder / "worker-cpu.log").read_text()
    outcome = "store failed, results kept in the worker's spool, stored once PostgreSQL answered"
    return row(
        "PostgreSQL restarted during ingestion",
        "pg_ctl stop -m fast half-way through a run, started 20 s later",
        experiment,
        back,
        stored,
        outcome if spooled else "the run ended after PostgreSQL was back (no store failed)",
    )


def delivered_twice(stack: Stack, owner: User) -> Row:
    # The second worker starts once the first holds the experiment (its lease is taken), and
    # the task is sent again once the second worker is up: started before, it may take the
    # first delivery itself (the broker hands a message to either idle worker), and its log
    # would never say it found a holder. The holder still has its server start and both runs'
    # load ahead (24 prompts of 64 tokens each), so the second delivery reaches the idle
    # worker while the experiment is held even on a loaded host whose workers start slowly.
    experiment = submit(stack, owner, num_prompts=24, max_tokens=64)
    # Held: its lease taken, or (dispatched by block, issue 38) its one block claimed.
    claimed = Block.objects.filter(experiment_id=experiment.id, status=Block.Status.RUNNING)
    wait_for(
        lambda: claimed.exists() or Experiment.objects.filter(id=experiment.id).exclude(lease_owner="").exists(),
        timeout_s=120,
        what="the first worker holding the experiment",
        every_s=0.1,
    )
    mark = LogMark(stack, "worker-cpu2")
    stack.worker_start("cpu2")
    try:
        experiment_execute.apply_async(args=(experiment.id,), queue="cpu")
        sent = time.monotonic()
        held = ("held by another live worker", f"experiment {experiment.id}: every block is claimed")
        ended = f"experiment {experiment.id} is finished; nothing to do"

        def answered() -> str | None:
            said = mark.since()
            return said if any(text in said for text in (*held, ended)) else None

        said = wait_for(answered, timeout_s=120, what="the second delivery")
        seen = (
            "the second worker found the live holder and left it"
            if any(text in said for text in held)
            else "NOT TESTED: the experiment had finished before the second delivery reached the idle worker"
        )
        return row(
            "same task delivered twice",
            "the experiment's task sent again to a second idle worker",
            experiment,
            sent,
            time.monotonic(),
            seen,
        )
    finally:
        stack.stop("worker-cpu2")


def cancel_mid_run(stack: Stack, owner: User) -> Row:
    # Cancelled during the second run, so that the first one's results are there to keep;
    # 24 prompts of 48 tokens, so that the second run lasts long enough to be caught.
    experiment = submit(stack, owner, num_prompts=24, max_tokens=48)
    wait_for(
        lambda: experiment.runs.filter(status=Run.Status.SUCCEEDED).exists(),
        timeout_s=400,
        what="a run stored",
        every_s=0.1,
    )
    running_run(experiment)
    pgid = server_pgid(stack)
    execution.experiment_cancel(experiment=experiment, by=owner)
    cancelled = time.monotonic()
    group_gone(pgid, what="the server stopped")
    stopped = time.monotonic()
    finished(experiment)
    kept = RequestRecord.objects.filter(run__experiment=experiment, run__status=Run.Status.SUCCEEDED).count()
    return row(
        "cancellation mid-run",
        "experiment cancelled during its second run's load",
        experiment,
        cancelled,
        stopped,
        f"load and server stopped, the completed run kept ({kept} of its 24 request rows)",
    )


def cancel_during_start(stack: Stack, owner: User) -> Row:
    experiment = submit(stack, owner)
    server_dir = stack.data_dir / "server-pids"
    wait_for(lambda: list(server_dir.glob("*/*.pid")), timeout_s=120, what="a server starting", every_s=0.1)
    pgid = server_pgid(stack)
    time.sleep(10)  # into the start: Python imported, the engine loading (a start takes 25-60 s here)
    # Still loading: no run has begun its load.
    started_load = experiment.runs.filter(status=Run.Status.RUNNING, requests_done__gt=0).exists()
    execution.experiment_cancel(experiment=experiment, by=owner)
    cancelled = time.monotonic()
    group_gone(pgid, what="the starting server stopped")
    stopped = time.monotonic()
    finished(experiment)
    seen = (
        "NOT TESTED: the server was healthy and measuring before the cancel"
        if started_load
        else "the server that was still loading stopped, no run measured"
    )
    return row(
        "cancellation while the server starts",
        "experiment cancelled while its first vLLM server loads",
        experiment,
        cancelled,
        stopped,
        seen,
    )


def web_restart_while_polling(stack: Stack, owner: User) -> Row:
    experiment = submit(stack, owner)
    browser = Browser(stack.url)
    browser.post("/login/", {"username": owner.username, "password": PASSWORD})
    answers: list[tuple[float, int]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                answers.append((time.monotonic(), browser.get(f"/experiments/{experiment.id}/progress/")[0]))
            time.sleep(0.5)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    time.sleep(3)
    stack.stop("web")
    restarted = time.monotonic()
    stack.web_start()
    wait_for(lambda: any(at > restarted and code == 200 for at, code in answers), timeout_s=60, what="polls answered")
    recovered = min(at for at, code in answers if at > restarted and code == 200)
    stop.set()
    poller.join()
    errors = sorted({code for _, code in answers if code != 200})
    return row(
        "web server restarted while a page polls",
        "gunicorn stopped and started during 0.5 s polls",
        experiment,
        restarted,
        recovered,
        f"polls answered again; error codes seen: {errors or 'none'}",
    )
