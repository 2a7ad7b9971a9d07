"""Descriptive statistics and per-request latency: percentiles and the summaries the page
shows, TPOT, the gaps between streamed chunks and the tokens a chunk carried.

Plain Python on lists (no Django), so every function can be checked against a hand-computed
case; numpy for the tens of thousands of gaps of a run. Metric definitions: docs/metrics.md.
"""

import math
import statistics
from collections.abc import Iterable, Sequence

import numpy as np

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
    another; `starts`: where each request's begin (experiments.measurement.encoding.packed.unpack_many)."""
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
