"""Statistics for comparing a speculative arm with the baseline.

Plain Python on lists and dicts (no Django), so every function can be checked against a
hand-computed case; scipy supplies Student's t quantiles and Fisher's exact test, and
numpy the loops over every step or chunk of an experiment's requests (millions at scale),
which count exactly what the plain loops counted. Metric definitions: docs/metrics.md;
the measurement design and why the interval is built this way: docs/verdicts.md.

Speedup convention: a value above 1 always means the arm is better. For latencies it is
baseline / arm, for throughputs arm / baseline (`higher_is_better=True`).
"""

import functools
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, pairwise
from typing import NamedTuple

import numpy as np
from scipy import stats as scipy_stats

CONFIDENCE = 0.95


# ---------------------------------------------------------------- descriptive statistics


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (q in [0, 100]) with linear interpolation; None for no values.

    Same as numpy's default method "linear" (Hyndman & Fan type 7): sort the n values,
    take the fractional rank h = (n - 1) * q / 100 and interpolate between the values at
    floor(h) and floor(h) + 1.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    ordered = sorted(values)
    return _sorted_percentile(ordered, q) if ordered else None


def summarise(values: Iterable[float | None]) -> dict[str, float | None]:
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


def summarise_array(values: np.ndarray) -> dict[str, float | None]:
    """summarise() of a numpy array (no None in it), for the tens of thousands of gaps of a
    run: the percentiles are the same numbers; the mean is numpy's pairwise sum, which can
    differ from fmean's exactly rounded one in the last bits."""
    if not len(values):
        return {"mean": None, "p50": None, "p90": None, "p99": None}
    ordered = np.sort(values)
    mean: dict[str, float | None] = {"mean": float(ordered.mean())}
    return mean | {f"p{q}": _sorted_percentile(ordered, q) for q in (50, 90, 99)}


def _sorted_percentile(ordered: Sequence[float] | np.ndarray, q: float) -> float:
    """The q-th percentile of values sorted in ascending order (at least one)."""
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    if low + 1 >= len(ordered):
        return float(ordered[-1])
    return float(ordered[low] + (rank - low) * (ordered[low + 1] - ordered[low]))


# ---------------------------------------------------------------- per-request latency


def tpot_ms(ttft_ms: float | None, e2e_ms: float | None, output_tokens: int | None) -> float | None:
    """Time per output token after the first: (E2E - TTFT) / (output tokens - 1); None for <= 1 token."""
    if ttft_ms is None or e2e_ms is None or output_tokens is None or output_tokens <= 1:
        return None
    return (e2e_ms - ttft_ms) / (output_tokens - 1)


def itl_ms(chunk_times_ms: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Gaps between consecutive streamed chunks of each request (not per token: a chunk may
    carry several). `chunk_times_ms`: the requests' chunk arrival times one request after
    another; `starts`: where each request's begin (experiments.measurement.packed.unpack_many)."""
    within = np.ones(max(len(chunk_times_ms) - 1, 0), bool)
    within[starts[(starts > 0) & (starts <= len(within))] - 1] = False  # no gap across requests
    return np.diff(chunk_times_ms)[within]


def decode_tokens_per_chunk(chunk_tokens: np.ndarray, starts: np.ndarray) -> float | None:
    """Mean number of tokens a streamed chunk carried, leaving out each request's first chunk
    (it comes from prefill and carries one token whatever the method: counting it would pull
    every arm's mean towards 1); None for no such chunk. Arguments as for itl_ms."""
    decode = np.ones(len(chunk_tokens), bool)
    decode[starts[starts < len(chunk_tokens)]] = False
    return float(chunk_tokens[decode].mean()) if decode.any() else None


# ---------------------------------------------------------------- acceptance


def acceptance_rate(accepted: int | None, draft_tokens: int | None) -> float | None:
    """vLLM's draft acceptance rate: accepted draft tokens / proposed draft tokens."""
    if not draft_tokens or accepted is None:
        return None
    return accepted / draft_tokens


def acceptance_length(accepted: int | None, drafts: int | None) -> float | None:
    """Mean acceptance length tau = 1 + accepted / drafts (the 1 is the bonus token)."""
    if not drafts or accepted is None:
        return None
    return 1 + accepted / drafts


def decode_steps(output_tokens: int, accepted_per_step: Sequence[int] | None) -> int:
    """The engine steps that produced a request's output after its first token.

    Without speculation every decode step emits one token: output tokens - 1 steps. With
    it, vLLM's per-request `per_step_accepted` lists the steps that drafted something,
    each emitting accepted + 1 tokens; steps that drafted nothing (an n-gram or suffix
    lookup without a match) are not listed and emit one token each, so they are the
    tokens left over. The list can end with a step whose tokens were cut off at
    max_tokens (vLLM counts its acceptances anyway): steps after the output was complete
    are not counted.
    """
    emitted = max(0, output_tokens - 1)
    produced = steps = 0
    for accepted in accepted_per_step or ():
        if produced >= emitted:
            break
        produced += accepted + 1
        steps += 1
    return steps + max(0, emitted - produced)


def tokens_per_decode_step(tokens_after_first: int, steps: int) -> float | None:
    """Output tokens after each request's first (which prefill produces) per decode step,
    summed over requests; None without steps.

    Unlike tau, the steps on which the proposer drafted nothing count: this is what the
    decoding speed depends on. 1 for plain decoding.
    """
    if steps <= 0:
        return None
    return tokens_after_first / steps


def per_position_unconditional(accepted_per_pos: Sequence[int], drafts: int | None) -> list[float | None]:
    """accepted_at_pos[i] / drafts: the share of drafts accepted at least up to position i (vLLM's figure)."""
    if not drafts:
        return [None] * len(accepted_per_pos)
    return [count / drafts for count in accepted_per_pos]


def per_position_conditional(accepted_per_pos: Sequence[int], drafts: int) -> list[float | None]:
    """P(accept position i | accepted position i - 1): pos[0] / drafts, then pos[i] / pos[i - 1].

    From vLLM's counters, which assume every draft has the full length. None where the
    previous position was never accepted.
    """
    return [count / prev if prev else None for prev, count in pairwise([drafts, *accepted_per_pos])]


def per_position_conditional_from_steps(
    steps: Iterable[tuple[Sequence[int], Sequence[int]]],
) -> list[tuple[int, int]]:
    """Conditional acceptance from what was actually drafted at each position.

    `steps` yields one request's (accepted_per_step, drafted_per_step) arrays. Position i
    of a step was *at stake* when the step drafted more than i tokens and accepted the
    first i; it was *accepted* when the step accepted more than i. Returns
    [(accepted, at_stake)] per position: their ratio is P(accept i | i drafted and every
    earlier position accepted). Methods with a variable draft length (n-gram lookup, which
    may propose fewer than k tokens) are read correctly, unlike from the counters.
    """
    accepted_lists, drafted_lists = [], []
    for accepted_per_step, drafted_per_step in steps:
        if len(accepted_per_step) != len(drafted_per_step):
            raise ValueError("accepted_per_step and drafted_per_step differ in length")
        accepted_lists.append(accepted_per_step)
        drafted_lists.append(drafted_per_step)
    accepted, drafted = _flat(accepted_lists), _flat(drafted_lists)
    # A step puts positions 0 to min(accepted + 1, drafted) - 1 at stake, and of those it
    # accepts the ones below min(accepted, drafted).
    at_stake = np.maximum(np.minimum(accepted + 1, drafted), 0)
    accepted_up_to = np.maximum(np.minimum(accepted, drafted), 0)
    # The positions at stake in a step are 0 to some m - 1, so those of all steps are 0 to the largest.
    positions = int(at_stake.max()) if len(at_stake) else 0
    return list(zip(_steps_beyond(accepted_up_to, positions), _steps_beyond(at_stake, positions), strict=True))


def _flat(lists: Sequence[Sequence[int]]) -> np.ndarray:
    """The integers of all the lists, one after the other."""
    return np.fromiter(chain.from_iterable(lists), np.int64, sum(map(len, lists)))


def _steps_beyond(reach: np.ndarray, positions: int) -> list[int]:
    """For each position p below `positions`, how many of the values in `reach` exceed p."""
    at_least = np.bincount(reach, minlength=positions + 1)[::-1].cumsum()[::-1]
    counts: list[int] = at_least[1 : positions + 1].tolist()
    return counts


def decode_step_tokens(
    output_tokens: int,
    accepted_per_step: Sequence[int] | None,
    chunk_tokens: Sequence[int],
    *,
    speculative: bool,
) -> Sequence[int] | None:
    """The output tokens of each of a request's decode steps, in order, or None when its
    record cannot tell them apart.

    Plain decoding (`speculative` False) emits one token a step. A speculative arm's steps
    come from vLLM's per-request `per_step_accepted` when it accounts for every step, as it
    does for methods that draft at every step (a draft model, EAGLE, MTP): step i emits
    accepted_i + 1 tokens, the last one cut where the output ended (see decode_steps).
    Otherwise (a lookup method that skipped drafting on some steps, which the list leaves
    out, or a record without the list) from the streamed chunks after the first, which vLLM
    sends one per engine step unless the client falls behind and it merges several: they
    are used only when they number exactly the decode steps. None when they do not.
    """
    emitted = max(0, output_tokens - 1)
    if not speculative:
        return [1] * emitted
    if accepted_per_step:
        steps, produced = [], 0
        for accepted in accepted_per_step:
            if produced >= emitted:
                break
            steps.append(min(accepted + 1, emitted - produced))
            produced += steps[-1]
        if produced == emitted:
            return steps
    if len(chunk_tokens) - 1 == decode_steps(output_tokens, accepted_per_step):
        return chunk_tokens[1:]
    return None


def tokens_per_step_along_output(
    requests: Iterable[Sequence[int] | None], bucket_tokens: int
) -> tuple[list[tuple[int, float, int]], int]:
    """Tokens per decode step against the position in the output.

    `requests` yields each request's tokens per decode step in order (decode_step_tokens),
    or None for a request whose steps cannot be told apart, which is left out and counted.
    The first token comes from prefill, so the first decode step starts at output index 1;
    a step is put in the bucket of the output index where it starts.

    Returns ([(bucket_start, mean tokens per step, steps)] sorted by bucket_start, the
    number of requests left out).
    """
    if bucket_tokens < 1:
        raise ValueError("bucket_tokens must be at least 1")
    used, left_out = [], 0
    for steps in requests:
        if steps is None:
            left_out += 1
        elif len(steps):  # a one-token output has no decode step
            used.append(steps)
    tokens = _flat(used)
    lengths = np.fromiter(map(len, used), np.int64, len(used))
    first = np.cumsum(lengths) - lengths
    # Where each step starts in its request's output: 1 plus the tokens of the steps before it.
    before = np.cumsum(tokens) - tokens
    starts = 1 + before - np.repeat(before[first], lengths)
    buckets, where = np.unique(starts // bucket_tokens * bucket_tokens, return_inverse=True)
    totals = np.zeros(len(buckets), np.int64)
    np.add.at(totals, where, tokens)
    counts = np.bincount(where, minlength=len(buckets))
    rows = zip(buckets.tolist(), totals.tolist(), counts.tolist(), strict=True)
    return [(start, total / n, n) for start, total, n in rows], left_out


# ---------------------------------------------------------------- Leviathan et al. 2023


def expected_tokens_per_step(conditional: Sequence[float | None]) -> float:
    """Tokens a verify step yields on average, from the conditional acceptance by position.

    Position i's draft is accepted with probability a_0 · a_1 · … · a_i (each conditional on
    the ones before it), and the step always adds one token (bonus or corrected), so the
    expected yield is 1 + Σ_i Π_(j ≤ i) a_j. Exact for any per-position rates: no per-token
    rate alpha shared by the positions is assumed. A None rate (the previous position never
    accepted) ends the sum: no later position was accepted either.
    """
    total, reach = 1.0, 1.0
    for rate in conditional:
        if rate is None:
            break
        if not 0 <= rate <= 1:
            raise ValueError(f"an acceptance rate must be in [0, 1], got {rate}")
        reach *= rate
        total += reach
    return total


def predicted_speedup(tokens_per_step: float, gamma: int, c: float) -> float:
    """Leviathan et al.'s walltime improvement: E / (γc + 1).

    A step drafts γ tokens at c target steps each, then verifies them in one target step,
    and yields E tokens (expected_tokens_per_step); plain decoding yields one per target
    step. With a per-token rate alpha, E = (1 − α^(γ+1)) / (1 − α), their formula.
    """
    if gamma < 1:
        raise ValueError("gamma (draft length) must be at least 1")
    if c < 0:
        raise ValueError(f"cost ratio c must be >= 0, got {c}")
    if tokens_per_step < 1:
        raise ValueError(f"a step yields at least one token, got {tokens_per_step}")
    return tokens_per_step / (gamma * c + 1)


# ---------------------------------------------------------------- speedup per block


def ratio_of_means(
    baseline: Mapping[int, float | None], arm: Mapping[int, float | None], *, higher_is_better: bool = False
) -> tuple[float | None, int]:
    """One block's speedup from per-request values paired by prompt, and the number of pairs.

    `baseline` and `arm` map prompt_index -> value (e.g. TPOT in ms; None for a request
    without one). Only prompts both sides have a value for are used, so the two means
    are over the same prompts. The ratio is baseline mean / arm mean (arm / baseline with
    `higher_is_better`). None when there is no pair or the denominator's mean is 0. The
    block ratio of E2E and TTFT, and of TPOT the per-request estimand (the verdict's is
    pooled_per_token_ratio).
    """
    both = [(baseline[k], arm[k]) for k in sorted(baseline.keys() & arm.keys())]
    pairs = [(b, a) for b, a in both if b is not None and a is not None]
    for b, a in pairs:
        if b < 0 or a < 0:
            raise ValueError(f"speedup needs values of at least 0; got {b}, {a}")
    if not pairs:
        return None, 0
    base_sum, arm_sum = sum(b for b, _ in pairs), sum(a for _, a in pairs)
    return _ratio(base_sum, arm_sum, higher_is_better), len(pairs)


def pooled_per_token_ratio(
    baseline: Mapping[int, float | None],
    arm: Mapping[int, float | None],
    *,
    baseline_tokens: Mapping[int, int],
    arm_tokens: Mapping[int, int],
) -> tuple[float | None, int]:
    """One block's TPOT speedup as decode time per decode token pooled over the requests, and
    the number of pairs.

    `baseline` and `arm` map prompt_index -> TPOT (None for a request without one), the
    `*_tokens` mappings prompt_index -> the request's output tokens. Over the prompts both
    sides have a TPOT for, each side's figure is its total decode time over its total decode
    tokens, Σ tpot_i · (n_i − 1) / Σ (n_i − 1); the ratio is baseline / arm. Every decode
    token weighs the same, so a long output counts for its length, where ratio_of_means
    gives every request the same weight (a harmonic mean of the per-request speedups
    weighted by the baseline's TPOT). None when there is no pair or a side's figure is 0.
    """
    pairs = []
    for prompt in sorted(baseline.keys() & arm.keys()):
        b, a = baseline[prompt], arm[prompt]
        if b is None or a is None:
            continue
        if b < 0 or a < 0:
            raise ValueError(f"speedup needs values of at least 0; got {b}, {a}")
        nb, na = baseline_tokens.get(prompt), arm_tokens.get(prompt)
        if nb is None or na is None or nb < 2 or na < 2:
            raise ValueError(f"prompt {prompt} has a TPOT without an output of at least 2 tokens: {nb}, {na}")
        pairs.append((b, nb - 1, a, na - 1))
    if not pairs:
        return None, 0
    base_rate = sum(b * d for b, d, _, _ in pairs) / sum(d for _, d, _, _ in pairs)
    arm_rate = sum(a * d for _, _, a, d in pairs) / sum(d for _, _, _, d in pairs)
    return _ratio(base_rate, arm_rate, False), len(pairs)


def _ratio(baseline_value: float, arm_value: float, higher_is_better: bool) -> float | None:
    numerator, denominator = (arm_value, baseline_value) if higher_is_better else (baseline_value, arm_value)
    # No ratio with a zero on either side: a zero numerator has no logarithm, a zero
    # denominator no finite value.
    if numerator <= 0 or denominator <= 0:
        return None
    return numerator / denominator


def run_ratio(baseline_value: float | None, arm_value: float | None, *, higher_is_better: bool = True) -> float | None:
    """One block's speedup from one value per run (e.g. output throughput)."""
    if baseline_value is None or arm_value is None:
        return None
    return _ratio(baseline_value, arm_value, higher_is_better)


# ---------------------------------------------------------------- interval over blocks


class IntervalFigures(NamedTuple):
    """The figures of an estimate that has an interval, all of them numbers."""

    point: float
    lo: float
    hi: float


@dataclass(frozen=True)
class RatioEstimate:
    """A speedup (above 1: the arm is better) estimated from one ratio per block.

    point is the geometric mean of the block ratios; lo and hi bound the 95 % t-interval
    on the mean log ratio, None with fewer than two blocks. `log_sd` is the standard
    deviation of the log ratios between blocks (None with fewer than two), the figure the
    "how many more blocks" advice works from.
    """

    point: float | None
    lo: float | None
    hi: float | None
    block_ratios: tuple[float, ...] = field(default_factory=tuple)
    log_sd: float | None = None
    note: str = ""

    @property
    def n_blocks(self) -> int:
        return len(self.block_ratios)

    @property
    def has_interval(self) -> bool:
        return self.lo is not None and self.hi is not None

    @property
    def interval(self) -> IntervalFigures:
        """point, lo and hi of an estimate that has an interval (a point comes with every interval)."""
        assert self.point is not None, "no interval"
        assert self.lo is not None, "no interval"
        assert self.hi is not None, "no interval"
        return IntervalFigures(self.point, self.lo, self.hi)


@functools.cache
def t_quantile(confidence: float, df: int) -> float:
    """The two-sided Student t critical value: P(|T| <= q) = confidence with df degrees of freedom.

    Kept per (confidence, df): an analysis asks for the same few values hundreds of times,
    and scipy takes about a millisecond each."""
    return float(scipy_stats.t.ppf((1 + confidence) / 2, df))


def block_interval(block_ratios: Sequence[float], *, confidence: float = CONFIDENCE) -> RatioEstimate:
    """Speedup and its interval from one ratio per block.

    The block is the unit of replication: in each block every arm ran on a fresh server,
    in a random order, so the ratios of different blocks are independent measurements
    that carry the variance between server starts and between runs, and drift of the
    host becomes noise instead of bias. Requests inside a run share batches and are not
    independent, so they refine each block's ratio but do not count as samples.

    On the log scale the ratio is a difference, and the t-interval on the mean of n log
    ratios with n - 1 degrees of freedom is exact when they are normal; it is transformed
    back, so the point is the geometric mean of the block ratios. With one block: a point,
    no interval. Ratios must be positive and finite.
    """
    ratios = tuple(float(r) for r in block_ratios)
    if not ratios:
        return RatioEstimate(None, None, None, note="no block with a ratio")
    if any(not math.isfinite(r) or r <= 0 for r in ratios):
        raise ValueError(f"block ratios must be positive and finite, got {ratios}")
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return RatioEstimate(math.exp(mean), None, None, ratios, None, "one block, no interval")
    sd = statistics.stdev(logs)
    half = t_quantile(confidence, len(logs) - 1) * sd / math.sqrt(len(logs))
    return RatioEstimate(math.exp(mean), math.exp(mean - half), math.exp(mean + half), ratios, sd)


def blocks_to_settle(
    estimate: RatioEstimate, margin: float, *, confidence: float = CONFIDENCE, cap: int = 99
) -> int | None:
    """Roughly how many blocks in all would settle an inconclusive estimate, or None beyond `cap`.

    Taking the current geometric mean and spread between blocks as the truth, the
    smallest n whose expected t-interval, mean ± t(n-1) * sd / sqrt(n) on the log scale,
    either excludes 1 (faster/slower) or fits inside 1 ± margin (equivalent). A planning
    figure, not a promise: the next blocks move both the mean and the spread.
    """
    if estimate.point is None or estimate.log_sd is None:
        return None
    if estimate.log_sd == 0:
        return estimate.n_blocks
    mean = math.log(estimate.point)
    room = max(abs(mean), min(math.log(1 + margin), -math.log(1 - margin)) - abs(mean))
    for n in range(max(2, estimate.n_blocks), cap + 1):
        if t_quantile(confidence, n - 1) * estimate.log_sd / math.sqrt(n) < room:
            return n
    return None


# ---------------------------------------------------------------- break-even concurrency


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


# ---------------------------------------------------------------- output fidelity


def first_divergence(reference: Sequence[int], other: Sequence[int]) -> int | None:
    """Index of the first output token where two outputs differ; None when they are equal.

    An output that is a strict prefix of the other differs at the shorter one's length.
    """
    for index, (a, b) in enumerate(zip(reference, other, strict=False)):
        if a != b:
            return index
    return None if len(reference) == len(other) else min(len(reference), len(other))


def diverges_more(arm_differ: int, arm_total: int, reference_differ: int, reference_total: int) -> float | None:
    """One-sided Fisher exact p-value that the arm's outputs differ from the baseline's more
    often than the reference's (the A/A replicate's) do; None without counts on a side.

    The counts are of independent units: prompts, not prompts × blocks (a prompt's outputs
    in different blocks differ together). Both sides compare the same prompts with the same
    baseline runs, so their differences are positively correlated and the test, which
    treats the two samples as independent, is conservative."""
    if not arm_total or not reference_total:
        return None
    table = [[arm_differ, arm_total - arm_differ], [reference_differ, reference_total - reference_differ]]
    return float(scipy_stats.fisher_exact(table, alternative="greater").pvalue)
