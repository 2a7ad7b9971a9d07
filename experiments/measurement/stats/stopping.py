"""Estimates that account for where a sequential test stopped (docs/verdicts.md, "After the
stop"): a primary cell called at a look was called because its blocks looked good then, so its
plain mean over those blocks overstates the effect (1.2–1.6 × the truth on a noisy host), and
an interval around it misses the truth far more often than it says.

The estimate here is conditional on the cell's path: it stopped at the look it stopped at, with
the word it got, having passed none of the earlier looks' thresholds. With the spread σ of one
block's log ratio taken as known, the sum S_k of the cell's first n_k block log ratios is a
random walk with drift μ, and the density of S at the stopping look, over the paths that went on
at every earlier look, is f_0(s) · exp(μs/σ² − μ²n/2σ²): an exponential family in μ with S
sufficient (the path's shape does not depend on μ). So the conditional distribution of S given
the stop is f_0 tilted by exp(μs/σ²) and cut to the stopping region, and its CDF at the observed
S falls in μ. The median-unbiased estimate is the μ that puts the observed S at the conditional
median, the 95 % interval the μ's that put it at 97.5 % and 2.5 % (the stopping-time-conditional
inference of Fan, DeMets and Lan, 2004; f_0 by the recursive numerical integration of Armitage,
McPherson and Rowe, 1969). Conditional on the stop, the interval covers the truth 95 % of the
time under that model, for every μ; the simulation (experiments/simulation/verdict_audit.py)
checks it on data that do not follow it.

The word was decided by the family's test, not by this interval, and the estimate keeps to its
side: a cell called faster gets a point and a lower end of at least 1 (a conditional estimate
below 1 would contradict the call, which the family holds at 5 %), one not worth it keeps
within the band it was shown in. Plain Python and numpy, no Django.
"""

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as scipy_stats

CONFIDENCE = 0.95
GRID_STEP = 0.08  # in units of one block's standard deviation on the sum's scale
TAIL = 9.0  # how far past the observed sum (in its standard deviations) an open stopping region is integrated
BRACKET = 40.0  # how far from the plain mean (in standard errors) the estimate is looked for

# Where the cell's mean stopped (the stopping region of its word).
UP = "up"  # called faster: mean ≥ the call threshold
DOWN = "down"  # called slower: mean ≤ −the call threshold
SETTLE = "settle"  # stopped otherwise: mean inside the settling range, not called
GO_ON = "go on"  # ended at the last look without a word: neither called nor settled


@dataclass(frozen=True)
class LookBounds:
    """One look the cell was tested at, on the scale of its mean log ratio: `blocks` it had, the
    distance from 0 the mean had to pass to be called (`call`), and the range of the mean in which
    it would have stopped otherwise (`settle`; None where nothing settles it)."""

    blocks: int
    call: float
    settle: tuple[float, float] | None = None


@dataclass(frozen=True)
class Stopped:
    """The estimate of μ (the mean log ratio) conditional on the stop, with its interval."""

    point: float
    lo: float
    hi: float


def _continues(values: np.ndarray, look: LookBounds) -> np.ndarray:
    """Where a mean goes on past the look: not called, not settled."""
    going: np.ndarray = np.abs(values) < look.call
    if look.settle is not None:
        lo, hi = look.settle
        going &= ~((values > lo) & (values < hi))
    return going


def _stops(values: np.ndarray, look: LookBounds, region: str) -> np.ndarray:
    if region == GO_ON:
        return _continues(values, look)
    stops: np.ndarray
    if region == UP:
        stops = values >= look.call
    elif region == DOWN:
        stops = values <= -look.call
    else:
        assert look.settle is not None, "a cell settled at a look without a settling range"
        lo, hi = look.settle
        stops = (values > lo) & (values < hi) & (np.abs(values) < look.call)
    return stops


def _merged(path: Sequence[LookBounds]) -> list[list[LookBounds]]:
    """The looks grouped by the blocks they had: a cell without a new block at a look (a missing
    run) was tested again on the same mean, which had to go on past both thresholds."""
    groups: list[list[LookBounds]] = []
    for look in path:
        if groups and groups[-1][0].blocks == look.blocks:
            groups[-1].append(look)
        else:
            groups.append([look])
    return groups


def _density_at_stop(
    path: Sequence[LookBounds], region: str, sd: float, observed: float
) -> tuple[np.ndarray, np.ndarray]:
    """Under μ = 0, on a grid of the last look's sum S (in units of σ) over the stopping region,
    the density of the paths that went on at every earlier look; the grid holds the observed sum
    as a node. The grids lie on one lattice of GRID_STEP, so that each step from a look to the
    next is a discrete convolution with the normal density of the blocks in between; an earlier
    look's grid spans only where the mean went on (inside its call)."""
    groups = _merged(path)
    first = 0  # lattice index of the grid's first point
    density = np.zeros(0)
    previous = 0
    for index, group in enumerate(groups):
        n = group[0].blocks
        call = min(look.call for look in group) * n / sd
        last = index == len(groups) - 1
        lo, hi = _final_range(call, region, observed * n / sd, math.sqrt(n)) if last else (-call, call)
        start, stop = math.ceil(lo / GRID_STEP), math.floor(hi / GRID_STEP)
        grid = np.arange(start, stop + 1) * GRID_STEP
        exact = np.array([lo, hi, observed * n / sd]) if last else np.zeros(0)  # the region's ends, the observation
        if index == 0:
            new = _normal_pdf(grid / math.sqrt(n)) / math.sqrt(n)
            at_exact = _normal_pdf(exact / math.sqrt(n)) / math.sqrt(n)
        else:
            spread = math.sqrt(n - previous)
            reach = math.ceil(TAIL * spread / GRID_STEP)
            kernel = _normal_pdf(np.arange(-reach, reach + 1) * GRID_STEP / spread) * GRID_STEP / spread
            full = np.convolve(density, kernel)  # from lattice index first - reach on
            offset = start - (first - reach)
            new = np.zeros(len(grid))
            take = slice(max(0, -offset), min(len(grid), len(full) - offset))
            new[take] = full[take.start + offset : take.stop + offset]
            sums = (np.arange(len(density)) + first) * GRID_STEP
            at_exact = _normal_pdf((exact[:, None] - sums[None, :]) / spread) @ density * GRID_STEP / spread
        if not last:
            means = grid * sd / n
            for look in group:
                new = np.where(_continues(means, look), new, 0.0)
        first, density, previous = start, new, n
    nodes = np.concatenate([(np.arange(len(density)) + first) * GRID_STEP, exact])
    order = np.argsort(nodes, kind="stable")
    return nodes[order], np.concatenate([density, at_exact])[order]


def _final_range(call: float, region: str, observed: float, scale: float) -> tuple[float, float]:
    """The last look's range of sums: an open stopping region reaches TAIL standard deviations
    past the observed sum, a bounded one (settled, gone on) lies inside the call."""
    if region == UP:
        return call, max(call, observed) + TAIL * scale
    if region == DOWN:
        return min(-call, observed) - TAIL * scale, -call
    return -call, call


def _normal_pdf(z: np.ndarray) -> np.ndarray:
    density: np.ndarray = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return density


def _cdf(theta: float, nodes: np.ndarray, density: np.ndarray, gaps: np.ndarray, below: np.ndarray) -> float:
    """P(S ≤ observed | the stop) under drift θ (per block, in units of σ): the trapezoid
    integral of the tilted density over the grid's intervals below the observed sum, over all."""
    with np.errstate(divide="ignore"):
        log = np.log(density) + theta * nodes
    tilted = np.exp(log - np.max(log))
    areas = (tilted[:-1] + tilted[1:]) * gaps / 2
    total = float(areas.sum())
    return float(areas[below].sum()) / total if total > 0 else 0.5


@functools.lru_cache(maxsize=4096)
def stopped_estimate(
    path: tuple[LookBounds, ...], region: str, mean: float, sd: float, df: float | None = None,
    confidence: float = CONFIDENCE,
) -> Stopped:  # fmt: skip
    """μ's median-unbiased estimate and interval given that the cell went on at every look of
    `path` but the last and stopped at the last in `region`, with mean log ratio `mean` there,
    one block's log ratio having standard deviation `sd`. With `df` (the degrees of freedom `sd`
    rests on) the interval is found with sd widened by t / z at the interval's confidence, so that
    it also carries the spread's own uncertainty."""
    if sd <= 0:
        return Stopped(mean, mean, mean)
    tail = (1 - confidence) / 2
    wider = sd
    if df is not None:
        wider = sd * float(scipy_stats.t.ppf(1 - tail, df) / scipy_stats.norm.ppf(1 - tail))
    point = _conditional_quantiles(path, region, mean, sd, (0.5,))[0]
    lo, hi = _conditional_quantiles(path, region, mean, wider, (1 - tail, tail))
    return Stopped(point, lo, hi)


def _conditional_quantiles(
    path: tuple[LookBounds, ...], region: str, mean: float, sd: float, quantiles: tuple[float, ...]
) -> list[float]:
    """The μ's that put the observed mean at each conditional quantile."""
    n = path[-1].blocks
    observed = mean * n / sd
    nodes, density = _density_at_stop(path, region, sd, mean)
    inside = _stops(nodes * sd / n, path[-1], region) | np.isclose(nodes, observed)
    nodes, density = nodes[inside], density[inside]
    if len(nodes) < 2 or density.max() <= 0:
        return [mean] * len(quantiles)
    gaps = np.diff(nodes)
    gaps = np.where(gaps > 1.5 * GRID_STEP, 0.0, gaps)  # no interval across a hole the region cut
    below = nodes[1:] <= observed + 1e-12
    centre, reach = mean / sd, BRACKET / math.sqrt(n)

    def solve(quantile: float) -> float:
        def gap(theta: float) -> float:
            return _cdf(theta, nodes, density, gaps, below) - quantile

        lo, hi = centre - reach, centre + reach
        if gap(lo) <= 0:
            return lo * sd
        if gap(hi) >= 0:
            return hi * sd
        return float(optimize.brentq(gap, lo, hi, xtol=1e-7)) * sd

    return [solve(q) for q in quantiles]


def on_the_word_side(estimate: Stopped, region: str, settle: tuple[float, float] | None) -> Stopped:
    """The estimate kept to the word's side: at least 0 (a ratio of 1) for faster, at most 0 for
    slower, inside the settling range for a cell settled otherwise."""
    if region == UP:
        return Stopped(max(estimate.point, 0.0), max(estimate.lo, 0.0), max(estimate.hi, 0.0))
    if region == DOWN:
        return Stopped(min(estimate.point, 0.0), min(estimate.lo, 0.0), min(estimate.hi, 0.0))
    if region == SETTLE and settle is not None:
        lo, hi = settle

        def clamp(value: float) -> float:
            return min(max(value, lo), hi)

        return Stopped(clamp(estimate.point), clamp(estimate.lo), clamp(estimate.hi))
    return estimate
