"""A speedup per block and its interval over blocks.

The block is the unit of replication (docs/verdicts.md): one ratio of the arm to the baseline
per block, the interval from their spread between blocks. scipy supplies Student's t
quantiles. Plain Python, no Django.

Speedup convention: a value above 1 always means the arm is better. For latencies it is
baseline / arm, for throughputs arm / baseline (`higher_is_better=True`).
"""

import functools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from scipy import stats as scipy_stats

CONFIDENCE = 0.95


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
    return RatioEstimate(math.exp(mean), capped_exp(mean - half), capped_exp(mean + half), ratios, sd)


MAX_LOG = 700.0  # exp() of more overflows a float


def capped_exp(value: float) -> float:
    """exp() held inside a float's range: at an early look of a long design a cell with two
    blocks is tested at a tiny level, with a t quantile on 1 degree of freedom in the
    thousands, and its interval's ends would overflow (issue 36). An end this far out reads
    as unbounded either way."""
    return math.exp(max(-MAX_LOG, min(MAX_LOG, value)))


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
