"""The block as the unit of dispatch (issue 38): a worker of the experiment's queue claims a queued
block whole with a conditional update, runs every arm of it back to back on its host, beats the
block's lease while it does, and closes it; a block whose worker died is released whole: queued
again once (every run of it measured again on the next host, so that no block mixes hosts), then
failed with the reason.

The experiment's row lock serialises the claims, so the first claim fixes the experiment's
hardware class (experiments/execution/hardware_class.py) and a worker of another class is passed
over, with the reason stored for the page. Experiments without Block rows (stored before blocks
were dispatched, or one server per arm for all blocks) keep the experiment lease of
experiments/execution/dispatch.py.
"""

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from experiments.execution import dispatch, services
from experiments.execution.hardware_class import HardwareClass, passed_over_reason
from experiments.models import (
    Block,
    EnvironmentSnapshot,
    Experiment,
    FleetWorker,
    RequestRecord,
    Run,
    RunSummary,
)

logger = logging.getLogger(__name__)

# A stalled experiment (blocks queued, none running, its messages taken by workers that could not
# claim) is dispatched again once its last dispatch is this old.
REDISPATCH_AFTER = timedelta(seconds=60)


@dataclass(frozen=True)
class Seat:
    """The worker process asking for a block: its Celery node name, host, the GPUs it drives
    (CUDA_VISIBLE_DEVICES), its hardware class and its lease name (dispatch.lease_owner_name)."""

    name: str
    host: str
    gpu_ids: str
    hardware: HardwareClass
    owner: str


@dataclass(frozen=True)
class Claim:
    """What a claim got: a block, or (`block` None) nothing, with the reason the worker was
    passed over when its hardware class differs from the experiment's."""

    block: Block | None = None
    passed_over: str = ""


def dispatched_by_block(experiment: Experiment) -> bool:
    """Whether the experiment's blocks are dispatched one by one (it has Block rows)."""
    return Block.objects.filter(experiment_id=experiment.id).exists()


def blocks_create(experiment: Experiment, numbers: set[int]) -> None:
    """Block rows for newly queued block numbers of an experiment dispatched by block."""
    Block.objects.bulk_create([Block(experiment=experiment, number=n) for n in sorted(numbers)])


def experiment_class(experiment_id: int) -> HardwareClass | None:
    """The hardware class of the worker that claimed the experiment's first block."""
    first = FleetWorker.objects.filter(experiment_id=experiment_id, took_part=True).order_by("first_seen_at", "id")
    hardware = first.values_list("hardware", flat=True).first()
    return None if hardware is None else HardwareClass.of(hardware)


def _seen(experiment_id: int, seat: Seat, *, reason: str) -> None:
    """Record the worker on the experiment: taking part, or passed over with `reason`. A worker
    that took part keeps that mark and the hardware it claimed with (the first one's is the
    experiment's class); a reason given later says why it no longer claims."""
    fields = {"worker_host": seat.host, "gpu_ids": seat.gpu_ids, "hardware": seat.hardware.record()}
    row, created = FleetWorker.objects.get_or_create(
        experiment_id=experiment_id, worker_name=seat.name,
        defaults=fields | {"took_part": not reason, "reason": reason},
    )  # fmt: skip
    if created:
        return
    if row.took_part:
        FleetWorker.objects.filter(id=row.id).update(reason=reason, last_seen_at=timezone.now())
    else:
        FleetWorker.objects.filter(id=row.id).update(**fields, took_part=not reason, reason=reason)


def class_refusal(*, experiment_id: int, seat: Seat) -> str:
    """Why this worker may not take the experiment's blocks (recorded for the page), or "" when
    it may, or when no block was claimed yet (the first claim then sets the class)."""
    reference = experiment_class(experiment_id)
    reason = passed_over_reason(reference, seat.hardware) if reference is not None else ""
    if reason:
        _seen(experiment_id, seat, reason=reason)
    return reason


@transaction.atomic
def block_claim(*, experiment_id: int, seat: Seat) -> Claim:
    """The lowest queued block of the experiment, claimed for this worker, if its hardware class
    is the experiment's (the first claim sets it)."""
    experiment = Experiment.objects.select_for_update().get(id=experiment_id)
    if experiment.status not in Experiment.ACTIVE_STATUSES:
        return Claim()
    reason = class_refusal(experiment_id=experiment_id, seat=seat)
    if reason:
        return Claim(passed_over=reason)
    queued = Block.objects.filter(experiment_id=experiment_id, status=Block.Status.QUEUED).order_by("number").first()
    if queued is None:
        return Claim()
    now = timezone.now()
    claimed = Block.objects.filter(id=queued.id, status=Block.Status.QUEUED).update(
        status=Block.Status.RUNNING, worker_name=seat.name, worker_host=seat.host, gpu_ids=seat.gpu_ids,
        lease_owner=seat.owner, lease_at=now, claimed_at=now, attempts=F("attempts") + 1,
    )  # fmt: skip
    if not claimed:
        return Claim()
    _seen(experiment_id, seat, reason="")
    return Claim(Block.objects.get(id=queued.id))


def block_beat(*, block_id: int, owner: str) -> bool:
    """The holder's beat, with the heartbeat of the block's runs under way. False when the block
    is no longer this process's (the reaper released it, or it was cancelled)."""
    now = timezone.now()
    held = Block.objects.filter(id=block_id, lease_owner=owner, status=Block.Status.RUNNING)
    block = held.values_list("experiment_id", "number").first()
    if block is None or not held.update(lease_at=now):
        return False
    experiment_id, number = block
    Run.objects.filter(experiment_id=experiment_id, repetition=number, status=Run.Status.RUNNING).update(
        heartbeat_at=now
    )
    return True


@transaction.atomic
def run_claim_in_block(
    *, run_id: int, block_id: int, owner: str, worker_host: str, worker_name: str, server_start_s: float | None = None
) -> bool:
    """services.run_claim, only while this process holds the run's block: a block released
    meanwhile has its runs queued for another host, which this worker must leave alone."""
    if not Block.objects.select_for_update().filter(id=block_id, lease_owner=owner, status=Block.Status.RUNNING):
        return False
    return services.run_claim(
        run_id=run_id, worker_host=worker_host, worker_name=worker_name, server_start_s=server_start_s
    )


def block_runs(block: Block):
    return Run.objects.filter(experiment_id=block.experiment_id, repetition=block.number)


def block_close(*, block_id: int) -> bool:
    """A block none of whose runs is open any more: done (or failed, as block_release left it),
    at the next place of the experiment's completion order, which the sequential looks count in.
    Call it under the experiment's lock (experiments/lifecycle.py), so that two blocks finishing at
    once take distinct places. False when it still has runs to do, was cancelled or is closed."""
    block = Block.objects.select_for_update().get(id=block_id)
    if block.look_order is not None or block.status == Block.Status.CANCELLED or block_runs(block).open().exists():
        return False
    last = Block.objects.filter(experiment_id=block.experiment_id).aggregate(last=Max("look_order"))["last"] or 0
    block.status = Block.Status.FAILED if block.status == Block.Status.FAILED else Block.Status.DONE
    block.look_order, block.finished_at, block.lease_owner, block.lease_at = last + 1, timezone.now(), "", None
    block.save(update_fields=["status", "look_order", "finished_at", "lease_owner", "lease_at"])
    return True


def _forget_results(runs) -> None:
    """What the lost attempt stored for these runs: measured again on the next host."""
    ids = list(runs.values_list("id", flat=True))
    RequestRecord.objects.filter(run_id__in=ids).delete()
    RunSummary.objects.filter(run_id__in=ids).delete()
    EnvironmentSnapshot.objects.filter(run_id__in=ids).delete()


@transaction.atomic
def block_release(*, block_id: int, reason: str) -> str:
    """Take a block back from a worker that died: queued again whole (every run, the ones that
    completed on the lost host too, so that the block is measured on one host), or failed with
    `reason` once it has been tried Block.MAX_ATTEMPTS times (its open runs failed, what its last
    host completed kept). Returns the block's new status."""
    block = Block.objects.select_for_update().get(id=block_id)
    if not block.is_open:
        return block.status
    runs = block_runs(block).exclude(status=Run.Status.CANCELLED)
    note = f"Attempt {block.attempts} on {block.worker_name or block.worker_host or 'a worker'}: {reason}."
    if block.attempts >= Block.MAX_ATTEMPTS:
        error = f"{reason}; the block was tried {block.attempts} times on separate workers and is given up."
        runs.open().update(status=Run.Status.FAILED, finished_at=timezone.now(), error=error)
        block.status, block.lease_owner, block.lease_at = Block.Status.FAILED, "", None
        block.error = "\n".join(filter(None, [block.error, note, "Failed."]))
        block.save(update_fields=["status", "lease_owner", "lease_at", "error"])
        return block.status
    _forget_results(runs)
    runs.update(
        status=Run.Status.QUEUED, started_at=None, finished_at=None, heartbeat_at=None, requests_done=0,
        worker_host="", worker_name="", error="",
    )  # fmt: skip
    block.status, block.lease_owner, block.lease_at, block.worker_name, block.worker_host, block.gpu_ids = (
        Block.Status.QUEUED, "", None, "", "", "",
    )  # fmt: skip
    block.error = "\n".join(filter(None, [block.error, note + " Queued again whole."]))
    block.save(update_fields=["status", "lease_owner", "lease_at", "worker_name", "worker_host", "gpu_ids", "error"])
    return block.status


@transaction.atomic
def blocks_adopt_dead_here(*, experiment_id: int, owner: str) -> list[Block]:
    """Blocks of the experiment that a dead process of this same worker held (a pool process
    killed mid-run, whose replacement got the task): this process's now, on the same host and
    GPUs, with their runs under way queued again for a fresh server. The block stays whole."""
    adopted = []
    held = Block.objects.select_for_update().filter(experiment_id=experiment_id, status=Block.Status.RUNNING)
    for block in held.exclude(lease_owner=owner):
        if not dispatch.owner_dead_here(block.lease_owner, owner):
            continue
        Block.objects.filter(id=block.id).update(lease_owner=owner, lease_at=timezone.now())
        dispatch.runs_requeue(block_runs(block).filter(status=Run.Status.RUNNING), reason="Its worker process died")
        adopted.append(Block.objects.get(id=block.id))
    return adopted


def blocks_stale(*, stale_after: timedelta) -> list[Block]:
    """Blocks claimed by a worker process that stopped beating."""
    cutoff = timezone.now() - stale_after
    return list(Block.objects.filter(status=Block.Status.RUNNING, lease_at__lt=cutoff))


def experiments_stalled() -> list[Experiment]:
    """Active experiments dispatched by block with blocks queued and none running, whose last
    dispatch is REDISPATCH_AFTER old: the workers that took their messages could not claim (another
    hardware class), or the messages were lost."""
    cutoff = timezone.now() - REDISPATCH_AFTER
    queued = Block.objects.filter(status=Block.Status.QUEUED).values("experiment_id")
    running = Block.objects.filter(status=Block.Status.RUNNING).values("experiment_id")
    active = Experiment.objects.active().filter(id__in=queued, dispatched_at__lt=cutoff)
    return list(active.exclude(id__in=running))


def blocks_in_flight(experiment: Experiment) -> int:
    return Block.objects.filter(experiment_id=experiment.id).open().count()


def block_holders(experiment_id: int) -> set[str]:
    """The workers (node names) holding the experiment's blocks now."""
    held = Block.objects.filter(experiment_id=experiment_id, status=Block.Status.RUNNING)
    return set(held.values_list("worker_name", flat=True))
