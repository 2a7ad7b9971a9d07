"""The one place that orchestrates across domains: an experiment finishing closes its
execution, then stores its analysis, then flags the decisions its result contradicts."""

import logging

from django.db import transaction
from django.utils import timezone

from experiments.analysis import continuation, primary
from experiments.analysis.loader import load_runs
from experiments.analysis.services import experiment_analyse
from experiments.decisions import services as decisions
from experiments.execution import block_claims, blocks
from experiments.execution.services import EXPERIMENT_TRANSITIONS, check_transition, experiment_record_environment
from experiments.models import Block, Experiment, IllegalTransition, Run

logger = logging.getLogger(__name__)


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
    check_transition(EXPERIMENT_TRANSITIONS, experiment.status, new, "Experiment")
    experiment.status = new
    experiment.finished_at = timezone.now()
    experiment.save(update_fields=["status", "finished_at"])
    experiment_record_environment(experiment=experiment)
    if new == Experiment.Status.FINISHED:
        _run_or_log(experiment_analyse, experiment)
        _run_or_log(decisions.decisions_flag_contradicted, experiment)
    return new


def _run_or_log(step, experiment: Experiment) -> None:
    """A failing analysis (or decision check) must not keep the finished runs from closing
    the experiment; the page then shows the runs' charts without verdicts, and the log says why."""
    try:
        with transaction.atomic():
            step(experiment=experiment)
    except Exception:
        logger.exception("%s of experiment %s failed", step.__name__, experiment.id)


@transaction.atomic
def experiment_block_add(*, experiment: Experiment) -> bool:
    """Once an experiment's queued runs are done: queue its next block when its design says
    to (experiments/analysis/continuation.py), under the budget as it stands now. False when no
    block is added: it can finish. The row is locked, so that a cancellation at the same moment
    wins or waits."""
    status, budget = (
        Experiment.objects.select_for_update().values_list("status", "max_device_minutes").get(id=experiment.id)
    )
    if status not in Experiment.ACTIVE_STATUSES or experiment.runs.open().exists():
        return False
    experiment.max_device_minutes = budget  # its owner may have changed it since the worker read the row
    return _blocks_add(experiment, room=1) > 0


def _blocks_add(experiment: Experiment, *, room: int) -> int:
    """Queue the blocks the design wants after the blocks completed so far, at most `room`
    (continuation.next_step); returns how many."""
    decided = primary.primary_decisions(experiment, load_runs(experiment), final=False)
    step = continuation.next_step(experiment, decided, room=room)
    if step.block is None:
        return 0
    arm_ids, levels = set(step.arm_ids), dict(step.levels) if step.levels is not None else None
    for due in step.confirm:
        arm = blocks.confirmation_arm_add(experiment=experiment, arm_id=due.arm, schedule=due.schedule)
        arm_ids.add(arm.id)
        if levels is not None:
            levels[arm.id] = due.levels
    for number in range(step.block, step.block + step.blocks):
        queued = blocks.block_queue(experiment=experiment, block=number, arm_ids=arm_ids, levels=levels)
        logger.info(
            "experiment %s: block %s added for %d runs (a primary cell is open)%s", experiment.id, number, len(queued),
            f"; arms {sorted(step.left_out)} left out for the budget" if step.left_out else "",
        )  # fmt: skip
    return step.blocks


@transaction.atomic
def experiment_block_done(*, experiment: Experiment, block_id: int | None, capacity: int) -> int:
    """A block of an experiment dispatched by block has no run left to do (issue 38): close it
    at its place in the completion order and take the look it allows, in one transaction under the
    experiment's lock, so that blocks finishing at once are looked at one after the other. Then
    queue the blocks the design wants next, keeping at most `capacity` in flight (the workers of
    its class that are idle or run it: experiments/execution/fleet_capacity.py); a break-even
    search places its next levels after each block, so it keeps one. `block_id` None: only the
    look (the worker found no block to claim and none in flight). Returns the blocks queued."""
    status, budget = (
        Experiment.objects.select_for_update().values_list("status", "max_device_minutes").get(id=experiment.id)
    )
    if block_id is not None:
        block_claims.block_close(block_id=block_id)
    if status not in Experiment.ACTIVE_STATUSES:
        return 0
    experiment.max_device_minutes = budget
    in_flight = block_claims.blocks_in_flight(experiment)
    room = (1 if experiment.search_range is not None else capacity) - in_flight
    return _blocks_add(experiment, room=room) if room > 0 else 0


def block_take_back(*, block: Block, reason: str) -> None:
    """A block whose worker stopped beating: released whole (queued again for another worker, or
    failed once it was tried Block.MAX_ATTEMPTS times), and closed with its look when nothing of
    it is left to run (every run ended before the worker could close it, or it failed)."""
    open_runs = block_claims.block_runs(block).open().exists()
    if open_runs and block_claims.block_release(block_id=block.id, reason=reason) == Block.Status.QUEUED:
        return
    experiment_block_done(experiment=block.experiment, block_id=block.id, capacity=1)
