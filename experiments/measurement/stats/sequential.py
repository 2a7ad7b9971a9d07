"""Decisions on an experiment's primary cells: family-wise error control across them, and
blocks added until each is settled (docs/verdicts.md, "Decisive verdicts").

An experiment declares its question at submission: a primary metric and the concurrency
levels that matter. Its primary cells are every compared arm at every primary level on
that metric (the A/A replicate is a family of its own: a check on the host, not a
candidate). Those cells are tested together:

- Family-wise control by Holm's step-down over the cells: with h cells not yet called
  faster or slower, a cell is called when its p-value is within the level for alpha / h.
  Holm holds the family-wise error at alpha whatever the correlation between the cells
  (the arms share the baseline's runs, the levels share a server per block), which a
  Dunnett-style critical value would have to model; scripts/check_verdicts.py measures
  what that costs.
- Group-sequential looks: with a sequential design the cells are tested after each block
  from FIRST_LOOK on, up to the experiment's maximum. Each look has its own nominal
  p-level, from an alpha-spending boundary close to O'Brien and Fleming's (strict at the
  first looks, near a single look's level at the last; `look_levels`), chosen by
  simulating the looks' t statistics under no effect so that the chance of any false call
  over all looks is the family's share of alpha. When a cell is called, the others'
  boundary is recomputed for their larger share, as if from the start (the graphical
  group-sequential procedure of Maurer and Bretz). A fixed design has one look, at its
  last block.
- Settled otherwise: a cell is *equivalent* when its interval at the equivalence level
  (TOST at 5 % a side, adjusted for the looks the same way) lies inside 1 ± the margin,
  and *not worth it* (futility) when that interval's upper end lies below 1 + the
  smallest gain worth deploying. A cell stays open until it is settled; an open cell
  keeps the experiment adding blocks until the maximum, where it ends inconclusive.

A cell's word is fixed at the look that settled it: later blocks (run because another
cell was open) do not change it. Replaying the looks over the stored blocks gives the
same decisions, so nothing of the sequence needs storing. Plain Python and numpy, no Django.
"""

import functools
import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

import numpy as np
from scipy import stats as scipy_stats

from experiments.measurement.stats.intervals import RatioEstimate, block_interval
from experiments.measurement.stats.verdicts import TOO_FEW_BLOCKS

ALPHA = 0.05  # family-wise, over the primary cells, two-sided
EQUIVALENCE_ALPHA = 0.05  # per side, TOST
FIRST_LOOK = 3  # no look with fewer blocks: two blocks give one degree of freedom
SIMULATED_PATHS = 200_000
SIMULATION_SEED = 20261202
# The boundary: alpha spent as alpha · (n / N)^3, close to O'Brien and Fleming's (Design.spending;
# None is Pocock's). Chosen by scripts/check_decisions.py, "Boundaries": at the same
# family-wise error it calls more 10 % gains within the maximum than Pocock's (97.8 against
# 94.6 % of the demo's cells, 95.4 against 83.4 % in 4 × 4) and settles more no-effect arms
# (93.5 against 84.5 %, 86 against 73 %), because its last looks are close to a single look's level.
SPENDING = 3.0
# The boundaries an experiment may have been run with, by the name it stores
# (Experiment.boundary): a replay of its looks uses the one its blocks were added under.
POCOCK_BOUNDARY = "pocock"
SPENDING_BOUNDARY = "spending-3"
BOUNDARIES: dict[str, float | None] = {POCOCK_BOUNDARY: None, SPENDING_BOUNDARY: SPENDING}
# The test of a look, by the name an experiment stores (Experiment.verdict_method): each cell's t
# on its own blocks (experiments before issue 36, replayed so), or the block model's pooled spread
# with stopping-aware estimates (experiments/measurement/stats/block_decisions.py).
PER_CELL_T = "per-cell-t"
BLOCK_MODEL = "block-model"
METHODS = (PER_CELL_T, BLOCK_MODEL)

FASTER = "faster"
SLOWER = "slower"
EQUIVALENT = "equivalent"
NOT_WORTH_IT = "not worth it"
INCONCLUSIVE = "inconclusive"
OPEN = "open"
SETTLED = (FASTER, SLOWER, EQUIVALENT, NOT_WORTH_IT)

K = TypeVar("K", bound=Hashable)  # what names a cell: (arm, level) on the page


@dataclass(frozen=True)
class Design:
    """How an experiment's primary cells are tested.

    `max_blocks` is the most blocks the experiment may run; `sequential` looks after every
    block from FIRST_LOOK on (else once, after the last); `margin` is the equivalence
    margin and `worthwhile_gain` the smallest gain worth deploying, both fractions;
    `spending` the boundary's ρ (alpha spent as alpha · (n / N)^ρ), None for Pocock's;
    `method` the test of a look (METHODS).
    """

    max_blocks: int
    sequential: bool
    margin: float
    worthwhile_gain: float
    alpha: float = ALPHA
    spending: float | None = SPENDING
    method: str = BLOCK_MODEL

    @property
    def normal_looks(self) -> bool:
        """The boundary is calibrated on normal statistics (the block model's tests have many
        degrees of freedom) rather than on each cell's own t with blocks − 1."""
        return self.method == BLOCK_MODEL

    @property
    def looks(self) -> tuple[int, ...]:
        """The block counts after which the cells are tested: none below FIRST_LOOK blocks
        (two blocks give one degree of freedom, too few for a word)."""
        if self.max_blocks < FIRST_LOOK:
            return ()
        if not self.sequential or self.max_blocks == FIRST_LOOK:
            return (self.max_blocks,)
        return tuple(range(FIRST_LOOK, self.max_blocks + 1))


@dataclass(frozen=True)
class PrimaryCell(Generic[K]):
    """One primary cell's block ratios by block number, or why it cannot be called
    (a no-call reason of experiments/measurement/stats/verdicts.py: no data, failures differ,
    stream distorted, not applicable).

    `entered` is the first block the cell was measured in: a level a break-even search added
    later (experiments/measurement/planning/planner.py) has its own looks, counted in its own blocks
    (its first after FIRST_LOOK of them, its last at the design's maximum), each at the level
    its own boundary gives. Its blocks come after the data that chose it, so its p-values
    stay valid whatever chose it."""

    key: K
    ratios: Mapping[int, float]
    blocked: str | None = None
    entered: int = 1

    def own_looks(self, design: "Design") -> tuple[int, ...]:
        """The cell's looks, in its own blocks: a design of the blocks left when it entered."""
        if self.entered == 1:
            return design.looks
        return replace(design, max_blocks=design.max_blocks - self.entered + 1).looks


@dataclass(frozen=True)
class Decision(Generic[K]):
    """Where a primary cell stands.

    `outcome` is one of SETTLED, OPEN (more blocks may settle it), INCONCLUSIVE (the
    design's last look left it open) or the cell's no-call reason. `estimate` is the
    estimate at the deciding look, its interval at `confidence` (the adjusted level the
    call was tested at); `blocks` the blocks it rests on; `p_value` the two-sided t-test
    p-value of no effect at that look.

    On the block model (BLOCK_MODEL, experiments/measurement/stats/block_decisions.py) a settled
    or ended cell's `estimate` accounts for the look it stopped at (`stopping_aware`; its interval
    at 95 %, conditional on the stop), `plain` is the plain one at `confidence` and
    `test_interval` its ends (they exclude 1 exactly when the word is faster or slower);
    `to_settle` is about how many blocks in all would settle an unsettled cell at the levels its
    looks will test at (None: not planned, or beyond what a plan can say).
    """

    key: K
    outcome: str
    estimate: RatioEstimate
    confidence: float
    blocks: int
    p_value: float | None
    equivalence_interval: tuple[float, float] | None = None
    plain: RatioEstimate | None = None
    test_interval: tuple[float, float] | None = None
    stopping_aware: bool = False
    to_settle: int | None = None

    @property
    def settled(self) -> bool:
        return self.outcome in SETTLED

    @property
    def open(self) -> bool:
        return self.outcome == OPEN


# ---------------------------------------------------------------- the boundary


@functools.cache
def _null_p(looks: tuple[int, ...], normal: bool = False) -> np.ndarray:
    """Under no effect and normal block log ratios: per simulated experiment (a row), the
    two-sided p-value at each look (a column): of the t-test on the blocks so far, or with
    `normal` of the mean over its known standard error. The same paths serve every alpha."""
    rng = np.random.default_rng(SIMULATION_SEED)
    draws = rng.standard_normal((SIMULATED_PATHS, max(looks)))
    columns = []
    for n in looks:
        sample = draws[:, :n]
        if normal:
            columns.append(2 * scipy_stats.norm.sf(np.abs(sample.sum(axis=1)) / math.sqrt(n)))
            continue
        t = sample.mean(axis=1) / (sample.std(axis=1, ddof=1) / math.sqrt(n))
        columns.append(2 * scipy_stats.t.sf(np.abs(t), n - 1))
    return np.column_stack(columns)


@functools.cache
def look_levels(
    alpha: float, looks: tuple[int, ...], spending: float | None = None, normal: bool = False
) -> tuple[float, ...]:
    """The p-level of each look, so that under no effect the chance of a call at any look
    is alpha. One look (or none): alpha itself.

    `spending=None` is Pocock's boundary: one level for every look. A number ρ spends alpha
    as the power family α · (n / N)^ρ (Kim and DeMets): by the look after n of N blocks, at
    most that share of alpha has been spent. ρ = 3 is close to O'Brien and Fleming's
    boundary: strict at the first looks, where few blocks give few degrees of freedom, and
    close to alpha itself at the last. Calibrated on simulated t paths (normal ones with
    `normal`), look by look: a look's level lets through the paths, among those not called
    before, that its share of alpha allows."""
    if len(looks) <= 1:
        return (alpha,) * len(looks)
    p = _null_p(looks, normal)
    if spending is None:
        level = float(np.quantile(p.min(axis=1), alpha))
        return (level,) * len(looks)
    paths = len(p)
    alive = np.ones(paths, dtype=bool)
    levels = []
    for column, n in enumerate(looks):
        allowed = round(alpha * (n / looks[-1]) ** spending * paths) - (paths - int(alive.sum()))
        remaining = np.sort(p[alive, column])
        if allowed <= 0:
            level = float(remaining[0]) / 2
        elif allowed >= len(remaining):
            level = 1.0
        else:
            level = float(remaining[allowed - 1] + remaining[allowed]) / 2
        levels.append(level)
        alive &= p[:, column] > level
    return tuple(levels)


def nominal_level(
    alpha: float, looks: tuple[int, ...], look: int | None = None, spending: float | None = None, normal: bool = False
) -> float:
    """The p-level of the look after `look` blocks (the last look when None)."""
    levels = look_levels(alpha, looks, spending, normal)
    if not levels:
        return alpha
    return levels[looks.index(look) if look in looks else len(looks) - 1]


# ---------------------------------------------------------------- one cell at one look


@dataclass(frozen=True)
class _Look:
    estimate: RatioEstimate
    p_value: float | None
    at: int  # the look: after this many blocks
    looks: tuple[int, ...] | None = None  # the cell's own looks when it entered late (`at` counts its blocks)

    def boundary(self, design: Design) -> tuple[int, ...]:
        """The looks whose boundary this look is on: the design's, or the late cell's own."""
        return design.looks if self.looks is None else self.looks


def _look(ratios: Mapping[int, float], blocks: int) -> _Look:
    """The cell's estimate from its blocks up to `blocks`, with its t-test p-value."""
    values = [ratio for block, ratio in sorted(ratios.items()) if block <= blocks]
    estimate = block_interval(values)
    if estimate.log_sd is None:
        return _Look(estimate, None, blocks)
    logs = [math.log(value) for value in values]
    mean = statistics.fmean(logs)
    if estimate.log_sd == 0:
        return _Look(estimate, 1.0 if mean == 0 else 0.0, blocks)
    t = mean / (estimate.log_sd / math.sqrt(len(logs)))
    return _Look(estimate, float(2 * scipy_stats.t.sf(abs(t), len(logs) - 1)), blocks)


def _cell_look(cell: "PrimaryCell[K]", design: Design, blocks: int) -> _Look:
    """The cell's look after `blocks` blocks of the experiment; a cell that entered late is
    looked at after its own blocks, on its own boundary."""
    look = _look(cell.ratios, blocks)
    if cell.entered == 1:
        return look
    return replace(look, at=blocks - cell.entered + 1, looks=cell.own_looks(design))


def _equivalence_interval(look: _Look, design: Design) -> tuple[float, float] | None:
    """The interval of the TOST at EQUIVALENCE_ALPHA a side, adjusted for the looks."""
    if look.estimate.n_blocks < 2:
        return None
    level = nominal_level(2 * EQUIVALENCE_ALPHA, look.boundary(design), look.at, design.spending)
    interval = block_interval(look.estimate.block_ratios, confidence=1 - level)
    return interval.interval.lo, interval.interval.hi


def _settled_otherwise(interval: tuple[float, float] | None, design: Design, *, futility: bool) -> str | None:
    if interval is None:
        return None
    lo, hi = interval
    if 1 - design.margin <= lo and hi <= 1 + design.margin:
        return EQUIVALENT
    if futility and hi < 1 + design.worthwhile_gain:
        return NOT_WORTH_IT
    return None


# ---------------------------------------------------------------- the family over the looks


def _decision(key: K, look: _Look, outcome: str, confidence: float, design: Design) -> Decision[K]:
    estimate = look.estimate
    if estimate.n_blocks >= 2:
        estimate = block_interval(estimate.block_ratios, confidence=confidence)
    interval = _equivalence_interval(look, design)
    return Decision(key, outcome, estimate, confidence, look.estimate.n_blocks, look.p_value, interval)


def _holm_calls(looks: dict[K, _Look], family: int, design: Design) -> dict[K, tuple[str, float]]:
    """Holm's step-down at one look: {key: (direction, level it passed)} for the cells called
    faster or slower. `family` counts the cells not called before this look. Each cell is
    tested on its own boundary (a late cell's differs), so the step takes, among the cells
    within their level for alpha / h, the one with the smallest p-value; with one boundary
    for all this is Holm's order (the graphical procedure's result does not depend on it)."""
    called: dict[K, tuple[str, float]] = {}
    tested = {key: look for key, look in looks.items() if look.p_value is not None}
    while True:
        passing = [
            (look.p_value, index, key, level)
            for index, (key, look) in enumerate(tested.items())
            if key not in called and look.p_value is not None
            and look.p_value <= (level := _call_level(design, family - len(called), look))
        ]  # fmt: skip
        if not passing:
            return called
        _, _, key, level = min(passing)
        point = tested[key].estimate.point or 1.0
        called[key] = (FASTER if point > 1 else SLOWER, level)


def looks_taken(design: Design, blocks_run: int, final: bool) -> list[int]:
    """The looks reached after `blocks_run` blocks. A fixed design that stopped short of
    its blocks (runs failed, or it was cancelled) takes its one look at what it has."""
    taken = [n for n in design.looks if n <= blocks_run]
    if final and not taken and blocks_run >= FIRST_LOOK:
        return [blocks_run]
    return taken


def looked_at(cell: PrimaryCell[K], design: Design, look_at: int) -> bool:
    """Whether the experiment's look after `look_at` blocks is one of the cell's: always for a
    cell measured from the first block, from FIRST_LOOK of its own blocks for a late one."""
    return cell.entered == 1 or look_at - cell.entered + 1 in cell.own_looks(design)


def decide(
    cells: Sequence[PrimaryCell[K]], design: Design, *, blocks_run: int, final: bool, futility: bool = True,
    unmeasured: int = 0,
) -> list[Decision[K]]:  # fmt: skip
    """The decision on every primary cell after `blocks_run` blocks, replaying the looks.

    `final`: no more blocks will run (the experiment stopped), so a cell still open is
    inconclusive, or has too few blocks when no look was reached. `futility`: a cell may stop
    as not worth it (not for the A/A replicate, which is no candidate for deployment).
    `unmeasured`: cells of the family that were not measured (the grid levels a break-even
    search did not run); they count in Holm's family, so the family-wise error holds over
    every cell the search could have measured, whichever it chose.
    """
    decided: dict[K, Decision[K]] = {}
    for cell in cells:
        if cell.blocked is not None:
            decided[cell.key] = _decision(cell.key, _look(cell.ratios, blocks_run), cell.blocked, 0.95, design)
    family = sum(1 for cell in cells if cell.blocked is None) + unmeasured
    called = 0
    taken = looks_taken(design, blocks_run, final)
    for look_at in taken:
        looks = {
            cell.key: _cell_look(cell, design, look_at)
            for cell in cells
            if cell.key not in decided and looked_at(cell, design, look_at)
        }
        calls = _holm_calls(looks, family - called, design)
        called += len(calls)
        for key, look in looks.items():
            if key in calls:
                direction, level = calls[key]
                decided[key] = _decision(key, look, direction, 1 - level, design)
                continue
            otherwise = _settled_otherwise(_equivalence_interval(look, design), design, futility=futility)
            if otherwise is not None:
                confidence = 1 - _call_level(design, family - called, look)
                decided[key] = _decision(key, look, otherwise, confidence, design)
    for cell in cells:
        if cell.key not in decided:
            own = [look_at for look_at in taken if looked_at(cell, design, look_at)]
            still = unsettled_outcome(design, blocks_run, final=final, looked=bool(own))
            last = _cell_look(cell, design, own[-1]) if own else None
            confidence = 1 - _call_level(design, family - called, last)
            look = _cell_look(cell, design, blocks_run)
            decided[cell.key] = _decision(cell.key, look, still, confidence, design)
    return [decided[cell.key] for cell in cells]


def unsettled_outcome(design: Design, blocks_run: int, *, final: bool, looked: bool) -> str:
    """What a cell no look settled is: open while blocks may follow, else inconclusive
    (or too few blocks, when the experiment ended before its first look)."""
    if not final and blocks_run < design.max_blocks:
        return OPEN
    return INCONCLUSIVE if looked else TOO_FEW_BLOCKS


def _call_level(design: Design, unrejected: int, look: _Look | None) -> float:
    """The p-level a call must pass at `look` (None: the boundary's last), with `unrejected`
    cells not yet called (Holm's alpha / h on the cell's boundary). One minus it is the
    confidence of the interval shown for a cell not called: the level the next call would
    have to pass."""
    looks = design.looks if look is None else look.boundary(design)
    return nominal_level(design.alpha / max(1, unrejected), looks, None if look is None else look.at, design.spending)


def needs_another_block(decisions: Sequence[Decision[K]]) -> bool:
    """Whether any primary cell is still open."""
    return any(decision.open for decision in decisions)
