"""A simulated experiment decided as the page and the worker decide it
(inference.speedup_cells, then question.question_decisions, which replays the looks of
experiments/measurement/stats/sequential.py), run sequentially or as a fixed design.

The sequential design looks after each block (question_decisions with the runs so far,
final=False) until no candidate cell is open or the maximum is reached, then decides with
final=True; a block after the first look runs the baseline, the replicate and the arms
with an open cell only. Experiments are drawn with every arm in every block, and the
sequential design drops the runs of arms that had stopped (the host's timeline stays
that of the full schedule).
"""

from dataclasses import dataclass

import numpy as np

from experiments.measurement.stats import inference, objective, question, sequential
from experiments.simulation.simulator import BASELINE, MARGIN, METRIC, REPLICATE, Experiment, Shape

DEFAULT_MAX_BLOCKS = 10  # the form's defaults (Experiment.repetitions, worthwhile_gain)
DEFAULT_WORTHWHILE = 0.07


def decisions(
    runs: list[inference.RunData], shape: Shape, design: sequential.Design, *, final: bool, metric: str = METRIC,
    guards: tuple[objective.Guard, ...] = (),
) -> question.QuestionDecisions:  # fmt: skip
    """What the page and the worker decide on these runs (with `guards`: the service's objective's)."""
    cells = inference.speedup_cells(
        runs, baseline=BASELINE, arms=[REPLICATE, *shape.candidate_arms], levels=list(shape.levels),
        margin=design.margin, metrics=(metric,),
    )  # fmt: skip
    name = objective.CUSTOM if guards else objective.SINGLE_METRIC
    asked = question.Question(metric, shape.levels, design, guards=guards, objective=name)
    return question.question_decisions(
        runs, cells, baseline=BASELINE, candidates=shape.candidate_arms, replicate=REPLICATE, question=asked,
        final=final,
    )  # fmt: skip


@dataclass(frozen=True)
class Result:
    decided: question.QuestionDecisions
    blocks: int
    minutes: float


def run_sequential(
    experiment: Experiment, shape: Shape, design: sequential.Design, metric: str = METRIC,
    guards: tuple[objective.Guard, ...] = (),
) -> Result:  # fmt: skip
    """The experiment as the worker runs it: a look after each block, the stopped arms left out."""
    running = set(range(shape.arms))
    runs: list[inference.RunData] = []
    minutes = 0.0
    block = 0
    for block in range(1, design.max_blocks + 1):
        runs += [run for run in experiment.runs[block] if run.arm in running]
        minutes += sum(experiment.minutes[(block, arm)] for arm in running)
        decided = decisions(runs, shape, design, final=False, metric=metric, guards=guards)
        if not decided.unsettled:
            break
        running = {BASELINE, REPLICATE, *decided.open_arms()}
    return Result(decisions(runs, shape, design, final=True, metric=metric, guards=guards), block, minutes)


def run_fixed(experiment: Experiment, shape: Shape, blocks: int, *, worthwhile: float, metric: str = METRIC) -> Result:
    """The fixed design of `blocks` blocks: every arm in every block, one look at the end."""
    design = sequential.Design(blocks, sequential=False, margin=MARGIN, worthwhile_gain=worthwhile)
    runs = [run for block in range(1, blocks + 1) for run in experiment.runs[block]]
    minutes = sum(m for (block, _), m in experiment.minutes.items() if block <= blocks)
    return Result(decisions(runs, shape, design, final=True, metric=metric), blocks, minutes)


def design_of(
    max_blocks: int = DEFAULT_MAX_BLOCKS,
    worthwhile: float = DEFAULT_WORTHWHILE,
    spending: float | None = sequential.SPENDING,
) -> sequential.Design:
    """The sequential design the form makes of these settings."""
    return sequential.Design(max_blocks, sequential=True, margin=MARGIN, worthwhile_gain=worthwhile, spending=spending)


def naive_level(alpha: float, looks: tuple[int, ...], *args: object, **kwargs: object) -> float:
    """The negative control: every look at the unadjusted 5 % (no boundary, no Holm);
    the equivalence interval unadjusted for the looks too."""
    return max(alpha, sequential.ALPHA)


def block_spread(experiment: Experiment, shape: Shape, metric: str = METRIC) -> float:
    """The sd of the replicate's block log ratios on the metric, averaged over its levels."""
    runs = [run for block_runs in experiment.runs.values() for run in block_runs]
    spreads = []
    for level in shape.levels:
        ratios = inference.block_ratios(runs, metric, baseline=BASELINE, arm=REPLICATE, level=level)
        spreads.append(float(np.std(np.log(list(ratios.values())), ddof=1)))
    return float(np.mean(spreads))
