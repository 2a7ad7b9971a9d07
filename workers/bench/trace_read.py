"""How long a profiled interval's trace takes to summarise, and in how much memory: the streamed
reader (experiments/measurement/engine/trace_shares.trace_events) against json.load of the whole file,
on a generated trace in the shape vLLM's torch profiler writes on a GPU host with the V1 model
runner: per engine step the worker's step scope and the runner's phase scopes on the host and
their mirrors on the GPU, among the operators, CUDA launches and kernels that make up most of
the file.

Each reader runs in its own process, so its peak resident memory (ru_maxrss) is its own; the
interpreter alone (importing trace_shares and reading nothing) is printed beside them. The
trace is written to a temporary folder and removed at the end. An on-demand check, not a test:
the figures are printed, never asserted.
"""

import gzip
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, NotRequired, TypedDict

from experiments.measurement.engine import trace_shares

REPO = Path(__file__).resolve().parents[2]


class Figures(TypedDict):
    """A reader's seconds and peak memory, and the steps and shares it found (when it read the trace)."""

    seconds: float
    peak_mb: float
    steps: NotRequired[int]
    shares: NotRequired[dict[str, float]]


READERS = ("nothing", "stream", "json.load")
HEAD = {
    "schemaVersion": 1,
    "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85031714816}],
}
TAIL = {"traceName": "bench_rank0.pt.trace.json", "displayTimeUnit": "ms", "baseTimeNanoseconds": 1764690000000000000}
# (name, start, duration) of the phase scopes in a step of 100 µs, as the V1 runner names them.
PHASE_SCOPES = (
    ("gpu_model_runner: preprocess", 0, 4),
    ("gpu_model_runner: forward", 4, 50),
    ("gpu_model_runner: postprocess", 54, 3),
    ("gpu_model_runner: sample", 60, 8),
    ("gpu_model_runner: draft", 70, 20),
    ("gpu_model_runner: bookkeep", 92, 3),
)
STEP_US = 100
KERNEL = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"


def _event(cat: str, name: str, ts: float, dur: float, args: Mapping[str, object] | None = None) -> str:
    event = {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": args or {}}
    return json.dumps(event, indent=2)


def _step(index: int, kernels: int) -> list[str]:
    """One step's events: the scopes on both timelines, then per kernel its operator, launch and kernel."""
    t0 = 1_764_690_000_000.0 + index * STEP_US
    name = f"execute_context_0(0)_generation_8({8 + index % 5})"
    events = [_event("user_annotation", name, t0, 50), _event("gpu_user_annotation", name, t0 + 2, 52)]
    for scope, start, dur in PHASE_SCOPES:
        events.append(_event("user_annotation", scope, t0 + start, dur))
        events.append(_event("gpu_user_annotation", scope, t0 + start + 2, dur))
    for k in range(kernels):
        ts = t0 + k * STEP_US / kernels
        correlation = index * kernels + k
        ids = {"External id": correlation, "correlation": correlation}
        events += [
            _event("cpu_op", "aten::mm", ts, 0.8, {"External id": correlation, "Record function id": 0}),
            _event("cuda_runtime", "cudaLaunchKernel", ts + 0.2, 0.4, ids),
            _event("kernel", KERNEL, ts + 2, 1.1, {
                **ids, "device": 0, "stream": 7,
                "registers per thread": 168, "shared memory": 213248, "blocks per SM": 1.0,
                "warps per SM": 12.0, "grid": [132, 1, 1], "block": [384, 1, 1], "est. achieved occupancy %": 19,
            }),
        ]  # fmt: skip
    return events


def write_trace(path: Path, *, mb: float, kernels: int) -> int:
    """A trace of at least `mb` megabytes (uncompressed); returns its number of steps."""
    opener = gzip.open if path.name.endswith(".gz") else open
    limit = mb * 1e6
    written, steps = 0, 0
    with opener(path, "wt", encoding="utf-8") as trace:
        out: IO[str] = trace
        head = json.dumps(HEAD, indent=2)[:-2]
        written += out.write(head + ',\n  "traceEvents": [\n')
        while written < limit:
            written += out.write(("" if steps == 0 else ",\n") + ",\n".join(_step(steps, kernels)))
            steps += 1
        written += out.write("\n  ],\n" + json.dumps(TAIL, indent=2)[1:])
    return steps


def read(reader: str, path: Path) -> Figures:
    """Summarise the trace with one reader; its seconds, peak memory and what it found."""
    started = time.perf_counter()
    if reader == "nothing":
        summary = None
    elif reader == "stream":
        summary = trace_shares.summarise_files([path])
    else:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as trace:
            summary = trace_shares.summarise_events(json.load(trace)["traceEvents"])
    seconds = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    figures: Figures = {"seconds": seconds, "peak_mb": peak_mb}
    if summary is not None:
        figures["steps"], figures["shares"] = summary.steps, dict(summary.shares)
    return figures


def _in_child(reader: str, path: Path) -> Figures:
    """`read` in a process of its own, so that its peak memory is its own."""
    code = "import json, sys; from pathlib import Path; from workers.bench import trace_read; "
    code += "print(json.dumps(trace_read.read(sys.argv[1], Path(sys.argv[2]))))"
    done = subprocess.run(
        [sys.executable, "-c", code, reader, str(path)], check=True, capture_output=True, text=True, cwd=REPO
    )
    figures: Figures = json.loads(done.stdout)
    return figures


def _line(reader: str, figures: Figures) -> str:
    shares = " ".join(f"{phase} {share:.3f}" for phase, share in figures.get("shares", {}).items())
    return f"{reader:<10} {figures['seconds']:8.2f} s   peak {figures['peak_mb']:8.0f} MB   {shares}"


def compare(*, mb: float, gzipped: bool, kernels: int) -> None:
    """Write a trace of `mb` megabytes, read it with every reader, print their figures."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "bench_rank0.pt.trace.json" + (".gz" if gzipped else ""))
        steps = write_trace(path, mb=mb, kernels=kernels)
        size = path.stat().st_size / 1e6
        print(f"trace: {mb:.0f} MB of JSON ({size:.1f} MB on disk{', gzipped' if gzipped else ''}), "
              f"{steps} steps of {kernels} kernels")  # fmt: skip
        results = {reader: _in_child(reader, path) for reader in READERS}
    for reader, figures in results.items():
        print(_line(reader, figures))
    same = results["stream"]["shares"] == results["json.load"]["shares"]
    print(f"same steps and shares: {'yes' if same and results['stream']['steps'] == steps else 'NO'}")
