"""Statistics for comparing a speculative arm with the baseline.

Plain Python on lists and dicts (no Django, no numpy) so every function can be checked
against a hand-computed case. Metric definitions: docs/metrics.md.

Speedup convention: a value above 1 always means the arm is better. For latencies it is
baseline / arm, for throughputs arm / baseline (`higher_is_better=True`).
"""

import itertools
import math
import random
import statistics
from collections import defaultdict
from dataclasses import dataclass

CONFIDENCE = 0.95
N_RESAMPLES = 2000

FASTER = "faster"
SLOWER = "slower"
INDISTINGUISHABLE = "indistinguishable"
NO_INTERVAL = "no interval"
NO_DATA = "no data"


# ---------------------------------------------------------------- descriptive statistics


def percentile(values, q):
    """The q-th percentile (q in [0, 100]) with linear interpolation; None for no values.

    Same as numpy's default method "linear" (Hyndman & Fan type 7): sort the n values,
    take the fractional rank h = (n - 1) * q / 100 and interpolate between the values at
    floor(h) and floor(h) + 1.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    ordered = sorted(values)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    if low + 1 >= len(ordered):
        return float(ordered[-1])
    return float(ordered[low] + (rank - low) * (ordered[low + 1] - ordered[low]))


def summarise(values):
    """{"mean", "p50", "p90", "p99"} of the values that are not None; all None when there are none."""
    present = [v for v in values if v is not None]
    if not present:
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    return {
        "mean": statistics.fmean(present),
        "p50": percentile(present, 50),
        "p90": percentile(present, 90),
        "p99": percentile(present, 99),
    }


# ---------------------------------------------------------------- per-request latency


def tpot_ms(ttft_ms, e2e_ms, output_tokens):
    """Time per output token after the first: (E2E - TTFT) / (output tokens - 1); None for <= 1 token."""
    if ttft_ms is None or e2e_ms is None or output_tokens is None or output_tokens <= 1:
        return None
    return (e2e_ms - ttft_ms) / (output_tokens - 1)


def itl_ms(chunk_times_ms):
    """Gaps between consecutive streamed chunks (not per token: a chunk may carry several)."""
    return [later - earlier for earlier, later in itertools.pairwise(chunk_times_ms)]


def tokens_per_chunk(chunk_tokens):
    """Mean number of tokens a streamed chunk carried; None for no chunks."""
    if not chunk_tokens:
        return None
    return statistics.fmean(chunk_tokens)


# ---------------------------------------------------------------- acceptance


def acceptance_rate(accepted, draft_tokens):
    """vLLM's draft acceptance rate: accepted draft tokens / proposed draft tokens."""
    if not draft_tokens:
        return None
    return accepted / draft_tokens


def acceptance_length(accepted, drafts):
    """Mean acceptance length tau = 1 + accepted / drafts (the 1 is the bonus token)."""
    if not drafts:
        return None
    return 1 + accepted / drafts


def per_position_unconditional(accepted_per_pos, drafts):
    """accepted_at_pos[i] / drafts: the share of drafts accepted at least up to position i (vLLM's figure)."""
    if not drafts:
        return [None] * len(accepted_per_pos)
    return [count / drafts for count in accepted_per_pos]


def per_position_conditional(accepted_per_pos, drafts):
    """P(accept position i | accepted position i - 1): pos[0] / drafts, then pos[i] / pos[i - 1].

    None where the previous position was never accepted.
    """
    previous = [drafts, *list(accepted_per_pos[:-1])]
    return [count / prev if prev else None for count, prev in zip(accepted_per_pos, previous, strict=True)]


def acceptance_along_output(requests, bucket_tokens):
    """Mean accepted draft tokens per verify step against the position in the output.

    `requests` holds mappings with "accepted_per_step" (ints) and optionally
    "proposed_per_step" (ints or None). The first output token comes from prefill, so
    the first verify step starts at output index 1; each step then advances the index by
    accepted + 1 (the bonus or corrected token). A step is put in the bucket of the index
    it starts at. Steps that proposed no draft token still advance the index by one but
    are left out of the mean: they say nothing about acceptance.

    Returns [(bucket_start, mean_accepted, n_steps)] sorted by bucket_start, empty
    buckets left out.
    """
    if bucket_tokens < 1:
        raise ValueError("bucket_tokens must be at least 1")
    totals = defaultdict(lambda: [0, 0])
    for request in requests:
        accepted = request["accepted_per_step"] or []
        proposed = request.get("proposed_per_step") or [None] * len(accepted)
        if len(proposed) != len(accepted):
            raise ValueError("accepted_per_step and proposed_per_step differ in length")
        index = 1
        for step_accepted, step_proposed in zip(accepted, proposed, strict=True):
            if step_proposed != 0:
                bucket = totals[index // bucket_tokens * bucket_tokens]
                bucket[0] += step_accepted
                bucket[1] += 1
            index += step_accepted + 1
    return [(start, total / steps, steps) for start, (total, steps) in sorted(totals.items())]


# ---------------------------------------------------------------- Leviathan et al. 2023


def _expected_tokens_per_step(alpha, gamma):
    # (1 - a^(g+1)) / (1 - a) written as a sum, which stays exact at a = 1.
    return sum(alpha**i for i in range(gamma + 1))


def alpha_from_tau(tau, gamma):
    """Per-token acceptance alpha that solves (1 - a^(g+1)) / (1 - a) = tau, by bisection.

    The left side rises from 1 (a = 0) to g + 1 (a -> 1), so tau <= 1 gives 0.0 and
    tau >= g + 1 gives 1.0 (the limit, every draft accepted). None when tau is None.
    """
    if gamma < 1:
        raise ValueError("gamma (draft length) must be at least 1")
    if tau is None:
        return None
    if tau <= 1:
        return 0.0
    if tau >= gamma + 1:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(100):
        middle = (low + high) / 2
        if _expected_tokens_per_step(middle, gamma) < tau:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def predicted_speedup(alpha, gamma, c):
    """Leviathan et al.'s walltime improvement (1 - a^(g+1)) / ((1 - a)(g c + 1)); (g+1)/(g c+1) at a = 1."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if c < 0:
        raise ValueError(f"cost ratio c must be >= 0, got {c}")
    return _expected_tokens_per_step(alpha, gamma) / (gamma * c + 1)


def estimate_cost_ratio(baseline_tpot_ms, arm_tpot_ms, tau, gamma):
    """The cost ratio c implied by measured TPOTs at one concurrency level, clamped to >= 0.

    Method: the arm emits tau tokens per verify step on average, so one step takes
    t_s = arm TPOT * tau. In the model a step costs a target step t_b (the baseline's
    TPOT at the same concurrency) plus gamma draft steps of c * t_b each:
    t_s = t_b (1 + gamma c), hence c = (t_s / t_b - 1) / gamma.

    This c lumps every cost of speculation (drafting, verifying gamma + 1 positions,
    rejection sampling, scheduling) into the draft cost. Because it is derived from the
    measured speedup, predicted_speedup(alpha_from_tau(tau, gamma), gamma, c) equals the
    measured baseline TPOT / arm TPOT whenever the clamp does not apply: use it as a
    diagnostic ("effective cost of a draft token"), not as an independent prediction.
    None when an input is missing or not positive.
    """
    if None in (baseline_tpot_ms, arm_tpot_ms, tau) or min(baseline_tpot_ms, arm_tpot_ms, tau) <= 0:
        return None
    step_ms = arm_tpot_ms * tau
    return max(0.0, (step_ms / baseline_tpot_ms - 1) / gamma)


# ---------------------------------------------------------------- speedup with uncertainty


@dataclass(frozen=True)
class SpeedupEstimate:
    """A speedup (above 1: the arm is better) with its percentile bootstrap interval.

    lo and hi are None when no interval can be computed; `note` says why.
    n_pairs is None for run-level estimates (one value per run, no requests to pair).
    """

    point: float | None
    lo: float | None
    hi: float | None
    n_pairs: int | None
    n_repetitions: int
    note: str = ""

    def row(self, level):
        """(level, point, lo, hi, note): the row shape break_even_concurrency and verdict take."""
        return (level, self.point, self.lo, self.hi, self.note)


def _ratio(baseline_total, arm_total, higher_is_better):
    numerator, denominator = (arm_total, baseline_total) if higher_is_better else (baseline_total, arm_total)
    # A resample can draw only zero values (e.g. TPOT 0 when a whole output came in one chunk).
    return numerator / denominator if denominator else math.inf


def _interval(ratios, confidence):
    tail = (1 - confidence) / 2 * 100
    return percentile(ratios, tail), percentile(ratios, 100 - tail)


def _paired_by_repetition(baseline, arm):
    """{repetition: ([baseline values], [arm values])} over the keys both sides have a value for."""
    pairs = defaultdict(lambda: ([], []))
    for key in sorted(baseline.keys() & arm.keys()):
        base_value, arm_value = baseline[key], arm[key]
        if base_value is None or arm_value is None:
            continue
        if base_value < 0 or arm_value < 0:
            raise ValueError(f"speedup needs values of at least 0; got {base_value}, {arm_value} at {key}")
        pairs[key[0]][0].append(base_value)
        pairs[key[0]][1].append(arm_value)
    return dict(pairs)


def _resample_totals(rng, groups):
    """One two-level resample: repetitions with replacement, then prompts within each."""
    base_total = arm_total = 0.0
    for base_values, arm_values in rng.choices(groups, k=len(groups)):
        picks = rng.choices(range(len(base_values)), k=len(base_values))
        base_total += sum(map(base_values.__getitem__, picks))
        arm_total += sum(map(arm_values.__getitem__, picks))
    return base_total, arm_total


def paired_bootstrap_speedup(
    baseline, arm, *, higher_is_better=False, n_resamples=N_RESAMPLES, confidence=CONFIDENCE, seed=0
):
    """Speedup of an arm over the baseline at one concurrency level, from per-request values.

    `baseline` and `arm` map (repetition, prompt_index) -> value (e.g. TPOT in ms; None
    for a request without one). Only keys where both sides have a value are used, so
    every pair is the same prompt in the same repetition.

    Point estimate: ratio of means over all pairs (baseline / arm for latencies, arm /
    baseline with higher_is_better).

    Interval: a two-level (hierarchical) percentile bootstrap. Each resample draws the
    repetitions with replacement (the same repetition index for both arms), then, within
    each drawn repetition, draws its prompts with replacement (the same prompt indices for
    both arms), and takes the ratio of the resampled sums. The outer level carries the
    run-to-run spread, the inner one the prompt-to-prompt spread while keeping the
    pairing. Resampling at both levels counts the within-run noise in both and so errs
    wide; with only 2-3 repetitions the outer level has few distinct draws. With one
    repetition it reduces to the plain paired bootstrap over prompts. Seeded, so the same
    inputs give the same interval. Fewer than two pairs give no interval.

    Cost: about 0.3 s for 500 pairs and 2000 resamples on the development machine, and
    linear in pairs x resamples; compute it once per finished level, not per page view.
    """
    groups = list(_paired_by_repetition(baseline, arm).values())
    n_pairs = sum(len(base_values) for base_values, _ in groups)
    if n_pairs == 0:
        return SpeedupEstimate(None, None, None, 0, 0, "no paired requests")
    base_sum = sum(sum(base_values) for base_values, _ in groups)
    arm_sum = sum(sum(arm_values) for _, arm_values in groups)
    if base_sum == 0 or arm_sum == 0:
        return SpeedupEstimate(None, None, None, n_pairs, len(groups), "all values are zero, no ratio")
    point = _ratio(base_sum, arm_sum, higher_is_better)
    if n_pairs < 2:
        return SpeedupEstimate(point, None, None, n_pairs, len(groups), "one paired request, no interval")
    rng = random.Random(seed)
    ratios = [_ratio(*_resample_totals(rng, groups), higher_is_better) for _ in range(n_resamples)]
    lo, hi = _interval(ratios, confidence)
    return SpeedupEstimate(point, lo, hi, n_pairs, len(groups))


def run_level_speedup(
    baseline_runs, arm_runs, *, higher_is_better=True, n_resamples=N_RESAMPLES, confidence=CONFIDENCE, seed=0
):
    """Speedup from one value per run (e.g. output throughput), one run per repetition.

    Point estimate: ratio of the means over repetitions (arm / baseline by default, since
    run-level metrics are throughputs). Interval: percentile bootstrap over repetitions,
    each side resampled on its own: runs of different arms are separate measurements with
    nothing to pair them by. With fewer than two runs on a side there is no interval. With
    2-3 repetitions the bootstrap sees very few distinct resamples and its interval is
    narrow: read it as a rough spread, not a calibrated 95% interval.
    """
    if not baseline_runs or not arm_runs:
        return SpeedupEstimate(None, None, None, None, 0, "no runs")
    n_repetitions = min(len(baseline_runs), len(arm_runs))
    point = _ratio(statistics.fmean(baseline_runs), statistics.fmean(arm_runs), higher_is_better)
    if n_repetitions < 2:
        return SpeedupEstimate(point, None, None, None, n_repetitions, "one repetition, no interval")
    rng = random.Random(seed)
    ratios = [
        _ratio(
            statistics.fmean(rng.choices(baseline_runs, k=len(baseline_runs))),
            statistics.fmean(rng.choices(arm_runs, k=len(arm_runs))),
            higher_is_better,
        )
        for _ in range(n_resamples)
    ]
    lo, hi = _interval(ratios, confidence)
    return SpeedupEstimate(point, lo, hi, None, n_repetitions)


# ---------------------------------------------------------------- reading the intervals


def classify(point, lo, hi):
    """FASTER if lo > 1, SLOWER if hi < 1, INDISTINGUISHABLE if the interval holds 1; else NO_INTERVAL/NO_DATA."""
    if point is None:
        return NO_DATA
    if lo is None or hi is None:
        return NO_INTERVAL
    if lo > 1:
        return FASTER
    if hi < 1:
        return SLOWER
    return INDISTINGUISHABLE


def break_even_concurrency(levels_with_ci):
    """The lowest concurrency level at which the speedup is no longer significantly above 1.

    Rows are (level, point, lo, hi[, note]). Walking up the levels, the first one whose
    interval does not lie wholly above 1 (lo <= 1, or no interval at all) is returned:
    every level below it showed a significant gain. That is the lowest level itself when
    speculation never paid, and None when every level was significantly above 1. A level
    further up that is significant again does not move the break-even; verdict() reports
    the full pattern.
    """
    for level, point, lo, hi, *_ in sorted(levels_with_ci, key=lambda row: row[0]):
        if classify(point, lo, hi) != FASTER:
            return level
    return None


# ---------------------------------------------------------------- verdict sentence


_VERB = {
    FASTER: "is faster than the baseline",
    SLOWER: "is slower than the baseline",
    INDISTINGUISHABLE: "is not distinguishable from the baseline",
    NO_INTERVAL: "cannot be called faster or slower",
    NO_DATA: "has no paired measurements",
}


def _decimals_for(lo, hi):
    # Enough decimals that a bound on one side of 1 is not printed as 1.00.
    for decimals in (2, 3, 4):
        if all(bound == 1 or round(bound, decimals) != 1 for bound in (lo, hi)):
            return decimals
    return 4


def _figure(level, point, lo, hi):
    if point is None:
        return None
    if lo is None or hi is None:
        return f"{point:.2f}× at {level}"
    d = _decimals_for(lo, hi)
    return f"{point:.{d}f}× [{lo:.{d}f}, {hi:.{d}f}] at {level}"


def _segments(rows):
    """Consecutive levels with the same reading: [(kind, note, [rows])]."""
    segments = []
    for row in sorted(rows, key=lambda row: row[0]):
        _, point, lo, hi, *rest = row
        kind = classify(point, lo, hi)
        note = (rest[0] if rest else "") or NO_INTERVAL
        if segments and segments[-1][0] == kind and (kind != NO_INTERVAL or segments[-1][1] == note):
            segments[-1][2].append(row)
        else:
            segments.append((kind, note, [row]))
    return segments


def _span(position, n_segments, levels, first_clause):
    unit = (" concurrent request" + ("s" if levels[-1] != 1 else "")) if first_clause else ""
    if len(levels) == 1:
        return f"at {levels[0]}{unit}"
    if n_segments == 1:
        return f"at every measured concurrency, {levels[0]} to {levels[-1]}{unit}"
    if position == 0:
        return f"up to {levels[-1]}{unit}"
    if position == n_segments - 1:
        return f"from {levels[0]}{unit}"
    return f"from {levels[0]} to {levels[-1]}{unit}"


def _clause(arm_label, metric_name, segment, position, n_segments):
    kind, note, rows = segment
    levels = [row[0] for row in rows]
    span = _span(position, n_segments, levels, first_clause=position == 0)
    figures = [_figure(*rows[0][:4])] + ([_figure(*rows[-1][:4])] if len(rows) > 1 else [])
    detail = f"{metric_name} {', '.join(figures)}" if kind != NO_DATA else ""
    if kind == NO_INTERVAL:
        detail += f"; {note}"
    detail = f" ({detail})" if detail else ""
    if position == 0:
        return f"{arm_label} {_VERB[kind]} {span}{detail}"
    return f"{span} it {_VERB[kind]}{detail}"


def verdict(arm_label, metric_name, rows):
    """One plain-language sentence on an arm's speedup across concurrency levels.

    Rows are (level, point, lo, hi[, note]) as SpeedupEstimate.row() gives them. A level
    is called faster only when its whole interval lies above 1 and slower only when it
    lies below 1; otherwise it is "not distinguishable". A level without an interval is
    never called a gain; its note (e.g. "one repetition, no interval") is quoted.
    Consecutive levels with the same reading are reported together.
    """
    segments = _segments(rows)
    if not segments:
        return f"{arm_label}: no {metric_name} measurements to compare with the baseline."
    clauses = [
        _clause(arm_label, metric_name, segment, position, len(segments)) for position, segment in enumerate(segments)
    ]
    return "; ".join(clauses) + "."
