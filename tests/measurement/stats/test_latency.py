"""experiments/measurement/stats/latency.py against hand-computed cases. No database."""

import pytest

from experiments.measurement.encoding import packed
from experiments.measurement.stats import latency

# ---------------------------------------------------------------- descriptive statistics


def test_percentile_interpolates_linearly():
    # [1, 2, 3, 4], q=25: rank = (4-1)*0.25 = 0.75 -> 1 + 0.75*(2-1) = 1.75 (numpy "linear" agrees)
    assert latency.percentile([4, 1, 3, 2], 25) == pytest.approx(1.75)
    # q=50: rank 1.5 -> 2 + 0.5*(3-2) = 2.5
    assert latency.percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    # [10..50], q=90: rank 4*0.9 = 3.6 -> 40 + 0.6*10 = 46
    assert latency.percentile([10, 20, 30, 40, 50], 90) == pytest.approx(46)


def test_percentile_edges():
    assert latency.percentile([3, 1, 2], 0) == 1
    assert latency.percentile([3, 1, 2], 100) == 3
    assert latency.percentile([7], 99) == 7
    assert latency.percentile([], 50) is None
    with pytest.raises(ValueError, match="q must be in"):
        latency.percentile([1, 2], 101)


def test_summarise_skips_missing_values():
    # 1..10: mean 5.5; p50 rank 4.5 -> 5.5; p90 rank 8.1 -> 9.1; p99 rank 8.91 -> 9.91
    summary = latency.summarise([None, *range(1, 11)])
    assert summary == pytest.approx({"mean": 5.5, "p50": 5.5, "p90": 9.1, "p99": 9.91})


def test_summarise_empty_is_all_none():
    assert latency.summarise([]) == {"mean": None, "p50": None, "p90": None, "p99": None}
    assert latency.summarise([None]) == {"mean": None, "p50": None, "p90": None, "p99": None}


# ---------------------------------------------------------------- per-request latency


def test_tpot():
    # (1100 - 100) / (11 - 1) = 100 ms
    assert latency.tpot_ms(100.0, 1100.0, 11) == pytest.approx(100.0)
    assert latency.tpot_ms(100.0, 200.0, 1) is None
    assert latency.tpot_ms(None, 200.0, 5) is None
    # 6 tokens: the first at 50 ms, the last at 300 ms -> 250 ms over 5 later tokens.
    assert latency.tpot_ms(50.0, 300.0, 6) == 50.0
    assert latency.tpot_ms(20.0, 20.0, 0) is None


def test_tpot_with_a_value_missing_and_with_two_tokens():
    assert latency.tpot_ms(100.0, None, 5) is None
    assert latency.tpot_ms(100.0, 200.0, None) is None
    # 2 tokens: the second 30 ms after the first -> (130 - 100) / 1 = 30 ms.
    assert latency.tpot_ms(100.0, 130.0, 2) == 30.0


def _itl(*requests: list[float]) -> list[float]:
    times, starts = packed.unpack_many((packed.pack(r, packed.FLOAT64) for r in requests), packed.FLOAT64)
    return latency.itl_ms(times, starts).tolist()


def test_itl_is_the_gap_between_chunks():
    # 130 - 100 = 30, 190 - 130 = 60
    assert _itl([100.0, 130.0, 190.0]) == pytest.approx([30.0, 60.0])
    assert _itl([100.0]) == []
    assert _itl([]) == []
    assert _itl([50.0, 80.0, 80.0, 125.5]) == [30.0, 0.0, 45.5]
    # Two requests: 10 and 30, never the 90 ms from the first request's last chunk to the second's first.
    assert _itl([0.0, 10.0], [], [100.0, 130.0], [7.0]) == [10.0, 30.0]


def _tokens_per_chunk(*requests: list[int]) -> float | None:
    return latency.decode_tokens_per_chunk(
        *packed.unpack_many((packed.pack(r, packed.UINT32) for r in requests), packed.UINT32)
    )


def test_tokens_per_chunk_leaves_out_each_requests_first_chunk():
    # (3 + 2) / 2 = 2.5: the first chunk (prefill, one token) is left out.
    assert _tokens_per_chunk([1, 3, 2]) == pytest.approx(2.5)
    # Two requests: (3 + 2 + 4) / 3 = 3.
    assert _tokens_per_chunk([1, 3], [1, 2, 4]) == pytest.approx(3.0)
    assert _tokens_per_chunk([1], []) is None
    assert _tokens_per_chunk() is None
