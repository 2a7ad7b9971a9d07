"""The writes of an experiment's execution: the run state machine (claim, heartbeat, result,
failure, requeue), an experiment starting or cancelled, its recorded environment and its
profiled intervals. Services check the current state and raise IllegalTransition otherwise."""

from collections.abc import Callable
from datetime import timedelta

from django.db import transaction
from django.db.models import Exists, F, OuterRef
from django.db.models.functions import Coalesce
from django.utils import timezone

from experiments.execution import dispatch
from experiments.measurement.engine import trace_shares
from experiments.measurement.stats.differences import hardware_label
from experiments.models import (
    Arm,
    Block,
    EnvironmentSnapshot,
    Experiment,
    IllegalTransition,
    ProfiledInterval,
    Run,
)

RUN_TRANSITIONS = {
    Run.Status.QUEUED: {Run.Status.RUNNING, Run.Status.CANCELLED, Run.Status.FAILED},
    Run.Status.RUNNING: {Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.QUEUED, Run.Status.CANCELLED},
    Run.Status.SUCCEEDED: set(),
    Run.Status.FAILED: set(),
    Run.Status.CANCELLED: set(),
}

EXPERIMENT_TRANSITIONS = {
    Experiment.Status.QUEUED: {Experiment.Status.RUNNING, Experiment.Status.CANCELLED, Experiment.Status.FAILED},
    Experiment.Status.RUNNING: {Experiment.Status.FINISHED, Experiment.Status.FAILED, Experiment.Status.CANCELLED},
    Experiment.Status.FINISHED: set(),
    Experiment.Status.FAILED: set(),
    Experiment.Status.CANCELLED: set(),
}


def check_transition(table: dict, current: str, new: str, what: str) -> None:
    if new not in table[current]:
        raise IllegalTransition(f"{what} cannot go from {current} to {new}.")


def experiment_mark_running(*, experiment: Experiment) -> None:
    """Queued → running, as a conditional update: a cancellation that lands between the
    worker reading the experiment and this call is not overwritten."""
    if experiment.status == Experiment.Status.RUNNING:
        return
    check_transition(EXPERIMENT_TRANSITIONS, experiment.status, Experiment.Status.RUNNING, "Experiment")
    now = timezone.now()
    if not Experiment.objects.filter(id=experiment.id, status=experiment.status).update(
        status=Experiment.Status.RUNNING, started_at=now
    ):
        experiment.refresh_from_db(fields=["status", "started_at"])
        if experiment.status == Experiment.Status.RUNNING:
            return  # another worker of its queue started it meanwhile (a fleet's blocks: issue 38)
        raise IllegalTransition(f"Experiment is {experiment.status} now; it was not started.")
    experiment.status, experiment.started_at = Experiment.Status.RUNNING, now


@transaction.atomic
def experiment_cancel(*, experiment: Experiment, by) -> None:
    """Stop a queued or running experiment: its open runs become cancelled, the runs that
    completed keep their results. The worker notices at its next progress report or before
    its next run, stops the load and its vLLM server (workers/runner.py)."""
    locked = Experiment.objects.select_for_update().get(id=experiment.id)
    check_transition(EXPERIMENT_TRANSITIONS, locked.status, Experiment.Status.CANCELLED, "Experiment")
    now = timezone.now()
    experiment.runs.open().update(
        status=Run.Status.CANCELLED, finished_at=now, error=f"Cancelled by {by.get_username()}."
    )
    # Every worker holding one of its blocks stops at its next check (workers/runner.py).
    Block.objects.filter(experiment=experiment).open().update(
        status=Block.Status.CANCELLED, finished_at=now, lease_owner="", lease_at=None
    )
    experiment.status, experiment.finished_at, experiment.cancelled_by = Experiment.Status.CANCELLED, now, by
    experiment.save(update_fields=["status", "finished_at", "cancelled_by"])
    experiment_record_environment(experiment=experiment)


@transaction.atomic
def experiment_budget_set(*, experiment: Experiment, minutes: float | None) -> None:
    """Change a queued or running experiment's device-minute budget (None: blocks only). The
    worker reads it before deciding each next block (experiments/lifecycle.py), so a raised
    budget lets a design that would have stopped go on, a lowered one stops it sooner."""
    locked = Experiment.objects.select_for_update().get(id=experiment.id)
    if locked.status not in Experiment.ACTIVE_STATUSES:
        raise IllegalTransition(f"Experiment is {locked.status}: its budget no longer decides anything.")
    experiment.max_device_minutes = minutes
    experiment.save(update_fields=["max_device_minutes"])


def experiment_record_environment(*, experiment: Experiment) -> None:
    """Copy the vLLM version(s) and hardware its runs recorded onto the experiment, so that
    the history filters on them without reading every run's snapshot."""
    snapshots = EnvironmentSnapshot.objects.filter(run__experiment=experiment)
    rows = snapshots.values_list("vllm_version", "gpu_name", "gpu_count", "cpu_model").distinct()
    experiment.vllm_versions = sorted({version for version, *_ in rows if version})
    experiment.hardware = sorted({hardware_label(gpu_name=g, gpu_count=n, cpu_model=c) for _, g, n, c in rows})
    experiment.save(update_fields=["vllm_versions", "hardware"])


def experiments_without_work() -> list[Experiment]:
    """Running experiments none of whose runs is queued or running any more, and that no
    live worker process holds (a holder closes its experiment itself; closing it here too
    would race it)."""
    busy = Run.objects.open()
    running = Experiment.objects.filter(status=Experiment.Status.RUNNING, lease_owner="")
    # A block in flight is closed, with its look, by its worker (or the reaper's take-back).
    running = running.exclude(id__in=Block.objects.open().values("experiment_id"))
    return list(running.exclude(id__in=busy.values("experiment_id")))


def run_claim(*, run_id: int, worker_host: str, worker_name: str = "", server_start_s: float | None = None) -> bool:
    """Take a queued run for this worker (`worker_name`: its Celery node name; empty when no
    Celery worker executes it). False if another worker already has it.

    `server_start_s`: the seconds its server took to start, given with the first run a server
    session claims (device time, experiments/analysis/device_time.py). It adds to what the run
    carries: a run queued again after its server died still carries that server's start, which
    held the devices too."""
    now = timezone.now()
    start = {} if server_start_s is None else {"server_start_s": Coalesce("server_start_s", 0.0) + server_start_s}
    changed = Run.objects.filter(id=run_id, status=Run.Status.QUEUED).update(
        status=Run.Status.RUNNING,
        started_at=now,
        heartbeat_at=now,
        worker_host=worker_host,
        worker_name=worker_name,
        error="",
        **start,
    )
    if changed:
        Run.objects.filter(id=run_id).update(attempts=F("attempts") + 1)
    return bool(changed)


def run_heartbeat(*, run_id: int, requests_done: int, requests_total: int) -> bool:
    """Record the run's progress. False when it is no longer running (cancelled, or taken
    back by the reaper): the worker then stops its load."""
    return bool(
        Run.objects.filter(id=run_id, status=Run.Status.RUNNING).update(
            heartbeat_at=timezone.now(), requests_done=requests_done, requests_total=requests_total
        )
    )


def _run_close(*, run_id: int, new: str, error: str = "") -> None:
    run = Run.objects.select_for_update().get(id=run_id)
    check_transition(RUN_TRANSITIONS, run.status, new, "Run")
    run.status = new
    run.error = error
    run.finished_at = timezone.now()
    run.save(update_fields=["status", "error", "finished_at"])


@transaction.atomic
def run_mark_succeeded(*, run_id: int) -> None:
    _run_close(run_id=run_id, new=Run.Status.SUCCEEDED)


def _still_held(run: Run, worker_name: str) -> bool:
    """Whether the worker that measured the run still holds it. A run of a block dispatched by
    block takes its results only from the worker holding the block: a block released meanwhile
    is measured whole on another host (experiments/execution/block_claims.py)."""
    block = Block.objects.filter(experiment_id=run.experiment_id, number=run.repetition).first()
    if block is None or not block.attempts:
        return True
    return block.status == Block.Status.RUNNING and block.worker_name == worker_name


@transaction.atomic
def run_record_result(*, run_id: int, store: Callable[[], object], worker_name: str | None = None) -> bool:
    """Store a measured run's results (`store` writes its rows) and mark it succeeded, in one
    transaction, if the run still wants them from the worker `worker_name` that measured it:
    running, or queued again by the reaper while its worker waited for the database (not so
    for a block released to another host). False, writing nothing, when it was cancelled,
    failed or already stored."""
    run = Run.objects.select_for_update().get(id=run_id)
    if run.status not in Run.OPEN_STATUSES:
        return False
    if worker_name is not None and not _still_held(run, worker_name):
        return False
    store()
    now = timezone.now()
    run.status, run.error, run.finished_at, run.started_at = Run.Status.SUCCEEDED, "", now, run.started_at or now
    run.save(update_fields=["status", "error", "finished_at", "started_at"])
    return True


@transaction.atomic
def run_mark_failed(*, run_id: int, error: str) -> None:
    _run_close(run_id=run_id, new=Run.Status.FAILED, error=error)


@transaction.atomic
def runs_requeue_stale(*, stale_after: timedelta, max_attempts: int = dispatch.MAX_ATTEMPTS) -> list[int]:
    """Runs whose heartbeat went stale: queue them again, or fail them once they have been
    tried `max_attempts` times. Returns the ids of the experiments that have runs to do again."""
    stale = Run.objects.filter(status=Run.Status.RUNNING, heartbeat_at__lt=timezone.now() - stale_after)
    # A block's runs live and die with its lease: a stale block is released whole (block_claims.py).
    blocks = Block.objects.filter(experiment_id=OuterRef("experiment_id"), number=OuterRef("repetition"))
    stale = stale.exclude(Exists(blocks))
    experiment_ids = sorted(set(stale.filter(attempts__lt=max_attempts).values_list("experiment_id", flat=True)))
    dispatch.runs_requeue(stale, reason="The worker stopped reporting", max_attempts=max_attempts)
    return experiment_ids


def profiled_interval_record(
    *, experiment: Experiment, arm: Arm, level: int, summary: trace_shares.TraceSummary | None = None, **fields
) -> ProfiledInterval:
    """Store (or replace) the profiled interval of an arm at a level, with its trace's shares.
    `fields`: the interval's other columns (requests, trace path, error …)."""
    shares = summary.shares if summary is not None else {}
    columns = {
        **fields,
        "experiment": experiment,
        "steps": summary.steps if summary is not None else None,
        "profiled_ms": summary.total_ms if summary is not None else None,
        "top_events": summary.top_events if summary is not None else [],
        **{f"share_{phase}": shares.get(phase) for phase in trace_shares.PHASES},
    }
    interval, _ = ProfiledInterval.objects.update_or_create(arm=arm, concurrency=level, defaults=columns)
    return interval
