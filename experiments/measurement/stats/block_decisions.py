"""Decisions on a family's primary cells on the block model (Design.method == BLOCK_MODEL;
docs/verdicts.md, "The block model" and "After the stop").

The looks, the boundary, Holm's step-down and the recycling of a called cell's alpha are those of
experiments/measurement/stats/sequential.py; what differs is the test of a look and what a cell
settled otherwise means:

- Each cell's mean log ratio is tested on the spread the block model gives it
  (experiments/measurement/stats/block_model.py: pooled over the experiment's primary cells, with
  Satterthwaite's degrees of freedom, a noisy arm or cell on its own), so a look has the power of
  the whole experiment's blocks rather than one cell's blocks − 1. The boundary is calibrated on
  normal statistics (sequential.look_levels with `normal`).
- A word is where the cell's interval at the level the family's test allows this look lies, one
  interval for every word: above 1 *faster*, below 1 *slower*, inside [1 / (1 + g), 1 + g) *not
  worth it* (g the smallest gain worth deploying) — shown to gain less than is worth having and
  not shown slower by as much, so futility never takes a cell that is on its way to *slower*,
  and with the family's level a false "not worth it" (a true gain of g or more) is held with the
  false calls. *Equivalent* is a cell not worth it whose equivalence interval (TOST, 5 % a side
  on the same boundary) also lies inside 1 ± the margin. Only faster and slower free alpha.
- The A/A replicate's family (`quiet`) asks whether the host was quiet enough for the question:
  its equivalence interval inside [1 / (1 + g), 1 + g] is *quiet enough* — the spread between
  the same arm's blocks does not hide a gain worth deploying; called faster or slower, the host
  moved between blocks.
- What a settled or ended cell shows is its estimate conditional on where it stopped
  (experiments/measurement/stats/stopping.py), with the plain one kept beside it; an open cell
  shows its plain estimate, at the level the next look tests at, and how many blocks in all would
  settle it at the levels those looks will test at (`to_settle`).

Plain Python, numpy and scipy, no Django.
"""

import functools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from scipy import special

from experiments.measurement.stats import block_model, sequential, stopping
from experiments.measurement.stats.intervals import RatioEstimate, block_interval, capped_exp
from experiments.measurement.stats.sequential import (
    EQUIVALENCE_ALPHA,
    EQUIVALENT,
    FASTER,
    NOT_WORTH_IT,
    OPEN,
    SLOWER,
    Decision,
    Design,
    K,
    PrimaryCell,
)

QUIET = "quiet enough"
T = TypeVar("T", bound=Hashable, covariant=True)  # a test's cell key: any key is a Hashable
PLAN_CAP = 99


class Spreads(Generic[K]):
    """The block model's spread of every primary cell of an experiment (all its families: the
    replicate's cells inform the candidates' spread and the other way round), per look."""

    def __init__(self, cells: Sequence[PrimaryCell[K]], layout: block_model.Layout[K] = block_model.arm_and_level):
        self._ratios = {cell.key: cell.ratios for cell in cells if cell.blocked is None}
        self._layout = layout
        self.at = functools.cache(self._fit)

    def _fit(self, look: int) -> Mapping[K, block_model.Spread]:
        return block_model.fit(self._ratios, self._layout, upto=look)


def _df(df: float) -> float:
    """Degrees of freedom rounded down to a hundredth (a shade wider), for tests and intervals alike."""
    return math.floor(df * 100) / 100


@functools.lru_cache(maxsize=65536)
def _quantile(confidence: float, df: float) -> float:
    """The two-sided t critical value."""
    return float(special.stdtrit(_df(df), (1 + confidence) / 2))


@dataclass(frozen=True)
class _Test(Generic[T]):
    """One cell at one look: its mean log ratio over its blocks so far and the spread its test
    takes (None: fewer than two blocks, no test)."""

    key: T
    values: tuple[float, ...]
    spread: block_model.Spread | None
    at: int  # the look, counted in the cell's own blocks
    looks: tuple[int, ...]  # the cell's own boundary

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return math.fsum(math.log(v) for v in self.values) / self.n

    @property
    def p_value(self) -> float | None:
        if self.spread is None:
            return None
        if self.spread.variance == 0:
            return 1.0 if self.mean == 0 else 0.0
        t = self.mean / math.sqrt(self.spread.variance / self.n)
        return float(2 * special.stdtr(_df(self.spread.df), -abs(t)))

    def half(self, level: float) -> float:
        """The half-width of the interval at confidence 1 − level, on the log scale."""
        assert self.spread is not None, "no spread, no interval"
        return _quantile(1 - level, self.spread.df) * math.sqrt(self.spread.variance / self.n)

    def estimate(self, level: float) -> RatioEstimate:
        """The plain estimate with its interval at confidence 1 − level."""
        if self.spread is None:
            return block_interval(self.values) if self.values else RatioEstimate(None, None, None)
        half, mean = self.half(level), self.mean
        ends = capped_exp(mean - half), capped_exp(mean + half)
        return RatioEstimate(capped_exp(mean), *ends, self.values, self.spread.sd, self.spread.describe())


@dataclass(frozen=True)
class _Ledger:
    """The claims so far in the family: faster and slower calls free their share of alpha for
    every later test; a cell settled not worth it frees its share for the other futility tests
    only (freeing it for calls too would let a no-effect arm's settled cells loosen its last
    cell's test for a false call: 8–10 % family-wise in simulation)."""

    calls: int = 0
    settled: int = 0

    def after(self, claims: Mapping[K, tuple[str, float]]) -> "_Ledger":
        calls = sum(1 for kind, _ in claims.values() if kind == CALL)
        return _Ledger(self.calls + calls, self.settled + len(claims) - calls)


CALL, SETTLE = "call", "settle"


@dataclass(frozen=True)
class _Family:
    """How the family's cells are tested and what settles them."""

    design: Design
    size: int  # Holm's family: its cells, blocked ones excepted, and the unmeasured ones
    futility: bool
    quiet: bool

    def call_level(self, test: _Test[Hashable], called: int) -> float:
        return sequential.nominal_level(self.design.alpha / max(1, self.size - called), test.looks, test.at,
                             self.design.spending, normal=True)  # fmt: skip

    def claims(self, test: _Test[Hashable], ledger: _Ledger) -> list[tuple[str, float | None, float]]:
        """The cell's possible claims at this look: (kind, p-value, level it must pass)."""
        result: list[tuple[str, float | None, float]] = [(CALL, test.p_value, self.call_level(test, ledger.calls))]
        if self.futility and test.spread is not None and test.spread.variance > 0:
            result.append((SETTLE, self.futility_p(test), self.settle_level(test, ledger)))
        return result

    def settle_level(self, test: _Test[Hashable], ledger: _Ledger) -> float:
        return self.call_level(test, ledger.calls + ledger.settled)

    def futility_p(self, test: _Test[Hashable]) -> float:
        """The one-sided p-value of the interval's farther end against 1 + g and 1 / (1 + g)."""
        assert test.spread is not None
        band, se = math.log1p(self.design.worthwhile_gain), math.sqrt(test.spread.variance / test.n)
        below = float(special.stdtr(_df(test.spread.df), (test.mean - band) / se))
        above = float(special.stdtr(_df(test.spread.df), -(test.mean + band) / se))
        return max(below, above)

    def equivalence_level(self, test: _Test[Hashable]) -> float:
        return sequential.nominal_level(2 * EQUIVALENCE_ALPHA, test.looks, test.at, self.design.spending, normal=True)

    def settle_range(self, test: _Test[Hashable], level: float, *, scale: float = 1.0) -> tuple[float, float] | None:
        """The range of the mean log ratio in which the cell stops without a call at this look:
        its interval (one-sided at `level` a side; the replicate's at the equivalence level)
        inside [1 / (1 + g), 1 + g]. `scale` shrinks the interval (a plan for more blocks)."""
        band = math.log1p(self.design.worthwhile_gain)
        if test.spread is None or not (self.futility or self.quiet):
            return None
        half = test.half(self.equivalence_level(test) if self.quiet else 2 * level) * scale
        return (half - band, band - half) if half < band else None

    def word(self, test: _Test[Hashable], kind: str, call_level: float, settle_level: float) -> str | None:
        """The word the cell gets at this look, if any: the family's claim (CALL: faster or
        slower; SETTLE: not worth it, or equivalent), or quiet enough for the replicate."""
        if kind == CALL:
            return FASTER if test.mean > 0 else SLOWER
        if kind == SETTLE or self.quiet:
            return self.settled_word(test, settle_level)
        return None

    def settled_word(self, test: _Test[Hashable], level: float) -> str | None:
        settle = self.settle_range(test, level)
        if settle is None or not settle[0] < test.mean < settle[1]:
            return None
        if self.quiet:
            return QUIET
        half = test.half(self.equivalence_level(test))
        lo, hi = math.log(1 - self.design.margin), math.log1p(self.design.margin)
        return EQUIVALENT if lo <= test.mean - half and test.mean + half <= hi else NOT_WORTH_IT

    def claim(self, word: str) -> tuple[float, float] | None:
        """The range of the mean log ratio a settled word claims."""
        band = math.log1p(self.design.worthwhile_gain)
        if word == EQUIVALENT:
            return math.log(1 - self.design.margin), math.log1p(self.design.margin)
        return (-band, band) if word in (NOT_WORTH_IT, QUIET) else None


def estimate_on_spread(values: Sequence[float], spread: block_model.Spread, *, confidence: float) -> RatioEstimate:
    """The plain estimate of block ratios `values` with its interval at `confidence`, on the
    block model's `spread` (a guard's test: experiments/measurement/stats/objective.py)."""
    return _Test(None, tuple(values), spread if len(values) >= 2 else None, len(values), ()).estimate(1 - confidence)


def _test(cell: PrimaryCell[K], design: Design, look_at: int, spreads: Mapping[K, block_model.Spread]) -> _Test[K]:
    values = tuple(ratio for block, ratio in sorted(cell.ratios.items()) if block <= look_at)
    at = look_at - cell.entered + 1
    looks = cell.own_looks(design)
    return _Test(cell.key, values, spreads.get(cell.key) if len(values) >= 2 else None, at, looks)


def _holm(tests: Mapping[K, _Test[K]], family: _Family, ledger: _Ledger) -> dict[K, tuple[str, float]]:
    """Holm's step-down at one look: {key: (CALL or SETTLE, the level it passed)} for the cells
    that get a word from the family's test, each on its own boundary (sequential._holm_calls on
    these tests). A claim is faster or slower (the two-sided p-value within the level for alpha
    over the cells not called) or, in a family with futility, not worth it (the one-sided p-value
    of its interval's farther end against 1 + g and 1 / (1 + g), within the level for alpha over
    the cells without a word)."""
    passed: dict[K, tuple[str, float]] = {}
    while True:
        now = ledger.after(passed)
        passing = []
        for index, (key, test) in enumerate(tests.items()):
            if key in passed:
                continue
            for kind, p, level in family.claims(test, now):
                if p is not None and p <= level:
                    passing.append((p, index, key, kind, level))
        if not passing:
            return passed
        _, _, key, kind, level = min(passing)
        passed[key] = (kind, level)


@dataclass
class _Path:
    """What a cell went through: the bounds of each look it was tested at."""

    bounds: list[stopping.LookBounds]

    def add(self, test: _Test[Hashable], call: float, settle: tuple[float, float] | None) -> None:
        self.bounds.append(stopping.LookBounds(test.n, call, settle))


def decide(
    cells: Sequence[PrimaryCell[K]], design: Design, *, blocks_run: int, final: bool, futility: bool = True,
    unmeasured: int = 0, spreads: Spreads[K] | None = None, quiet: bool = False,
) -> list[Decision[K]]:  # fmt: skip
    """sequential.decide on the block model: the decision on every primary cell after
    `blocks_run` blocks, replaying the looks. `spreads` holds every primary cell of the
    experiment (the family's alone when None); `quiet`: the family is the A/A replicate's."""
    spreads = spreads or Spreads(cells)
    family = _Family(design, sum(1 for cell in cells if cell.blocked is None) + unmeasured, futility, quiet)
    decided: dict[K, Decision[K]] = {}
    for cell in cells:
        if cell.blocked is not None:
            test = _test(cell, design, blocks_run, {})
            decided[cell.key] = Decision(cell.key, cell.blocked, test.estimate(0.05), 0.95, test.n, None)
    paths: dict[K, _Path] = {cell.key: _Path([]) for cell in cells}
    last: dict[K, tuple[_Test[K], float]] = {}
    ledger = _Ledger()
    taken = sequential.looks_taken(design, blocks_run, final)
    for look_at in taken:
        at_look = spreads.at(look_at)
        tests = {
            cell.key: _test(cell, design, look_at, at_look)
            for cell in cells
            if cell.key not in decided and sequential.looked_at(cell, design, look_at)
        }
        passed = _holm(tests, family, ledger)
        ledger = ledger.after(passed)
        for key, test in tests.items():
            kind, level = passed.get(key, ("", family.call_level(test, ledger.calls)))
            call_level = level if kind == CALL else family.call_level(test, ledger.calls)
            settle_level = level if kind == SETTLE else family.settle_level(test, ledger)
            last[key] = (test, level)
            if test.spread is None:
                continue
            paths[key].add(test, test.half(call_level), family.settle_range(test, settle_level))
            word = family.word(test, kind, call_level, settle_level)
            if word is not None:
                decided[key] = _settled(test, word, level, paths[key], family)
    for cell in cells:
        if cell.key not in decided:
            decided[cell.key] = _unsettled(cell, design, blocks_run, final, last.get(cell.key), paths[cell.key],
                                           family, spreads, ledger)  # fmt: skip
    return [decided[cell.key] for cell in cells]


def _region(word: str) -> str:
    return {FASTER: stopping.UP, SLOWER: stopping.DOWN}.get(word, stopping.SETTLE)


def _settled(test: _Test[K], word: str, level: float, path: _Path, family: _Family) -> Decision[K]:
    """A cell settled at this look: its estimate conditional on the stop, the plain one beside it."""
    assert test.spread is not None, "a cell without a spread was settled"
    region = _region(word)
    conditional = stopping.stopped_estimate(tuple(path.bounds), region, test.mean, test.spread.sd, test.spread.df)
    shown = stopping.on_the_word_side(conditional, region, family.claim(word))
    return _decision(test, word, level, shown, family)


def _decision(test: _Test[K], word: str, level: float, shown: stopping.Stopped | None, family: _Family,
              *, to_settle: int | None = None) -> Decision[K]:  # fmt: skip
    plain = test.estimate(level)
    estimate = plain
    if shown is not None and test.spread is not None:
        note = f"accounts for the stop at {test.n} blocks; {test.spread.describe()}"
        ends = capped_exp(shown.lo), capped_exp(shown.hi)
        estimate = RatioEstimate(capped_exp(shown.point), *ends, test.values, test.spread.sd, note)
    equivalence = None
    if test.spread is not None:
        half, mean = test.half(family.equivalence_level(test)), test.mean
        equivalence = (capped_exp(mean - half), capped_exp(mean + half))
    tested = (plain.lo, plain.hi) if plain.lo is not None and plain.hi is not None else None
    return Decision(test.key, word, estimate, 1 - level, test.n, test.p_value, equivalence, plain=plain,
                    test_interval=tested, stopping_aware=shown is not None, to_settle=to_settle)  # fmt: skip


def _unsettled(
    cell: PrimaryCell[K], design: Design, blocks_run: int, final: bool, last: tuple[_Test[K], float] | None,
    path: _Path, family: _Family, spreads: Spreads[K], ledger: _Ledger,
) -> Decision[K]:  # fmt: skip
    """A cell no look settled: open while blocks may follow (its plain estimate now, at the level
    the next look tests at), else inconclusive with the estimate conditional on having gone on at
    every look, or too few blocks when no look was reached."""
    outcome = sequential.unsettled_outcome(design, blocks_run, final=final, looked=last is not None)
    now = _test(cell, design, blocks_run, spreads.at(blocks_run))
    if outcome == OPEN or last is None or last[0].spread is None or not path.bounds:
        level = family.call_level(now, ledger.calls)
        return _decision(now, outcome, level, None, family, to_settle=_to_settle(now, family, ledger))
    test, level = last
    assert test.spread is not None
    conditional = stopping.stopped_estimate(
        tuple(path.bounds), stopping.GO_ON, test.mean, test.spread.sd, test.spread.df
    )
    return _decision(test, outcome, level, conditional, family, to_settle=_to_settle(test, family, ledger))


def _to_settle(test: _Test[K], family: _Family, ledger: _Ledger) -> int | None:
    """About how many blocks in all would settle the cell, taking its mean and spread as the
    truth: the fewest whose look, at the levels it will test at (its boundary's, the family's
    shares as they stand; the last look's past the maximum) and with the degrees of freedom the
    spread grows to, calls it or settles it otherwise. None beyond PLAN_CAP or without a spread."""
    if test.spread is None:
        return None
    per_block = test.spread.df / max(1, test.n - 1)
    for n in range(test.n + 1, PLAN_CAP + 1):
        grown = block_model.Spread(test.spread.variance, per_block * (n - 1), test.spread.cells, test.spread.why)
        ahead = _Test(test.key, test.values, grown, test.at + n - test.n, test.looks)
        scale = math.sqrt(test.n / n)
        if abs(ahead.mean) >= ahead.half(family.call_level(ahead, ledger.calls)) * scale:
            return n
        settle = family.settle_range(ahead, family.settle_level(ahead, ledger), scale=scale)
        if settle is not None and settle[0] < ahead.mean < settle[1]:
            return n
    return None
