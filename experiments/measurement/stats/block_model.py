"""The spread of the block log ratios from what the blocks share (docs/verdicts.md, "The block
model"): the variance a look's test gives each primary cell, and its degrees of freedom.

Every arm and level of a block share the block's baseline server and its shocks, an arm's
levels share the arm's server, a level's arms share the baseline's run. So the log ratio of
arm a at level l in block b is

    y_alb = μ_al + β_b + γ_ab + δ_lb + ε_alb

with β the block's share (the baseline's start, the host's shock), γ the arm's start (shared
by its levels: the level-by-start structure of variance_components.py), δ the baseline's run
at the level (shared by the arms) and ε the run's own. Each cell's log ratios over blocks are
independent with one variance v = β + γ + δ + ε, so the cells' sample variances all estimate
v, and their pooled value (Σ sums of squares / Σ (blocks − 1)) has far more degrees of freedom
than one cell's blocks − 1 — fewer than their sum, because the cells of a block are correlated.
The degrees of freedom are Satterthwaite's for that pooled sum of squares (satterthwaite_df:
over the eigenvalues of the cells' covariance within a block, which the components give), held
low where its largest part — what every cell of a block shares — rests on few blocks. The
components are moment estimates: the mean covariance over pairs of cells of each kind (the same
arm, the same level, neither).

Pooling assumes one spread for all cells, which a noisy arm breaks (an n-gram proposer on the
host's cores answers to host load differently), and a test of the arms' spreads cannot see a
twofold difference in three or four blocks (taking the arms that fail it out of the pool biases
the pool of those left low: 11–18 % family-wise in simulation). So a cell's spread is the larger
of the pool's and its own arm's (its levels pooled, on their own degrees of freedom): an arm that
spreads more is never tested on the quieter arms' spread, and one that does not costs a quiet
arm only the times its own estimate comes out above the pool's. A cell whose own blocks spread
clearly more than that (F, one-sided at CELL_CHECK_P) is tested on its own blocks (blocks − 1
degrees of freedom), as a cell is without the model; it stays in the pool for the others, so the
pool is not biased by the check.

A cell needs two blocks for a variance of its own; a cell with fewer gets no test. Plain Python
and numpy, no Django.
"""

import functools
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from scipy import special
from scipy import stats as scipy_stats

K = TypeVar("K", bound=Hashable)
Layout = Callable[[K], tuple[Hashable, Hashable]]  # a cell's (arm, level)

# One-sided p-level of the check that a cell spreads more than its pool.
CELL_CHECK_P = 0.05
MIN_CELL_BLOCKS = 2
UNCERTAIN_SHARE_Q = 0.5

SAME_ARM, SAME_LEVEL, NEITHER = "same arm", "same level", "neither"


@dataclass(frozen=True)
class Spread:
    """What a cell's test takes for the spread of one block's log ratio: its `variance`, on `df`
    degrees of freedom, pooled over `cells` cells (1: the cell's own blocks), and `why` it is
    not pooled with the rest (empty when it is, or when there is nothing to pool with)."""

    variance: float
    df: float
    cells: int
    why: str = ""

    @property
    def sd(self) -> float:
        return math.sqrt(self.variance)

    def describe(self) -> str:
        if self.cells == 1:
            return f"own blocks, {self.df:.0f} df" + (f" ({self.why})" if self.why else "")
        return f"pooled over {self.cells} cells, {self.df:.1f} df"


@dataclass(frozen=True)
class Covariances:
    """The moment estimates: the variance of one cell's block log ratio and the covariance of two
    cells of a block, by kind of pair (SAME_ARM: β + γ, SAME_LEVEL: β + δ, NEITHER: β)."""

    variance: float
    between: Mapping[str, float]

    def of(self, kind: str) -> float:
        return self.between.get(kind, 0.0)


@dataclass(frozen=True, eq=False)
class _Cell:
    arm: Hashable
    level: Hashable
    logs: Mapping[int, float]  # block -> log ratio

    @property
    def n(self) -> int:
        return len(self.logs)

    @property
    def mean(self) -> float:
        return math.fsum(self.logs.values()) / self.n

    @property
    def sum_of_squares(self) -> float:
        mean = self.mean
        return math.fsum((value - mean) ** 2 for value in self.logs.values())


def _kind(a: _Cell, b: _Cell) -> str:
    if a.arm == b.arm:
        return SAME_ARM
    return SAME_LEVEL if a.level == b.level else NEITHER


def _pair_covariance(a: _Cell, b: _Cell) -> tuple[float, int] | None:
    """The sample covariance over the blocks both have, and its degrees of freedom."""
    shared = sorted(a.logs.keys() & b.logs.keys())
    if len(shared) < 2:
        return None
    x = np.array([a.logs[block] for block in shared])
    y = np.array([b.logs[block] for block in shared])
    return float(np.sum((x - x.mean()) * (y - y.mean())) / (len(shared) - 1)), len(shared) - 1


def covariances(cells: Sequence[_Cell]) -> Covariances:
    """The pooled variance and the mean covariance of each kind of pair (weighted by degrees of
    freedom), held between 0 and the variance, and no kind below NEITHER's (β is in every kind)."""
    df = sum(cell.n - 1 for cell in cells)
    variance = math.fsum(cell.sum_of_squares for cell in cells) / df if df else 0.0
    sums: dict[str, float] = {}
    weights: dict[str, int] = {}
    for i, a in enumerate(cells):
        for b in cells[i + 1 :]:
            pair = _pair_covariance(a, b)
            if pair is not None:
                kind = _kind(a, b)
                sums[kind] = sums.get(kind, 0.0) + pair[0] * pair[1]
                weights[kind] = weights.get(kind, 0) + pair[1]
    between = {kind: min(variance, max(0.0, sums[kind] / weights[kind])) for kind in sums}
    floor = between.get(NEITHER, 0.0)
    return Covariances(variance, {kind: max(value, floor) for kind, value in between.items()})


def satterthwaite_df(cells: Sequence[_Cell], cov: Covariances) -> float:
    """The degrees of freedom of the cells' pooled variance (Satterthwaite's E² / Var of its sum
    of squares), held low where its largest part is uncertain.

    Within a block the cells' log ratios have the covariance matrix Σ_block that `cov` gives;
    centred over blocks, the pooled sum of squares is Σ_j λ_j χ²(n − 1) over Σ_block's
    eigenvalues λ_j (each estimated with the blocks' n − 1 degrees of freedom, the smaller ones
    pooled with each other), so df = (n − 1) (Σ λ_j)² / Σ λ_j². The largest eigenvalue — the
    share every cell of a block has in common, the baseline's start and run — rests on n − 1
    degrees of freedom alone, and where it dominates, a plug-in df is too high exactly when the
    sample made it look small (and the variance with it): so it enters at its upper
    UNCERTAIN_SHARE_Q confidence bound, the others at theirs over their pooled degrees of
    freedom. With missing blocks n − 1 is the cells' mean; the df never exceed Σ (blocks − 1)."""
    total = float(sum(cell.n - 1 for cell in cells))
    per_cell = total / len(cells)
    if len(cells) == 1:
        return total
    matrix = np.array([[cov.variance if a is b else cov.of(_kind(a, b)) for b in cells] for a in cells])
    values = np.clip(np.linalg.eigvalsh(matrix), 0.0, None)[::-1]
    if values.sum() <= 0:
        return total
    rest_df = per_cell * (len(cells) - 1)
    values = values * np.array(
        [_upper_factor(per_cell)] + [_upper_factor(rest_df)] * (len(cells) - 1)
    )  # fmt: skip
    return float(min(total, per_cell * values.sum() ** 2 / np.sum(values * values)))


def _upper_factor(df: float) -> float:
    """A variance's upper UNCERTAIN_SHARE_Q bound over its estimate, on `df` degrees of freedom
    (rounded to a hundredth)."""
    return _chi2_factor(round(df, 2))


@functools.lru_cache(maxsize=4096)
def _chi2_factor(df: float) -> float:
    return float(df / scipy_stats.chi2.ppf(UNCERTAIN_SHARE_Q, df))


def _pooled(cells: Sequence[_Cell]) -> float:
    return math.fsum(cell.sum_of_squares for cell in cells) / sum(cell.n - 1 for cell in cells)


def _larger_spread_p(cell: _Cell, spread: Spread) -> float:
    """One-sided p-value of the cell spreading more than `spread` says (F on the two variances)."""
    if spread.variance <= 0:
        return 0.0 if cell.sum_of_squares > 0 else 1.0
    ratio = cell.sum_of_squares / (cell.n - 1) / spread.variance
    return float(special.fdtrc(cell.n - 1, spread.df, ratio))


def _spread(cells: list[_Cell], pool: Spread, arm: list[_Cell], cell: _Cell) -> Spread:
    """A cell's spread: the larger of the pool's and its arm's own (its levels pooled, on their
    own degrees of freedom), unless its own blocks spread clearly more than that (then its own)."""
    chosen = pool
    if 1 < len(arm) < len(cells) and _pooled(arm) > pool.variance:
        chosen = Spread(_pooled(arm), satterthwaite_df(arm, covariances(arm)), len(arm), "its arm spreads more")
    if chosen.cells > 1 and _larger_spread_p(cell, chosen) < CELL_CHECK_P:
        return Spread(cell.sum_of_squares / (cell.n - 1), cell.n - 1, 1, "it spreads more than the other cells")
    return chosen


def fit(ratios: Mapping[K, Mapping[int, float]], layout: Layout[K], *, upto: int | None = None) -> dict[K, Spread]:
    """Each cell's spread from {cell: {block: ratio}} (ratios, not logs) over the blocks up to
    `upto` (all when None). Cells with fewer than MIN_CELL_BLOCKS blocks are left out."""
    keys = list(ratios)
    frozen = tuple(
        (layout(key), tuple(sorted((b, r) for b, r in ratios[key].items() if upto is None or b <= upto)))
        for key in keys
    )
    return {keys[index]: spread for index, spread in _fit(frozen)}


Frozen = tuple[tuple[tuple[Hashable, Hashable], tuple[tuple[int, float], ...]], ...]


@functools.lru_cache(maxsize=2048)
def _fit(frozen: Frozen) -> tuple[tuple[int, Spread], ...]:
    """fit on a hashable copy of its input, by the cells' places in it: an analysis replays
    every look on every call."""
    cells = {
        index: _Cell(arm, level, {block: math.log(r) for block, r in items})
        for index, ((arm, level), items) in enumerate(frozen)
        if len(items) >= MIN_CELL_BLOCKS
    }
    if not cells:
        return ()
    usable = list(cells.values())
    pool = Spread(_pooled(usable), satterthwaite_df(usable, covariances(usable)), len(usable))
    arms = {arm: [cell for cell in usable if cell.arm == arm] for arm in dict.fromkeys(cell.arm for cell in usable)}
    return tuple((index, _spread(usable, pool, arms[cell.arm], cell)) for index, cell in cells.items())


def arm_and_level(key: Hashable) -> tuple[Hashable, Hashable]:
    """The layout of a (arm, level) key; any other key is a cell of its own arm and level."""
    if isinstance(key, tuple) and len(key) == 2:
        return key[0], key[1]
    return key, key
