"""The break-even search: which concurrency levels an experiment measures when it asks "up to
which concurrency does this arm pay?" with a range and a resolution instead of a list of levels.

The range and resolution make a grid of levels, evenly spaced on a log scale, neighbours at
most `resolution` apart (`SearchRange.grid`). The search measures the range's ends first, on
every block's servers. From the second block on, after each block, it reads each arm's
primary cells (experiments/measurement/stats/sequential.py's words and point estimates) and, per arm:

- the *bracket*: the highest level settled faster below the first level settled not faster
  (slower, equivalent or not worth it), and that first level. When they are neighbours on the
  grid, the break-even is found at the resolution; when the range's lowest level does not pay,
  or its highest does, the range holds no break-even.
- the next level: while no level strictly inside the bracket is still being measured, the grid
  level where the bracket's point estimates, interpolated on log concurrency, cross 1; but never
  in the outer quarters of the bracket (a safeguarded secant step: interpolation finds a smooth
  crossing in fewer steps than halving, and the safeguard keeps a step-shaped curve, which
  interpolation misplaces, from costing more than halving would). Before a bracket is settled
  the point estimates stand in for the words, so a level is placed while the ends are still
  being settled: a point above `lean` leans paying, at or below it not. The continuation sets
  `lean` to 1 + the smallest gain worth deploying, since a level gaining less ends "not worth
  it", which does not pay either; the crossing is interpolated at that height too.
  scripts/bench_planner.py compared the rules: placing levels by the points from the second
  block on, rather than after the ends settle, found the break-even within 10 blocks in 50-87 %
  of crossing experiments instead of 0-40 %; leaning at 1 + the gain instead of 1 raised a
  step-shaped curve's from 13 to 73 %; two levels at a time instead of one found fewer (the
  family's size allows as many levels either way, spent sooner).
- the levels to run: the arm's levels still open, except those the bracket made moot (below a
  level settled faster, above one settled not faster). Settled levels are not run again: their
  word is fixed at the look that settled them.

A level added at block b is run from block b + 1 on the servers the block starts anyway, and
its cell is tested on its own looks (sequential.PrimaryCell.entered). The family-wise error is
held over `family_size` cells per arm: the most levels the search may measure for one arm (the
two ends and a bisection's depth), so however the levels were chosen, the expected number of
no-effect cells it tests is at most that, and Holm over that family holds the 5 %
(docs/verdicts.md, "Break-even search"; the simulation checks it). The search never measures
more levels for an arm than the family counts.

Plain Python, no Django.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from experiments.measurement.stats import sequential

FOUND = "found"
PAYS_EVERYWHERE = "pays across the range"
PAYS_NOWHERE = "pays nowhere in the range"
SEARCHING = "searching"
# The search can do no more (its levels are all measured, or no block is left for a new level's
# looks) and the bracket is wider than the resolution.
NARROWED = "narrowed"
DONE = (FOUND, PAYS_EVERYWHERE, PAYS_NOWHERE)

STOPS = (sequential.SLOWER, sequential.EQUIVALENT, sequential.NOT_WORTH_IT)
MIN_RESOLUTION = 1.1  # neighbouring levels closer than this could not be told apart


@dataclass(frozen=True)
class SearchRange:
    """The concurrency levels from `low` to `high`, neighbours at most `resolution` apart."""

    low: int
    high: int
    resolution: float

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError(f"the range must go from 1 or more up to at least its start, not {self.low}-{self.high}")
        if self.resolution < MIN_RESOLUTION:
            raise ValueError(f"the resolution must be at least {MIN_RESOLUTION}, not {self.resolution:g}")

    def grid(self) -> tuple[int, ...]:
        """The levels the search may measure: `low`, `high`, and between them the fewest levels,
        evenly spaced on a log scale and rounded to whole requests, that keep neighbours at most
        `resolution` apart (before rounding)."""
        if self.low == self.high:
            return (self.low,)
        steps = math.ceil(math.log(self.high / self.low) / math.log(self.resolution) - 1e-9)
        levels = (round(self.low * (self.high / self.low) ** (i / steps)) for i in range(steps + 1))
        return tuple(sorted(set(levels)))

    @property
    def ends(self) -> tuple[int, ...]:
        """The levels the search measures from the first block."""
        return tuple(sorted({self.low, self.high}))

    @property
    def family_size(self) -> int:
        """The most levels the search measures for one arm: the ends, then one level per step
        of halving the gaps between them. Holm counts this many cells per arm."""
        size = len(self.grid())
        return size if size <= 2 else min(size, 2 + math.ceil(math.log2(size - 1)))


@dataclass(frozen=True)
class Word:
    """One measured level of an arm as the search reads it: the primary cell's outcome
    (sequential's words, OPEN while blocks may follow) and its point estimate."""

    outcome: str
    point: float | None

    @property
    def pays(self) -> bool:
        return self.outcome == sequential.FASTER

    @property
    def stops(self) -> bool:
        return self.outcome in STOPS

    @property
    def settled(self) -> bool:
        return self.pays or self.stops

    def leans_pays(self, lean: float = 1.0) -> bool:
        """Paying by its word, or while unsettled by its point estimate above `lean`."""
        return self.pays or (not self.settled and self.point is not None and self.point > lean)

    def leans_stops(self, lean: float = 1.0) -> bool:
        return self.stops or (not self.settled and self.point is not None and self.point <= lean)


@dataclass(frozen=True)
class Bracket:
    """The highest level paying below the first one that does not (`below`), and that level
    (`above`); None where the measured levels show none."""

    below: int | None
    above: int | None


def bracket(words: Mapping[int, Word], *, leaning: bool = False, lean: float = 1.0) -> Bracket:
    """The bracket from the settled words (with `leaning`, point estimates stand in for the
    words of levels not settled yet: above `lean` they lean paying)."""

    def pays(word: Word) -> bool:
        return word.leans_pays(lean) if leaning else word.pays

    def stops(word: Word) -> bool:
        return word.leans_stops(lean) if leaning else word.stops

    below = None
    for level in sorted(words):
        if stops(words[level]):
            return Bracket(below, level)
        if pays(words[level]):
            below = level
    return Bracket(below, None)


@dataclass(frozen=True)
class ArmSearch:
    """Where one arm's search stands after the blocks run so far, and what it runs next.

    `state` is FOUND, PAYS_EVERYWHERE, PAYS_NOWHERE, SEARCHING or NARROWED; `settled` is the
    bracket of settled words; `run` the levels the arm runs in the next block (empty: the arm
    needs no more blocks), `added` the level among them it measures for the first time.
    `faster_above` lists levels settled faster above the bracket's upper level: the speedup is
    not monotone in concurrency there, and the break-even is the first crossing only."""

    state: str
    settled: Bracket
    run: frozenset[int]
    added: int | None = None
    faster_above: tuple[int, ...] = ()

    @property
    def done(self) -> bool:
        return self.state in DONE


def state_of(grid: Sequence[int], words: Mapping[int, Word]) -> tuple[str, Bracket]:
    """The search's state from the settled words alone (NARROWED is `plan`'s to say)."""
    settled = bracket(words)
    if settled.above == grid[0]:
        return PAYS_NOWHERE, settled
    if settled.below == grid[-1]:
        return PAYS_EVERYWHERE, settled
    below, above = settled.below, settled.above
    if below is not None and above is not None and grid.index(above) == grid.index(below) + 1:
        return FOUND, settled
    return SEARCHING, settled


def _moot(level: int, settled: Bracket) -> bool:
    """A level whose word no longer moves the break-even: below a level settled faster, or
    above the first settled not faster."""
    return (settled.below is not None and level < settled.below) or (
        settled.above is not None and level > settled.above
    )


def next_level(grid: Sequence[int], words: Mapping[int, Word], *, lean: float = 1.0) -> int | None:
    """The grid level to measure next inside the leaning bracket, or None when there is none
    to place (no bracket yet, its ends neighbours, or a level inside it still measured)."""
    leaning = bracket(words, leaning=True, lean=lean)
    if leaning.below is None or leaning.above is None:
        return None
    i, j = grid.index(leaning.below), grid.index(leaning.above)
    inside = range(i + 1, j)
    if not inside or any(grid[k] in words and not words[grid[k]].settled for k in inside):
        return None
    target = (i + j) / 2
    low, high = words[leaning.below].point, words[leaning.above].point
    if low is not None and high is not None and low > lean >= high:
        crossing = math.log(leaning.below) + math.log(leaning.above / leaning.below) * math.log(low / lean) / math.log(
            low / high
        )
        nearest = min(inside, key=lambda k: abs(math.log(grid[k]) - crossing))
        target = min(max(nearest, i + (j - i) / 4), j - (j - i) / 4)
    # Every level inside the bracket is unmeasured here: a measured one would be an end of it, or
    # still measured (above), so the choice is a new level.
    return grid[min(inside, key=lambda k: (abs(k - target), k))]


def plan(
    search: SearchRange, words: Mapping[int, Word], *, blocks_run: int, max_blocks: int, lean: float = 1.0
) -> ArmSearch:
    """One arm's search after `blocks_run` blocks: its state, and the levels it runs next.
    A level is added only when at least FIRST_LOOK blocks are left for its looks and the arm
    has measured fewer levels than the family counts."""
    grid = search.grid()
    state, settled = state_of(grid, words)
    faster_above = tuple(
        level for level, word in sorted(words.items()) if settled.above is not None and level > settled.above
        and word.pays
    )  # fmt: skip
    if state in DONE:
        return ArmSearch(state, settled, frozenset(), None, faster_above)
    run = {level for level, word in words.items() if not word.settled and not _moot(level, settled)}
    added = None
    room = max_blocks - blocks_run >= sequential.FIRST_LOOK and len(words) < search.family_size
    if blocks_run >= 1 and room:
        added = next_level(grid, words, lean=lean)
    if added is not None:
        run.add(added)
    return ArmSearch(SEARCHING if run else NARROWED, settled, frozenset(run), added, faster_above)
