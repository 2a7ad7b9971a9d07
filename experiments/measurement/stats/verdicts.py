"""The verdict on a speedup: one of four words where the design supports a call, and the
sentences the experiment page prints.

A verdict is a claim, so it is made only where the experiment's design supports it:
- faster: the whole 95 % interval lies above 1; slower: below 1;
- equivalent: the whole 90 % interval lies inside 1 ± the experiment's margin (the
  smallest effect worth acting on): two one-sided tests at 5 % each (TOST);
- inconclusive: otherwise.
No word is given with fewer than MIN_BLOCKS blocks (the interval over 2 blocks rests on
one degree of freedom), when the arm and the baseline failed their requests at rates that
differ (Fisher's exact test, p < FAILURE_RATES_P: dropping failures favours the arm that
fails its slowest ones; equal rates with unequal counts keep the verdict), for throughput
under a fixed Poisson arrival rate (it then measures the arrival rate), for the client's
TTFT and TPOT when a run's stream was distorted (experiments/measurement/engine/stream_fidelity.py: the client
did not see the tokens when the engine made them), or without data.
scripts/check_verdicts.py checks by simulation how often these words are wrong.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats as scipy_stats

from experiments.measurement.stats.intervals import RatioEstimate, block_interval, blocks_to_settle

MIN_BLOCKS = 3
# Equivalence is TOST at 5 % a side: the 90 % interval inside the band.
EQUIVALENCE_CONFIDENCE = 0.90
FAILURE_RATES_P = 0.05

FASTER = "faster"
SLOWER = "slower"
EQUIVALENT = "equivalent"
INCONCLUSIVE = "inconclusive"
CALLS = (FASTER, SLOWER, EQUIVALENT, INCONCLUSIVE)

TOO_FEW_BLOCKS = "too few blocks"
FAILURES_DIFFER = "failures differ"
NOT_APPLICABLE = "not applicable"
NO_DATA = "no data"
STREAM_DISTORTED = "stream distorted"

# What the page prints for an outcome that is not a call.
NO_CALL_REASON = {
    TOO_FEW_BLOCKS: f"too few repetitions to call (fewer than {MIN_BLOCKS} blocks)",
    FAILURES_DIFFER: (
        f"no verdict: the arm and the baseline failed their requests at different rates (failed / sent over the "
        f"blocks both ran, Fisher's exact test p < {FAILURE_RATES_P:g}), and dropping failures favours the side "
        "that fails its slowest requests"
    ),
    NOT_APPLICABLE: "no verdict: under a fixed request rate the throughput measures the arrival rate",
    NO_DATA: "no paired measurements",
    STREAM_DISTORTED: (
        "no verdict: in some block the client did not see the stream as the engine made it (see Stream fidelity), "
        "so its timing of the tokens measures the host, not the arm"
    ),
}


def failure_rates_p(failed_baseline: int, requests_baseline: int, failed_arm: int, requests_arm: int) -> float:
    """Two-sided Fisher exact p-value that the arm and the baseline fail their requests at
    different rates (failed of sent on each side); 1 when neither failed."""
    if not 0 <= failed_baseline <= requests_baseline or not 0 <= failed_arm <= requests_arm:
        raise ValueError(
            f"failed requests must be between 0 and those sent: baseline {failed_baseline} of {requests_baseline}, "
            f"arm {failed_arm} of {requests_arm}"
        )
    if not failed_baseline and not failed_arm:
        return 1.0
    table = [[failed_arm, requests_arm - failed_arm], [failed_baseline, requests_baseline - failed_baseline]]
    return float(scipy_stats.fisher_exact(table, alternative="two-sided").pvalue)


def classify(
    estimate: RatioEstimate,
    *,
    margin: float,
    failed_baseline: int = 0,
    failed_arm: int = 0,
    requests_baseline: int = 0,
    requests_arm: int = 0,
    applicable: bool = True,
    stream_faithful: bool = True,
) -> str:
    """The outcome for one arm, level and metric: a word of CALLS, or why there is none.

    `failed_*` and `requests_*`: the failed and the sent requests of each side over the
    blocks both ran."""
    if not applicable:
        return NOT_APPLICABLE
    if estimate.point is None:
        return NO_DATA
    if not stream_faithful:
        return STREAM_DISTORTED
    if failure_rates_p(failed_baseline, requests_baseline, failed_arm, requests_arm) < FAILURE_RATES_P:
        return FAILURES_DIFFER
    if estimate.n_blocks < MIN_BLOCKS or not estimate.has_interval:
        return TOO_FEW_BLOCKS
    _, lo, hi = estimate.interval
    if lo > 1:
        return FASTER
    if hi < 1:
        return SLOWER
    _, lo, hi = block_interval(estimate.block_ratios, confidence=EQUIVALENCE_CONFIDENCE).interval
    if 1 - margin <= lo and hi <= 1 + margin:
        return EQUIVALENT
    return INCONCLUSIVE


# ---------------------------------------------------------------- figures


def _decimals_for(lo: float, hi: float) -> int:
    # Enough decimals that a bound on one side of 1 is not printed as 1.00, but at most 4.
    for decimals in (2, 3):
        if all(bound == 1 or round(bound, decimals) != 1 for bound in (lo, hi)):
            return decimals
    return 4


def figure(estimate: RatioEstimate) -> str:
    """ "1.23× [1.10, 1.37]", or "1.23×" without an interval, or "–" without a point."""
    if estimate.point is None:
        return "–"
    if not estimate.has_interval:
        return f"{estimate.point:.2f}×"
    point, lo, hi = estimate.interval
    d = _decimals_for(lo, hi)
    return f"{point:.{d}f}× [{lo:.{d}f}, {hi:.{d}f}]"


# ---------------------------------------------------------------- sentences


@dataclass(frozen=True)
class Cell:
    """What a sentence needs about one level: its estimate and outcome."""

    level: int
    estimate: RatioEstimate
    outcome: str
    margin: float


_VERB = {
    FASTER: "is faster than the baseline",
    SLOWER: "is slower than the baseline",
    EQUIVALENT: "is equivalent to the baseline",
    INCONCLUSIVE: "is inconclusive",
    # A primary cell's words beyond these four (experiments/measurement/stats/sequential.py).
    "not worth it": "is not worth deploying (shown to gain less than the smallest gain worth it)",
    "open": "is still open (more blocks are due)",
}


def _size(cell: Cell) -> str:
    """How a faster or slower cell's interval stands to the margin: "by less than" it (the
    interval between 1 and the margin's edge), "possibly by less than" it (across the edge),
    or "" (beyond the edge, or neither faster nor slower)."""
    if cell.outcome not in (FASTER, SLOWER):
        return ""
    _, lo, hi = cell.estimate.interval
    edge = 1 + cell.margin if cell.outcome == FASTER else 1 - cell.margin
    if lo < edge < hi:
        return "possibly by less than"
    inside = hi <= edge if cell.outcome == FASTER else edge <= lo
    return "by less than" if inside else ""


def _segments(cells: Sequence[Cell]) -> list[list[Cell]]:
    """Consecutive levels with the same outcome (and, for faster and slower, the same size
    against the margin)."""
    segments: list[list[Cell]] = []
    for cell in sorted(cells, key=lambda c: c.level):
        if segments and (segments[-1][-1].outcome, _size(segments[-1][-1])) == (cell.outcome, _size(cell)):
            segments[-1].append(cell)
        else:
            segments.append([cell])
    return segments


def _span(levels: list[int], n_segments: int, position: int) -> str:
    if len(levels) == 1:
        return f"at {levels[0]}"
    if n_segments == 1:
        return f"at every measured concurrency, {levels[0]} to {levels[-1]}"
    if position == 0:
        return f"up to {levels[-1]}"
    if position == n_segments - 1:
        return f"from {levels[0]}"
    return f"from {levels[0]} to {levels[-1]}"


def _settle_hint(cells: list[Cell]) -> str:
    needed = [blocks_to_settle(cell.estimate, cell.margin) for cell in cells]
    if any(n is None for n in needed):
        return "; the spread between blocks is too large for a few more repetitions to settle it"
    # An inconclusive interval reaches 1 or leaves the band, so it always needs more blocks than it has.
    return f"; about {max(n for n in needed if n is not None)} blocks in all would settle it"


def _clause(arm_label: str, metric_name: str, segment: list[Cell], position: int, n_segments: int) -> str:
    outcome = segment[0].outcome
    span = _span([cell.level for cell in segment], n_segments, position)
    ends = [segment[0], segment[-1]] if len(segment) > 1 else segment
    figures = ", ".join(f"{figure(cell.estimate)} at {cell.level}" for cell in ends)
    detail = "" if outcome == NO_DATA else f"{metric_name} {figures}"
    size = _size(segment[0])
    if size:
        detail += f", {size} the {segment[0].margin:.0%} margin"
    if outcome == INCONCLUSIVE:
        detail += _settle_hint(segment)
    detail = f" ({detail})" if detail else ""
    verb = _VERB.get(outcome) or f"has {NO_CALL_REASON[outcome]}"
    if position == 0:
        return f"{arm_label} {verb} {span}{detail}"
    return f"{span} it {verb}{detail}"


def sentence(arm_label: str, metric_name: str, cells: Sequence[Cell]) -> str:
    """One plain-language sentence on an arm's speedup across concurrency levels.

    Consecutive levels with the same outcome are reported together, with the figures of
    the first and last of them; an inconclusive stretch says roughly how many blocks
    would settle it. A faster or slower stretch whose intervals lie inside the margin says
    it is so by less than the margin, one whose intervals cross the margin's edge that it
    is possibly so.
    """
    segments = _segments(cells)
    if not segments:
        return f"{arm_label}: no {metric_name} measurements to compare with the baseline."
    clauses = [_clause(arm_label, metric_name, seg, pos, len(segments)) for pos, seg in enumerate(segments)]
    return "; ".join(clauses) + "."


def noise_floor(cells: Sequence[Cell]) -> float | None:
    """How far the A/A replicate's intervals reach from 1, as a fraction: the largest
    max(hi - 1, 1 - lo) over the levels with an interval; None without any."""
    reaches = [
        max(cell.estimate.interval.hi - 1, 1 - cell.estimate.interval.lo)
        for cell in cells
        if cell.estimate.has_interval
    ]
    return max(reaches) if reaches else None


def noise_floor_sentence(metric_name: str, cells: Sequence[Cell]) -> str:
    """What the A/A replicate says about the noise of this experiment."""
    reach = noise_floor(cells)
    moved = ", ".join(f"{figure(cell.estimate)} at {cell.level}" for cell in sorted(cells, key=lambda c: c.level))
    if reach is None:
        return (
            f"The A/A replicate, identical to the baseline, measured {metric_name} {moved}; "
            "too few blocks for an interval."
        )
    text = (
        f"The A/A replicate, identical to the baseline, measured {metric_name} {moved}: its intervals reach "
        f"±{reach:.1%} from 1, so smaller effects cannot be told from the noise of this host and design."
    )
    called = [cell for cell in sorted(cells, key=lambda c: c.level) if cell.outcome in (FASTER, SLOWER)]
    if called:
        where = ", ".join(f"{cell.outcome} at {cell.level}" for cell in called)
        text += (
            f" It was called {where} although nothing differs from the baseline: a false call, which chance "
            "alone makes now and then (on the question's metric in at most 5% of experiments of this design, on "
            "another metric's unadjusted words in about one cell in twenty), and more often when the host's load "
            f"changes during the experiment. The other arms' {metric_name} verdicts here are no surer than that: "
            "see the warnings on whether this host's spread was out of line."
        )
    return text
