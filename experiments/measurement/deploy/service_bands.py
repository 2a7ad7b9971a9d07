"""What to run in each concurrency band of a service's stated load (a ServiceProfile), from the
primary cells of the team's experiments on its model and hardware. Free of Django.

At each measured level the rule is experiments/measurement/deploy/recommendation.py's, over the arms
of every experiment that measured the level: the arm called faster with the largest speedup;
no speculation where every arm is settled and none faster; undecided otherwise. The words stay
the experiments' own (their primary cells hold the family-wise error); this module adds:

- SLOs. An arm whose p90 of TTFT, TPOT or E2E at a level is above the profile's SLO is not run
  there: its cell counts as settled and not worth deploying, whatever its word, and the
  evidence says which SLO it breaks. The p90 is the median over the arm's runs at the level of
  each run's p90. p90 and not p99: a run sends tens of requests, whose p99 is the slowest one or
  two; the median over runs keeps one slow server start from deciding alone.
- Bands. The profile's range is split at the measured levels inside it. A measured level takes
  its own answer; the concurrencies between two measured levels take theirs only when both
  agree (the same arm, or both no speculation). Between levels that disagree or are undecided,
  and below the lowest or above the highest measured level, the band is "not measured": never
  a guess. Neighbouring pieces with one answer make one band, so a band's edges are measured
  levels unless it is not measured.
- A daily curve: each band counts the hours whose expected concurrency falls in it.
- A category mix: a cell with per-category speedups (the engine-timed TPOT of an uploaded set's
  categories, experiments/analysis/breakdowns.py) gets a mix-weighted speedup, an estimate: the
  weighted geometric mean of its categories' speedups, as the analysis averages ratios on the
  log scale. It needs every category of the mix measured; it changes no word.
"""

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from experiments.measurement.deploy import recommendation
from experiments.measurement.stats import sequential

RUN_ARM = recommendation.RUN_ARM
NO_SPECULATION = recommendation.NO_SPECULATION
UNDECIDED = recommendation.UNDECIDED
NOT_MEASURED = "not measured"
SLO_METRICS = ("TTFT", "TPOT", "E2E")
# Half the summed difference of two mixes' shares above which an experiment's prompts are said
# to differ from the service's: a tenth of the requests would have to change category.
MIX_DIFFERS = 0.1
# Decision.Kind's values (a test checks they agree).
DEPLOY = "deploy"
DO_NOT_DEPLOY = "do_not_deploy"
NEEDS_MORE_DATA = "needs_more_data"
# Per SLO metric, each run's p90 in ms; and the baselines' by (experiment, level).
RunP90s = Mapping[str, Sequence[float]]
Baselines = Mapping[tuple[int, int], RunP90s]


@dataclass(frozen=True)
class Cell:
    """One speculative arm's primary cell at one level of one experiment."""

    experiment: int
    arm: int
    label: str
    method: str
    k: int
    config: str  # the arm's --speculative-config as sorted JSON: one deployable arm across experiments
    level: int
    outcome: str
    speedup: float | None
    blocks: int
    run_p90_ms: RunP90s = field(default_factory=dict)
    by_category: Mapping[str, float] = field(default_factory=dict)  # category: engine-timed TPOT speedup


@dataclass(frozen=True)
class Load:
    """What the team states about the service: a concurrency range (a curve's lowest and
    highest hour), the 24 hourly concurrencies of a curve or (), SLOs in ms, a category mix."""

    low: int
    high: int
    curve: Sequence[int] = ()
    slos: Mapping[str, float] = field(default_factory=dict)
    mix: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Evidence:
    """A cell as the service sees it: the SLOs it breaks and its mix-weighted speedup."""

    cell: Cell
    breaches: tuple[str, ...]
    mix_speedup: float | None


@dataclass(frozen=True)
class Level:
    level: int
    word: str  # RUN_ARM, NO_SPECULATION or UNDECIDED
    chosen: Evidence | None
    evidence: tuple[Evidence, ...]
    baseline_breaches: tuple[str, ...]  # the SLOs plain decoding breaks here, by experiment
    contradicted_by: tuple[Evidence, ...]  # the chosen arm's config settled otherwise in another experiment


@dataclass(frozen=True)
class Band:
    low: int
    high: int
    word: str  # RUN_ARM, NO_SPECULATION, UNDECIDED or NOT_MEASURED
    config: str | None  # the arm's, for RUN_ARM
    levels: tuple[Level, ...]  # the measured levels inside, lowest first
    hours: int | None = None  # hours of the day in the band, with a curve

    @property
    def chosen(self) -> Evidence | None:
        """The arm to run, as measured at the band's top: the experiment that reaches its edge."""
        return self.levels[-1].chosen if self.word == RUN_ARM else None


@dataclass(frozen=True)
class Proposal:
    """The decision a recommendation proposes: deploy the arm of the lowest band up to its
    top edge; do not deploy when every band is no speculation; else more data is needed."""

    kind: str
    chosen: Evidence | None = None
    max_concurrency: int | None = None


def slo_breaches(run_p90_ms: RunP90s, slos: Mapping[str, float]) -> tuple[str, ...]:
    """The SLOs broken, each as "TPOT p90 61.2 ms > 50 ms"; a metric with no runs breaks none."""
    broken = []
    for metric, limit in slos.items():
        values = run_p90_ms.get(metric)
        if values and (p90 := statistics.median(values)) > limit:
            broken.append(f"{metric} p90 {p90:.1f} ms > {limit:g} ms")
    return tuple(broken)


def mix_speedup(by_category: Mapping[str, float], mix: Mapping[str, float]) -> float | None:
    """The speedup of the service's mix, estimated from per-category speedups; None unless
    every category of the mix has one."""
    if not mix or any(by_category.get(category, 0) <= 0 for category in mix):
        return None
    return math.exp(sum(share * math.log(by_category[c]) for c, share in mix.items()) / sum(mix.values()))


def mix_difference(measured: Mapping[str, float], stated: Mapping[str, float]) -> float:
    """The share of requests that would change category to turn one mix into the other."""
    categories = set(measured) | set(stated)
    return sum(abs(measured.get(c, 0) - stated.get(c, 0)) for c in categories) / 2


def _judged(cell: Cell, load: Load) -> Evidence:
    return Evidence(cell, slo_breaches(cell.run_p90_ms, load.slos), mix_speedup(cell.by_category, load.mix))


def _as_arm(evidence: Evidence, level: int) -> recommendation.ArmCells:
    """The cell as the recommendation's rule reads it: an arm that breaks an SLO here is settled
    for this service, and not to be run."""
    cell = evidence.cell
    outcome = sequential.NOT_WORTH_IT if evidence.breaches else cell.outcome
    return recommendation.ArmCells(cell.arm, cell.label, cell.k, {level: (outcome, cell.speedup)}, {})


def _contradicting(chosen: Evidence | None, evidence: Sequence[Evidence]) -> tuple[Evidence, ...]:
    """The cells of the chosen arm's --speculative-config at this level settled as anything but faster."""
    if chosen is None:
        return ()
    settled = [e for e in evidence if e.cell.outcome in sequential.SETTLED and e.cell.outcome != sequential.FASTER]
    return tuple(e for e in settled if e.cell.config == chosen.cell.config)


def _level(level: int, cells: Sequence[Cell], load: Load, baselines: Baselines) -> Level:
    evidence = tuple(_judged(cell, load) for cell in cells if cell.level == level)
    advice = recommendation.level_advice(level, [_as_arm(e, level) for e in evidence])
    chosen = next((e for e in evidence if e.cell.arm == advice.arm), None)
    plain = tuple(
        f"#{experiment}: {breach}"
        for (experiment, at), p90s in sorted(baselines.items())
        if at == level
        for breach in slo_breaches(p90s, load.slos)
    )
    return Level(level, advice.word, chosen, evidence, plain, _contradicting(chosen, evidence))


def _answer(level: Level) -> tuple[str, str | None]:
    return level.word, level.chosen.cell.config if level.chosen is not None else None


def _between(below: Level | None, above: Level) -> tuple[str, str | None]:
    """The answer of the concurrencies between two measured levels: theirs when they agree."""
    if below is not None and _answer(below) == _answer(above) and above.word in (RUN_ARM, NO_SPECULATION):
        return _answer(above)
    return NOT_MEASURED, None


def _pieces(levels: Sequence[Level], low: int, high: int) -> list[Band]:
    """The range cut at the measured levels inside it: each level, and each gap around them."""
    pieces, edge, below = [], low, None
    for level in (lv for lv in levels if low <= lv.level <= high):
        if level.level > edge:
            pieces.append(Band(edge, level.level - 1, *_between(below, level), ()))
        pieces.append(Band(level.level, level.level, *_answer(level), (level,)))
        edge, below = level.level + 1, level
    if edge <= high:
        pieces.append(Band(edge, high, NOT_MEASURED, None, ()))
    return pieces


def _merged(pieces: Sequence[Band]) -> list[Band]:
    bands = [pieces[0]]
    for piece in pieces[1:]:
        last = bands[-1]
        if (last.word, last.config) == (piece.word, piece.config):
            bands[-1] = replace(last, high=piece.high, levels=last.levels + piece.levels)
        else:
            bands.append(piece)
    return bands


def bands(cells: Sequence[Cell], load: Load, baselines: Baselines) -> list[Band]:
    """The bands of the load's range, lowest first, from `cells` and the baselines' run p90s."""
    levels = [_level(level, cells, load, baselines) for level in sorted({cell.level for cell in cells})]
    merged = _merged(_pieces(levels, load.low, load.high))
    if not load.curve:
        return merged
    return [replace(band, hours=sum(band.low <= c <= band.high for c in load.curve)) for band in merged]


def paying_hours(bands: Sequence[Band]) -> int | None:
    """Hours of the day in bands where an arm is run; None without a curve."""
    if not bands or bands[0].hours is None:
        return None
    return sum(band.hours or 0 for band in bands if band.word == RUN_ARM)


def proposal(bands: Sequence[Band]) -> Proposal:
    first = bands[0]
    if first.word == RUN_ARM:
        return Proposal(DEPLOY, first.chosen, first.high)
    if all(band.word == NO_SPECULATION for band in bands):
        return Proposal(DO_NOT_DEPLOY)
    return Proposal(NEEDS_MORE_DATA)
