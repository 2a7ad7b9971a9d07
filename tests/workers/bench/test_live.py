"""The stream check (workers/bench/live/stream_check.py) and the stream counts of the load
generator's comparison with vLLM's (workers/bench/live/server_metrics.py) on hand-made
requests: their tables cannot rot unnoticed. They run against a real server on demand; the
figures are in docs/metrics.md ("Stream fidelity")."""

import pytest

from experiments.measurement.encoding.packed import FLOAT64, UINT32
from workers.bench.live import server_metrics, stream_check, vllm_bench
from workers.measure.loadgen import LoadResult, RequestResult, finalise


def _request(index: int, tpot: float, *, burst: bool = False) -> RequestResult:
    times = [300.0] * 9 if burst else [20.0 + tpot * i for i in range(9)]
    result = RequestResult(
        prompt_index=index, input_tokens=5, output_tokens=9, chunk_times_ms=FLOAT64.new(times),
        chunk_tokens=UINT32.new([1] * 9), server_decode_ms=8 * tpot, server_ttft_ms=15.0, server_queue_ms=1.0,
    )  # fmt: skip
    finalise(result)
    return result


def _run(arm: int, block: int, tpot: float, burst: bool = False) -> stream_check.MeasuredRun:
    load = LoadResult([_request(i, tpot, burst=burst and i == 0) for i in range(4)], 1.0, None, None)
    return stream_check.MeasuredRun(arm, 1, block, load, stream_check.request_checks(load))


def test_the_report_counts_distorted_requests_and_prints_the_replicates_intervals(capsys):
    runs = []
    for block, (base, replicate) in enumerate([(10.0, 10.0), (10.0, 10.5), (11.0, 10.5)], start=1):
        runs += [
            _run(stream_check.BASELINE, block, base),
            _run(stream_check.REPLICATE, block, replicate, burst=block == 2),
        ]
    stream_check.report("split", runs, [1], [stream_check.BASELINE, stream_check.REPLICATE])
    out = capsys.readouterr().out
    assert "=== placement: split" in out
    # 12 baseline requests, all clean; 12 replicate requests, one whose decode came at once.
    baseline, replicate = (line.split() for line in out.splitlines() if line.startswith(("baseline ", "A/A replicate")))
    assert baseline[1:6] == ["1", "12", "0", "0", "0"]
    assert replicate[2:7] == ["1", "12", "1", "1", "1"]
    assert "all: 1 of 24 requests stalled (4.2%)" in out
    # The replicate is called on no metric with 3 blocks; its engine-timed TPOT is not touched by the burst.
    assert "A/A replicate server_tpot  at 1:" in out
    assert "A/A replicate tpot         at 1:" in out


def test_stalls_and_bursts_are_counted_against_the_engines_mean_step():
    server = {"server_step_ms": 10.0, "server_decode_ms": 100.0}
    # Longest gaps 20, 51 and 49 ms (a stall is over 5 steps of 10 ms); spans 100, 19.9 and 20 ms.
    counts = server_metrics.stream_counts([100.0, 19.9, 20.0], [20.0, 51.0, 49.0], server)
    assert counts == {"stalled": 1, "bursts": 1}
    assert server_metrics.stream_counts([1.0], [1.0], {"server_step_ms": None, "server_decode_ms": 1.0}) == {
        "stalled": None, "bursts": None,
    }  # fmt: skip


def test_the_engines_mean_step_comes_from_metrics():
    tokens, accepted = server_metrics.SERVER_COUNTERS
    before = {
        "server_ttft_ms": (0.0, 0), "server_e2e_ms": (0.0, 0), "server_decode_ms": (1.0, 10),
        tokens: (100.0, 0.0), accepted: (0.0, 0.0),
    }  # fmt: skip
    # 4 requests of 33 tokens (32 after the first each) decoded in 0.64 s in all, 48 draft tokens accepted:
    # 128 - 48 = 80 steps of 8 ms.
    after = {
        "server_ttft_ms": (0.1, 4), "server_e2e_ms": (1.0, 4), "server_decode_ms": (1.64, 14),
        tokens: (232.0, 0.0), accepted: (48.0, 0.0),
    }  # fmt: skip
    means = server_metrics.server_means_ms(before, after)
    assert means["server_decode_ms"] == pytest.approx(160.0)
    assert means["server_step_ms"] == pytest.approx(8.0)


def test_the_benches_prompts_are_the_built_in_sets_cycled():
    prompts = vllm_bench.load_prompts("code_edit", 500)
    assert len(prompts) == 500
    assert len(set(prompts)) < 500  # the set is shorter, so it cycles
    assert prompts[: len(set(prompts))] == list(dict.fromkeys(prompts))
