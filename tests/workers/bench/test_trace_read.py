"""The trace-reading benchmark runs at a tiny size and prints its figures, so it cannot rot
unnoticed; the figures themselves are printed on demand, never asserted."""

import gzip
import json

from experiments.measurement.engine import trace_shares
from workers.bench import trace_read


def test_it_prints_each_readers_time_and_memory_and_that_they_agree(capsys):
    trace_read.compare(mb=0.2, gzipped=True, kernels=4)
    out = capsys.readouterr().out
    assert "gzipped" in out
    for reader in trace_read.READERS:
        assert f"\n{reader:<10} " in out
    assert out.count(" MB   ") == len(trace_read.READERS)
    assert "same steps and shares: yes" in out


def test_the_generated_trace_is_the_json_a_gpu_worker_writes(tmp_path):
    path = tmp_path / "bench_rank0.pt.trace.json.gz"
    steps = trace_read.write_trace(path, mb=0.05, kernels=2)
    with gzip.open(path, "rt") as trace:
        document = json.load(trace)
    assert set(document) == {*trace_read.HEAD, "traceEvents", *trace_read.TAIL}
    summary = trace_shares.summarise_events(document["traceEvents"])
    assert summary.steps == steps
    assert {e["cat"] for e in document["traceEvents"]} == {
        "user_annotation", "gpu_user_annotation", "cpu_op", "cuda_runtime", "kernel",
    }  # fmt: skip
