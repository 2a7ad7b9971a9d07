"""How much of a block's spread comes from the server start and how much from the run, what
each costs, and the rounds per server session that would buy the most precision per second
(Kalibera & Jones, "Rigorous Benchmarking in Reasonable Time", ISMM 2013).

In a block every level of an arm runs on one server (docs/verdicts.md), so the block log ratio
at level l is y_bl = μ_l + s_b + e_bl: s_b is the part every level of block b shares (the
two servers' starts, variance σ_start²), e_bl the run's own (σ_run²). Across blocks, two
levels' log ratios then have covariance σ_start² and each level variance σ_start² + σ_run².

r rounds per session (every level run r times on one server) would make a block's ratio
vary by σ_start² + σ_run² / r at a cost of c_start + r · levels · c_run; the product is
smallest at r* = √((c_start / (levels · c_run)) · (σ_run² / σ_start²)). Rounds refine a
block's ratio; only blocks add degrees of freedom to the t-interval.

Django-free: experiments/analysis/variance.py reads the runs and their times into these
dataclasses.
"""

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import groupby, pairwise

import numpy as np

from experiments.measurement.stats import inference

MIN_BLOCKS = 3
MAX_ROUNDS = 10
ROUNDS_IN_EXPERIMENT = 1  # several rounds per server session are not executed (yet)


# ---------------------------------------------------------------- block log ratios by block


def block_ratios(
    runs: Sequence[inference.RunData],
    *,
    baseline: int,
    arms: Sequence[int],
    levels: Sequence[int],
    metrics: Sequence[str],
) -> dict[tuple[int, str], dict[int, dict[int, float]]]:
    """{(arm, metric): {level: {block: ratio}}}. Each block's runs go through
    inference.speedup_cells alone, so a ratio is the verdict's own estimand and keeps its
    block number (the cells' block_ratios skip a block without a ratio, which would shift
    the blocks of one level against another's)."""
    by_block: dict[int, list[inference.RunData]] = defaultdict(list)
    for run in runs:
        by_block[run.block].append(run)
    ratios: dict[tuple[int, str], dict[int, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for block, block_runs in sorted(by_block.items()):
        cells = inference.speedup_cells(
            block_runs, baseline=baseline, arms=arms, levels=levels, margin=0.0, metrics=metrics
        )
        for cell in cells:
            if cell.estimate.block_ratios:
                ratios[(cell.arm, cell.metric)][cell.level][block] = cell.estimate.block_ratios[0]
    return {key: dict(by_level) for key, by_level in ratios.items()}


# ---------------------------------------------------------------- the components


@dataclass(frozen=True)
class Components:
    """σ_start² and σ_run² of the block log ratios, or why they are not estimable (`reason`).

    `blocks`: the blocks with a ratio at every level, the only ones used. `start_floored`: the
    mean covariance across levels came out negative (`start_raw`) and σ_start² was set to 0.
    `run_floored_levels`: the levels whose variance was below σ_start², so that their own
    σ_run² would be negative (the pooled σ_run² is the mean over levels, floored at 0).
    """

    levels: int
    blocks: int
    var_start: float | None = None
    var_run: float | None = None
    start_raw: float | None = None
    start_floored: bool = False
    run_floored_levels: tuple[int, ...] = ()
    reason: str = ""

    @property
    def estimable(self) -> bool:
        return self.var_start is not None and self.var_run is not None


def _complete_blocks(ratios: Mapping[int, Mapping[int, float]]) -> list[int]:
    blocks = [set(by_block) for by_block in ratios.values()]
    return sorted(set.intersection(*blocks)) if blocks else []


def components(ratios: Mapping[int, Mapping[int, float]]) -> Components:
    """The components from {level: {block: ratio}} (ratios, not logs)."""
    levels = sorted(ratios)
    blocks = _complete_blocks(ratios)
    if not levels:
        return Components(0, 0, reason="no block with a ratio")
    if len(levels) < 2:
        reason = "one concurrency level: there is no covariance across levels to tell the start from the run"
        return Components(len(levels), len(blocks), reason=reason)
    if len(blocks) < MIN_BLOCKS:
        reason = f"{len(blocks)} block(s) with a ratio at every level; at least {MIN_BLOCKS} are needed"
        return Components(len(levels), len(blocks), reason=reason)
    logs = np.log(np.array([[ratios[level][block] for level in levels] for block in blocks]))
    covariance = np.cov(logs, rowvar=False, ddof=1)
    variances = np.diag(covariance)
    start_raw = float(covariance[~np.eye(len(levels), dtype=bool)].mean())
    var_start = max(0.0, start_raw)
    floored = tuple(level for level, variance in zip(levels, variances, strict=True) if variance < var_start)
    return Components(
        len(levels),
        len(blocks),
        var_start=var_start,
        var_run=max(0.0, float(variances.mean()) - var_start),
        start_raw=start_raw,
        start_floored=start_raw < 0,
        run_floored_levels=floored,
    )


# ---------------------------------------------------------------- the costs


@dataclass(frozen=True)
class RunTiming:
    """One run's wall time on its worker (epoch seconds) and the server session it ran in:
    runs with the same `session` key, one after another, shared a server."""

    arm: int
    session: tuple[int, ...]
    started_s: float
    finished_s: float
    succeeded: bool


@dataclass(frozen=True)
class Costs:
    """c_start and c_run in seconds (None where nothing was recorded), and from how many
    sessions and runs."""

    start_s: float | None
    run_s: float | None
    sessions: int = 0
    runs: int = 0


@dataclass(frozen=True)
class _Session:
    arm: int
    runs: list[RunTiming]

    @property
    def finished_s(self) -> float:
        return max(run.finished_s for run in self.runs)

    @property
    def busy_s(self) -> float:
        return sum(run.finished_s - run.started_s for run in self.runs)


def _sessions(timings: Sequence[RunTiming]) -> list[_Session]:
    ordered = sorted(timings, key=lambda run: run.started_s)
    groups = [list(group) for _, group in groupby(ordered, key=lambda run: run.session)]
    return [_Session(group[0].arm, group) for group in groups]


def start_times(timings: Sequence[RunTiming]) -> dict[int, list[float]]:
    """Per arm, each session's start-up estimate: the time from the end of the session before
    (on the same worker) to the end of this one, minus this one's runs. It holds stopping the
    previous server, starting this one and the gaps between runs. The first session is left
    out (its wait since the experiment started holds the model prefetch), and so are sessions
    with a failed run and negative estimates (clocks of different workers)."""
    sessions = _sessions(timings)
    starts: dict[int, list[float]] = defaultdict(list)
    for previous, session in pairwise(sessions):
        estimate = session.finished_s - previous.finished_s - session.busy_s
        if all(run.succeeded for run in session.runs) and estimate >= 0:
            starts[session.arm].append(estimate)
    return dict(starts)


def arm_costs(timings: Sequence[RunTiming], arm: int) -> Costs:
    """The arm's median start-up estimate and median run wall time (claimed to stored:
    warm-up, measured requests and storing the results), over its succeeded runs."""
    starts = start_times(timings).get(arm, [])
    runs = [run.finished_s - run.started_s for run in timings if run.arm == arm and run.succeeded]
    return Costs(
        statistics.median(starts) if starts else None, statistics.median(runs) if runs else None, len(starts), len(runs)
    )


def comparison_costs(baseline: Costs, arm: Costs) -> Costs:
    """A block of the comparison starts both servers and runs both sides: the mean of the two
    sides' costs has the ratio of their sums, which is all r* reads."""

    def mean(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else (a + b) / 2

    return Costs(
        mean(baseline.start_s, arm.start_s),
        mean(baseline.run_s, arm.run_s),
        baseline.sessions + arm.sessions,
        baseline.runs + arm.runs,
    )


# ---------------------------------------------------------------- rounds per server


@dataclass(frozen=True)
class Rounds:
    """r* unrounded (`exact`, inf when σ_start² is 0) and the whole number of rounds chosen,
    or None with `reason`."""

    rounds: int | None
    exact: float | None = None
    reason: str = ""


def _variance_per_cost(rounds: int, var: Components, c_start: float, c_round: float) -> float:
    assert var.var_start is not None
    assert var.var_run is not None
    return (var.var_start + var.var_run / rounds) * (c_start + rounds * c_round)


def rounds_per_server(var: Components, costs: Costs, *, max_rounds: int = MAX_ROUNDS) -> Rounds:
    """r* = √((c_start / c_round) · (σ_run² / σ_start²)), c_round = levels · c_run, made whole:
    of the two whole numbers around r* the one whose variance × cost is smaller (the fewer
    on a tie), clamped to [1, max_rounds]."""
    if not var.estimable:
        return Rounds(None, reason=var.reason)
    assert var.var_start is not None
    assert var.var_run is not None
    c_start, c_run = costs.start_s, costs.run_s
    if c_start is None or c_run is None or c_run <= 0:
        return Rounds(None, reason="the start-up or run times were not recorded")
    if var.var_start == 0 and var.var_run == 0:
        return Rounds(None, reason="the block ratios do not vary: any number of rounds gives the same")
    if var.var_start == 0:
        return Rounds(max_rounds, math.inf, "σ_start² is 0: only the cap limits the rounds")
    c_round = var.levels * c_run
    exact = math.sqrt(c_start / c_round * var.var_run / var.var_start)
    low = min(max(1, math.floor(exact)), max_rounds)
    high = min(low + 1, max_rounds)
    best = min((low, high), key=lambda r: (_variance_per_cost(r, var, c_start, c_round), r))
    return Rounds(best, exact)
