"""The verdict grid's vocabulary, read by the results block, the history, the comparison and
the review: which speedups have a verdict, the symbol beside each word, and one cell of
the grid (an arm at a level with its stored estimate)."""

from dataclasses import dataclass

from experiments.measurement.stats import block_decisions, intervals, objective, sequential, verdicts
from experiments.models import SpeedupEstimate

SPEEDUP_METRICS = (
    SpeedupEstimate.Metric.SERVER_TPOT,
    SpeedupEstimate.Metric.TPOT,
    SpeedupEstimate.Metric.E2E,
    SpeedupEstimate.Metric.OUTPUT_THROUGHPUT,
)

# The outcome words as the grid shows them: a symbol beside the word, so that colour is
# never the only signal; the colours are Okabe–Ito (colour-blind safe) and greys.
OUTCOME_STYLE = {
    verdicts.FASTER: ("▲", "faster"),
    verdicts.SLOWER: ("▼", "slower"),
    verdicts.EQUIVALENT: ("=", "equivalent"),
    verdicts.INCONCLUSIVE: ("?", "inconclusive"),
    sequential.NOT_WORTH_IT: ("≤", "not worth it"),
    sequential.OPEN: ("…", "open"),
    block_decisions.QUIET: ("≈", "quiet enough"),
    objective.PAYS: ("✓", "pays"),
    objective.COSTS: ("✗", "costs"),
}
# The words that settle a cell: the per-cell words, and a primary cell's "not worth it".
SETTLED_WORDS = (*verdicts.CALLS, sequential.NOT_WORTH_IT)


@dataclass(frozen=True)
class GridCell:
    """One arm at one level in the verdict grid: the outcome word and the stored estimate."""

    level: int
    estimate: SpeedupEstimate | None

    @property
    def outcome(self) -> str:
        return self.estimate.outcome if self.estimate else verdicts.NO_DATA

    @property
    def symbol(self) -> str:
        return OUTCOME_STYLE.get(self.outcome, ("·", ""))[0]

    @property
    def is_call(self) -> bool:
        return self.outcome in SETTLED_WORDS or self.outcome in (sequential.OPEN, objective.PAYS, objective.COSTS)

    @property
    def primary(self) -> bool:
        """A cell of the experiment's question: its word holds the family-wise error at 5 %."""
        return bool(self.estimate and self.estimate.primary)

    @property
    def unadjusted(self) -> bool:
        """A faster or slower word outside the question: tested alone, at 95 %."""
        return not self.primary and self.outcome in (verdicts.FASTER, verdicts.SLOWER)

    @property
    def confidence_label(self) -> str:
        """The interval's confidence when it is not the usual 95 %: e.g. "98.8 %"; "95 % after the
        stop" for an estimate that accounts for the look the cell stopped at."""
        e = self.estimate
        if e is not None and e.stopping_aware:
            return "95 % after the stop"
        if e is None or round(e.confidence, 4) == intervals.CONFIDENCE:
            return ""
        return f"{e.confidence:.1%}"

    @property
    def plain_figure(self) -> str:
        """The plain estimate beside one that accounts for the stop (empty otherwise)."""
        e = self.estimate
        if e is None or not e.stopping_aware or e.plain_point is None:
            return ""
        return verdicts.figure(intervals.RatioEstimate(e.plain_point, e.plain_low, e.plain_high))

    @property
    def reason(self) -> str:
        return verdicts.NO_CALL_REASON.get(self.outcome, "")

    @property
    def figure(self) -> str:
        if self.estimate is None:
            return "–"
        e = self.estimate
        return verdicts.figure(intervals.RatioEstimate(e.point, e.ci_low, e.ci_high))

    @property
    def failures(self) -> str:
        e = self.estimate
        return (
            f"failed {e.failed_arm} / baseline {e.failed_baseline}" if e and (e.failed_arm or e.failed_baseline) else ""
        )


@dataclass(frozen=True)
class ServiceCell(GridCell):
    """A primary cell by its word for the service (pays, costs, …) where the analysis stored one,
    else by its primary word (an analysis from before objectives): the history's headline."""

    @property
    def outcome(self) -> str:
        if self.estimate is not None and self.estimate.word:
            return self.estimate.word
        return super().outcome
