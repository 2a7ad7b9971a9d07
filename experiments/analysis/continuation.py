"""Whether an experiment with blocks added until settled runs another block, and for which
arms (experiments/measurement/question.py decides its primary cells).

After every block from the third on, the worker asks `next_step`: another block while a
primary cell is open, the maximum is not reached and the device-minute budget allows it;
the page states the same step's reason once the experiment ends.
"""

from dataclasses import dataclass

from django.db.models import Max
from django.utils import timezone

from experiments.measurement import question
from experiments.models import Arm, Experiment

SETTLED = "settled"
MAXIMUM = "maximum"
BUDGET = "budget"
FIXED = "fixed"

STOP_REASON = {
    SETTLED: "every primary cell was settled",
    MAXIMUM: "the maximum of {max_blocks} blocks was reached with primary cells still open",
    BUDGET: "another block would have passed the budget of {budget:g} device-minutes",
    FIXED: "a fixed design runs every block it asked for",
}


@dataclass(frozen=True)
class Step:
    """What comes after the blocks run so far: `block` to add (None: none) for `arm_ids`,
    and why the experiment stops when it does."""

    blocks_run: int
    device_minutes: float
    block: int | None = None
    arm_ids: frozenset[int] = frozenset()
    stop: str = ""

    def stop_sentence(self, experiment: Experiment) -> str:
        return STOP_REASON[self.stop].format(
            max_blocks=experiment.repetitions, budget=experiment.max_device_minutes or 0
        )


def device_minutes(experiment: Experiment) -> float:
    """The device time the experiment has held its worker: wall minutes since it started
    (to its end, once it ended) times the GPUs each server spans."""
    if experiment.started_at is None:
        return 0.0
    end = experiment.finished_at or timezone.now()
    return (end - experiment.started_at).total_seconds() / 60 * experiment.tensor_parallel_size


def next_step(experiment: Experiment, decided: question.QuestionDecisions) -> Step:
    """The block to add next, or why none is added, from the primary cells' decisions over
    the blocks run so far (experiments/analysis/primary.py, final=False)."""
    blocks_run = experiment.runs.aggregate(last=Max("repetition"))["last"] or 0
    used = device_minutes(experiment)
    if not experiment.adds_blocks:
        return Step(blocks_run, used, stop=FIXED)
    if not decided.unsettled:
        return Step(blocks_run, used, stop=SETTLED)
    if blocks_run >= experiment.repetitions:
        return Step(blocks_run, used, stop=MAXIMUM)
    budget = experiment.max_device_minutes
    if budget is not None and blocks_run and used + used / blocks_run > budget:
        return Step(blocks_run, used, stop=BUDGET)
    arms = experiment.arms.filter(is_calibration=False)
    control = set(arms.filter(method=Arm.Method.BASELINE).values_list("id", flat=True))
    return Step(blocks_run, used, block=blocks_run + 1, arm_ids=frozenset(control | set(decided.open_arms())))
