"""The break-even concurrency: where an arm's speedup stops paying along the concurrency
levels, stated only where the verdicts and intervals show it (docs/verdicts.md). Plain Python,
no Django.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import NamedTuple

from experiments.measurement.stats.intervals import RatioEstimate


@dataclass(frozen=True)
class BreakEven:
    """Where the speedup stops paying along the concurrency levels, stated only where the
    intervals show it.

    state is one of CROSSES, PAYS_EVERYWHERE, PAYS_NOWHERE, NOT_SETTLED, NOT_ESTIMABLE. With
    CROSSES, `level` is the interpolated concurrency where the point estimate falls to 1 and
    lo/hi where the interval's bounds do, between a level called faster and the next higher
    one called slower (so all three lie inside the measured levels). `reason` says why a
    state is NOT_SETTLED or NOT_ESTIMABLE: which levels are open, or which lack an interval.
    """

    state: str
    level: float | None = None
    lo: float | None = None
    hi: float | None = None
    reason: str = ""


class LevelCall(NamedTuple):
    """One level as break_even reads it: the speedup and whether its verdict called the arm
    faster (the interval above 1) or slower (below 1); neither leaves the level open."""

    level: int
    estimate: RatioEstimate
    faster: bool
    slower: bool


CROSSES = "crosses"
PAYS_EVERYWHERE = "pays at every measured level"
PAYS_NOWHERE = "pays at no measured level"
NOT_SETTLED = "not settled"
NOT_ESTIMABLE = "not estimable"


def log_crossing(level_a: int, value_a: float, level_b: int, value_b: float) -> float | None:
    """The concurrency between two levels where a speedup interpolated linearly in
    (log concurrency, log speedup) equals 1; None when it does not fall to 1 in between."""
    if not (value_a > 1 >= value_b):
        return None
    la, lb, ya, yb = math.log(level_a), math.log(level_b), math.log(value_a), math.log(value_b)
    return math.exp(la + (lb - la) * ya / (ya - yb))


def _first_crossing(rows: Sequence[tuple[int, float]]) -> float | None:
    for (level_a, a), (level_b, b) in pairwise(rows):
        crossing = log_crossing(level_a, a, level_b, b)
        if crossing is not None:
            return crossing
    return None


def _levels(levels: Sequence[int]) -> str:
    return ", ".join(str(level) for level in levels)


def _level_states(rows: Sequence[LevelCall]) -> str:
    """ "faster at 1; open at 4, 8": each level's call, for a break-even that is not settled."""
    groups = {
        "faster": [row.level for row in rows if row.faster],
        "slower": [row.level for row in rows if row.slower],
        "open": [row.level for row in rows if not (row.faster or row.slower)],
    }
    return "; ".join(f"{name} at {_levels(levels)}" for name, levels in groups.items() if levels)


def _shown_fall(rows: Sequence[LevelCall]) -> Sequence[LevelCall] | None:
    """The levels from the last one called faster below the first one called slower above a
    faster one, to that slower one; None when no level called slower lies above one called faster."""
    faster = None
    for index, row in enumerate(rows):
        if row.faster:
            faster = index
        elif row.slower and faster is not None:
            return rows[faster : index + 1]
    return None


def break_even(rows: Sequence[LevelCall]) -> BreakEven:
    """The break-even concurrency from the speedup at each level, in any order.

    - NOT_ESTIMABLE with fewer than two levels or any level without an interval (too few
      blocks): a line between points without uncertainty would look like a finding.
    - PAYS_EVERYWHERE when the arm was called faster at every level; PAYS_NOWHERE when it was
      called slower at every level (every upper bound below 1).
    - CROSSES when a level called faster has a higher level called slower: between them the
      point estimate, the lower bound and the upper bound all fall to 1, each interpolated on
      log concurrency; the bounds' crossings are the break-even's interval.
    - NOT_SETTLED otherwise (a level neither faster nor slower is open), with the levels' calls
      as the reason. A point that merely dips below 1 does not make a break-even.
    """
    ordered = sorted(rows, key=lambda row: row.level)
    if len(ordered) < 2:
        return BreakEven(NOT_ESTIMABLE, reason="fewer than two levels")
    missing = [row.level for row in ordered if not row.estimate.has_interval]
    if missing:
        return BreakEven(NOT_ESTIMABLE, reason=f"no interval at {_levels(missing)}")
    if all(row.faster for row in ordered):
        return BreakEven(PAYS_EVERYWHERE)
    if all(row.slower for row in ordered):
        return BreakEven(PAYS_NOWHERE)
    fall = _shown_fall(ordered)
    if fall is None:
        return BreakEven(NOT_SETTLED, reason=_level_states(ordered))
    figures = [(row.level, row.estimate.interval) for row in fall]
    level = _first_crossing([(lvl, interval.point) for lvl, interval in figures])
    lo = _first_crossing([(lvl, interval.lo) for lvl, interval in figures])
    hi = _first_crossing([(lvl, interval.hi) for lvl, interval in figures])
    return BreakEven(CROSSES, level, lo, hi)
