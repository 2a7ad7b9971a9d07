"""The verdict on a speedup: one of four words where the design supports a call, and the
sentences the experiment page prints.

A verdict is a claim, so it is made only where the experiment's design supports it:
- faster: the whole interval lies above 1; slower: below 1;
- equivalent: the whole interval lies inside 1 ± the experiment's margin (the smallest
  effect worth acting on);
- inconclusive: otherwise.
No word is given with fewer than MIN_BLOCKS blocks (the interval over 2 blocks rests on
one degree of freedom), when the arm and the baseline failed different numbers of
requests (dropping failures favours the arm that fails its slowest ones), for throughput
under a fixed Poisson arrival rate (it then measures the arrival rate), for the client's
TTFT and TPOT when a run's stream was distorted (experiments/measurement/stream_fidelity.py: the client
did not see the tokens when the engine made them), or without data.
scripts/check_verdicts.py checks by simulation how often these words are wrong.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from experiments.measurement.stats import RatioEstimate, blocks_to_settle

MIN_BLOCKS = 3

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
    FAILURES_DIFFER: "no verdict: the arm and the baseline failed different numbers of requests",
    NOT_APPLICABLE: "no verdict: under a fixed request rate the throughput measures the arrival rate",
    NO_DATA: "no paired measurements",
    STREAM_DISTORTED: (
        "no verdict: in some block the client did not see the stream as the engine made it (see Stream fidelity), "
        "so its timing of the tokens measures the host, not the arm"
    ),
}


def classify(
    estimate: RatioEstimate,
    *,
    margin: float,
    failed_baseline: int = 0,
    failed_arm: int = 0,
    applicable: bool = True,
    stream_faithful: bool = True,
) -> str:
    """The outcome for one arm, level and metric: a word of CALLS, or why there is none."""
    if not applicable:
        return NOT_APPLICABLE
    if estimate.point is None:
        return NO_DATA
    if not stream_faithful:
        return STREAM_DISTORTED
    if failed_baseline != failed_arm:
        return FAILURES_DIFFER
    if estimate.n_blocks < MIN_BLOCKS or not estimate.has_interval:
        return TOO_FEW_BLOCKS
    _, lo, hi = estimate.interval
    if lo > 1:
        return FASTER
    if hi < 1:
        return SLOWER
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
}


def _segments(cells: Sequence[Cell]) -> list[list[Cell]]:
    """Consecutive levels with the same outcome."""
    segments: list[list[Cell]] = []
    for cell in sorted(cells, key=lambda c: c.level):
        if segments and segments[-1][-1].outcome == cell.outcome:
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
    if outcome == FASTER and all(cell.estimate.interval.lo < 1 + cell.margin for cell in segment):
        detail += f", possibly by less than the {segment[0].margin:.0%} margin"
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
    would settle it.
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
            f" It was called {where} although nothing differs from the baseline: a false call, which a 95% "
            "interval makes in about one cell in twenty by chance, and more often when the host's load changes "
            f"during the experiment. The other arms' {metric_name} verdicts here are no surer than that: "
            "repeat the experiment with more blocks, on a quieter host, before acting on them."
        )
    return text
