"""What to deploy at each measured concurrency level, from the primary cells' settled words
(experiments/measurement/stats/sequential.py), and the batch-size schedule of k derived from them
(experiments/measurement/deploy/batch_schedule.derive) when an arm pays only at some levels.

Per level, the recommendation is the arm settled faster there with the largest speedup; no
speculation where every arm is settled (slower, equivalent or not worth it) and none faster;
and undecided where no arm is faster and some arm's cell is still open or inconclusive, since
more blocks could still call it faster. Only the primary cells count: their words hold the
family-wise error at 5 %, so a level is never recommended on an unadjusted word.

The derived schedule is a claim of the same evidence, not a measurement of its own: it is
labelled derived until an experiment runs it as an arm. Free of Django.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from experiments.measurement.deploy import batch_schedule
from experiments.measurement.stats import sequential

UNDECIDED = "undecided"
NO_SPECULATION = "no speculation"
RUN_ARM = "run arm"


@dataclass(frozen=True)
class ArmCells:
    """One speculative arm's primary cells: its k and, per level, the word and speedup."""

    arm: int
    label: str
    k: int
    cells: Mapping[int, tuple[str, float | None]]  # level: (outcome, point estimate)
    config: Mapping[str, object]  # the arm's --speculative-config


@dataclass(frozen=True)
class LevelAdvice:
    level: int
    word: str  # RUN_ARM, NO_SPECULATION or UNDECIDED
    arm: int | None = None  # the arm to run, for RUN_ARM
    speedup: float | None = None


@dataclass(frozen=True)
class Derived:
    """A batch-size schedule derived for one arm, and the --speculative-config that runs it."""

    arm: int
    schedule: list[batch_schedule.Band]
    config: dict[str, object]


@dataclass(frozen=True)
class Recommendation:
    levels: list[LevelAdvice]
    derived: Derived | None


def level_advice(level: int, arms: Sequence[ArmCells]) -> LevelAdvice:
    """What to run at one level, by the rule above (also applied per band of a service's load,
    experiments/measurement/deploy/service_bands.py)."""
    cells = [(arm.arm, arm.cells.get(level)) for arm in arms]
    faster = [
        (cell[1], arm_id)
        for arm_id, cell in cells
        if cell is not None and cell[1] is not None and cell[0] == sequential.FASTER
    ]
    if faster:
        speedup, arm_id = max(faster)
        return LevelAdvice(level, RUN_ARM, arm_id, speedup)
    settled = all(arm.cells.get(level, ("", None))[0] in sequential.SETTLED for arm in arms)
    return LevelAdvice(level, NO_SPECULATION if settled and arms else UNDECIDED)


def recommend(arms: Sequence[ArmCells], levels: Sequence[int], *, max_batch: int) -> Recommendation:
    """Per level in `levels`, what to run; and, when one arm is the recommendation at some
    levels and no speculation at the others (no level undecided between them), that arm's
    schedule of k over batch sizes 1..`max_batch` (max_num_seqs, or the top level)."""
    advice = [level_advice(level, arms) for level in sorted(levels)]
    return Recommendation(advice, _derived(advice, arms, max_batch=max_batch))


def _derived(advice: Sequence[LevelAdvice], arms: Sequence[ArmCells], *, max_batch: int) -> Derived | None:
    chosen = {item.arm for item in advice if item.word == RUN_ARM}
    if len(chosen) != 1 or any(item.word == UNDECIDED for item in advice):
        return None
    arm = next(a for a in arms if a.arm in chosen)
    outcomes = {item.level: sequential.FASTER if item.word == RUN_ARM else sequential.NOT_WORTH_IT for item in advice}
    schedule = batch_schedule.derive(outcomes, k=arm.k, max_batch=max_batch)
    if schedule is None:
        return None
    config = {**arm.config, batch_schedule.KEY: batch_schedule.stored(schedule)}
    return Derived(arm.arm, schedule, config)
