"""Everything that writes. Services check the current state and raise IllegalTransition otherwise."""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from experiments import decisions, dispatch, profiles, teams
from experiments.analysis import experiment_analyse
from experiments.differences import hardware_label
from experiments.models import Arm, Comment, EnvironmentSnapshot, Experiment, IllegalTransition, ProfiledInterval, Run
from experiments.schedule import schedule

logger = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class ArmSpec:
    method: str
    num_speculative_tokens: int | None = None
    params: dict = field(default_factory=dict)
    label: str = ""
    is_replicate: bool = False
    synthetic_sweep: tuple[float, ...] = ()
    is_calibration: bool = False


REPLICATE_LABEL = "baseline replicate (A/A)"
CALIBRATION_LABEL = "calibration: draft model alone"


def _check_transition(table: dict, current: str, new: str, what: str) -> None:
    if new not in table[current]:
        raise IllegalTransition(f"{what} cannot go from {current} to {new}.")


def arm_default_label(spec: ArmSpec) -> str:
    if spec.is_replicate:
        return REPLICATE_LABEL
    if spec.is_calibration:
        model = spec.params["model"].rstrip("/")
        return f"{CALIBRATION_LABEL} ({model.rsplit('/', 1)[-1]})"
    if spec.method == Arm.Method.BASELINE:
        return "baseline"
    return f"{Arm.Method(spec.method).label} k={spec.num_speculative_tokens}"


def arm_servers(arms: list[Arm]) -> list[tuple[Arm, float | None]]:
    """What the block schedule shuffles: each arm's own server, then one server per length
    of an arm's synthetic acceptance sweep (its speculative config is a server flag). Without
    a sweep this is the arms themselves, so their schedule is what it always was."""
    return [(arm, None) for arm in arms] + [(arm, length) for arm in arms for length in arm.synthetic_sweep]


def calibration_specs(arms: list[ArmSpec]) -> list[ArmSpec]:
    """One calibration arm per distinct draft model of the draft-model arms: a draft's step
    time does not depend on how many tokens an arm asks it for, so arms that share a draft
    share its calibration."""
    models = dict.fromkeys(spec.params["model"] for spec in arms if spec.method == Arm.Method.DRAFT_MODEL)
    return [ArmSpec(method=Arm.Method.BASELINE, params={"model": model}, is_calibration=True) for model in models]


@transaction.atomic
def experiment_create(*, owner, arms: list[ArmSpec], team=None, **fields) -> Experiment:
    """Create the experiment, its baseline (and A/A replicate) and speculative arms, and
    every run, queued, with its place in the randomised block schedule.

    It belongs to `team`, which the owner must be in; without one, to the owner's only team
    (teams.team_for_write).

    The baseline arm, the replicate when `aa_replicate` is set and the calibration arms when
    `draft_calibration` is set are added here; `arms` lists the speculative arms only. The
    experiment is dispatched to its worker queue once the transaction commits.
    """
    experiment = Experiment.objects.create(owner=owner, team=teams.team_for_write(owner, team), **fields)
    specs = [ArmSpec(method=Arm.Method.BASELINE)]
    if experiment.aa_replicate:
        specs.append(ArmSpec(method=Arm.Method.BASELINE, is_replicate=True))
    specs += list(arms)
    if experiment.draft_calibration:
        specs += calibration_specs(arms)
    created = [
        Arm.objects.create(
            experiment=experiment,
            position=position,
            label=spec.label or arm_default_label(spec),
            method=spec.method,
            num_speculative_tokens=spec.num_speculative_tokens,
            params=spec.params,
            is_replicate=spec.is_replicate,
            synthetic_sweep=list(spec.synthetic_sweep),
            is_calibration=spec.is_calibration,
        )
        for position, spec in enumerate(specs)
    ]
    servers = arm_servers(created)
    slots = schedule(
        n_arms=len(servers),
        levels=experiment.concurrency_levels,
        blocks=experiment.repetitions,
        seed=experiment.seed,
        server_per_block=experiment.server_per_block,
    )
    Run.objects.bulk_create(
        Run(
            experiment=experiment,
            arm=servers[slot.arm_index][0],
            synthetic_acceptance_length=servers[slot.arm_index][1],
            concurrency=slot.level,
            repetition=slot.block,
            block_position=slot.block_position,
            level_position=slot.level_position,
        )
        for slot in slots
    )
    # Redis down at this moment leaves it queued for the periodic dispatcher, not lost.
    transaction.on_commit(lambda: dispatch.experiment_dispatch(experiment=experiment))
    return experiment


def experiment_mark_running(*, experiment: Experiment) -> None:
    """Queued → running, as a conditional update: a cancellation that lands between the
    worker reading the experiment and this call is not overwritten."""
    if experiment.status == Experiment.Status.RUNNING:
        return
    _check_transition(EXPERIMENT_TRANSITIONS, experiment.status, Experiment.Status.RUNNING, "Experiment")
    now = timezone.now()
    if not Experiment.objects.filter(id=experiment.id, status=experiment.status).update(
        status=Experiment.Status.RUNNING, started_at=now
    ):
        experiment.refresh_from_db(fields=["status", "started_at"])
        raise IllegalTransition(f"Experiment is {experiment.status} now; it was not started.")
    experiment.status, experiment.started_at = Experiment.Status.RUNNING, now


@transaction.atomic
def experiment_cancel(*, experiment: Experiment, by) -> None:
    """Stop a queued or running experiment: its open runs become cancelled, the runs that
    completed keep their results. The worker notices at its next progress report or before
    its next run, stops the load and its vLLM server (workers/runner.py)."""
    locked = Experiment.objects.select_for_update().get(id=experiment.id)
    _check_transition(EXPERIMENT_TRANSITIONS, locked.status, Experiment.Status.CANCELLED, "Experiment")
    now = timezone.now()
    experiment.runs.open().update(
        status=Run.Status.CANCELLED, finished_at=now, error=f"Cancelled by {by.get_username()}."
    )
    experiment.status, experiment.finished_at, experiment.cancelled_by = Experiment.Status.CANCELLED, now, by
    experiment.save(update_fields=["status", "finished_at", "cancelled_by"])
    experiment_record_environment(experiment=experiment)


@transaction.atomic
def experiment_finish(*, experiment: Experiment) -> Experiment.Status:
    """Close the experiment once no run is left to do: finished if any run succeeded.
    A finished experiment becomes visible together with its analysis. The row is locked
    and read again, so that a cancellation at the same moment wins or waits."""
    experiment.status = Experiment.objects.select_for_update().values_list("status", flat=True).get(id=experiment.id)
    if experiment.runs.open().exists():
        raise IllegalTransition("Experiment still has runs to do.")
    statuses = set(experiment.runs.values_list("status", flat=True))
    new = Experiment.Status.FINISHED if Run.Status.SUCCEEDED in statuses else Experiment.Status.FAILED
    _check_transition(EXPERIMENT_TRANSITIONS, experiment.status, new, "Experiment")
    experiment.status = new
    experiment.finished_at = timezone.now()
    experiment.save(update_fields=["status", "finished_at"])
    experiment_record_environment(experiment=experiment)
    if new == Experiment.Status.FINISHED:
        _run_or_log(experiment_analyse, experiment)
        _run_or_log(decisions.decisions_flag_contradicted, experiment)
    return new


def experiment_record_environment(*, experiment: Experiment) -> None:
    """Copy the vLLM version(s) and hardware its runs recorded onto the experiment, so that
    the history filters on them without reading every run's snapshot."""
    snapshots = EnvironmentSnapshot.objects.filter(run__experiment=experiment)
    rows = snapshots.values_list("vllm_version", "gpu_name", "gpu_count", "cpu_model").distinct()
    experiment.vllm_versions = sorted({version for version, *_ in rows if version})
    experiment.hardware = sorted({hardware_label(gpu_name=g, gpu_count=n, cpu_model=c) for _, g, n, c in rows})
    experiment.save(update_fields=["vllm_versions", "hardware"])


def _run_or_log(step, experiment: Experiment) -> None:
    """A failing analysis (or decision check) must not keep the finished runs from closing
    the experiment; the page then shows the runs' charts without verdicts, and the log says why."""
    try:
        with transaction.atomic():
            step(experiment=experiment)
    except Exception:
        logger.exception("%s of experiment %s failed", step.__name__, experiment.id)


def comment_add(*, experiment: Experiment, author, body: str) -> Comment:
    """A comment is kept as written: there is no edit and no delete."""
    return Comment.objects.create(experiment=experiment, author=author, body=body)


def experiments_without_work() -> list[Experiment]:
    """Running experiments none of whose runs is queued or running any more, and that no
    live worker process holds (a holder closes its experiment itself; closing it here too
    would race it)."""
    busy = Run.objects.open()
    running = Experiment.objects.filter(status=Experiment.Status.RUNNING, lease_owner="")
    return list(running.exclude(id__in=busy.values("experiment_id")))


def run_claim(*, run_id: int, worker_host: str, worker_name: str = "") -> bool:
    """Take a queued run for this worker (`worker_name`: its Celery node name; empty when no
    Celery worker executes it). False if another worker already has it."""
    now = timezone.now()
    changed = Run.objects.filter(id=run_id, status=Run.Status.QUEUED).update(
        status=Run.Status.RUNNING,
        started_at=now,
        heartbeat_at=now,
        worker_host=worker_host,
        worker_name=worker_name,
        error="",
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
    _check_transition(RUN_TRANSITIONS, run.status, new, "Run")
    run.status = new
    run.error = error
    run.finished_at = timezone.now()
    run.save(update_fields=["status", "error", "finished_at"])


@transaction.atomic
def run_mark_succeeded(*, run_id: int) -> None:
    _run_close(run_id=run_id, new=Run.Status.SUCCEEDED)


@transaction.atomic
def run_record_result(*, run_id: int, store: Callable[[], object]) -> bool:
    """Store a measured run's results (`store` writes its rows) and mark it succeeded, in one
    transaction, if the run still wants them: running, or queued again by the reaper while
    its worker waited for the database. False, writing nothing, when it was cancelled,
    failed or already stored."""
    run = Run.objects.select_for_update().get(id=run_id)
    if run.status not in Run.OPEN_STATUSES:
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
    experiment_ids = sorted(set(stale.filter(attempts__lt=max_attempts).values_list("experiment_id", flat=True)))
    dispatch.runs_requeue(stale, reason="The worker stopped reporting", max_attempts=max_attempts)
    return experiment_ids


def profiled_interval_record(
    *, experiment: Experiment, arm: Arm, level: int, summary: profiles.TraceSummary | None = None, **fields
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
        **{f"share_{phase}": shares.get(phase) for phase in profiles.PHASES},
    }
    interval, _ = ProfiledInterval.objects.update_or_create(arm=arm, concurrency=level, defaults=columns)
    return interval
