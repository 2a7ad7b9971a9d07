"""The trace summary (experiments/measurement/engine/trace_shares.py) on small hand-made traces and on the scopes of
a real one from vLLM 0.32's CPU build."""

import gzip
import json
from pathlib import Path

import pytest

from experiments.measurement.engine import trace_shares as profiles

FIXTURES = Path(__file__).parents[2] / "fixtures"
DEVICE_SCOPES = profiles.DEVICE_SCOPES


def scope(name: str, ts: float, dur: float, cat: str = "user_annotation") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}


def two_steps(cat: str = "user_annotation") -> list[dict]:
    """Two engine steps of a speculative arm, in microseconds (the window is 0-44 µs)."""
    return [
        scope("gpu_model_runner: preprocess", -50, 5, cat),  # before the first step: not profiled time
        scope("execute_context_1(8)_generation_0(0)", 0, 10, cat),
        scope("gpu_model_runner: forward", 1, 6, cat),
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 2, "dur": 3},  # an operator: not a scope
        scope("gpu_model_runner: postprocess", 7, 1, cat),
        scope("gpu_model_runner: sample", 12, 2, cat),
        scope("gpu_model_runner: draft", 14, 4, cat),
        scope("gpu_model_runner: bookkeep", 18, 1, cat),
        scope("execute_context_0(0)_generation_1(5)", 30, 8, cat),
        scope("gpu_model_runner: forward", 31, 5, cat),
        scope("gpu_model_runner: sample", 40, 1, cat),
        scope("gpu_model_runner: draft", 41, 3, cat),
        {"ph": "M", "name": "process_name", "args": {"name": "worker"}},
    ]


def test_shares_of_two_steps_by_hand():
    summary = profiles.summarise_events(two_steps())
    # verifying: forward 6 + postprocess 1 + forward 5; sampling 2 + 1; proposing 4 + 3;
    # other: the rest of 0-44 µs (preprocess, bookkeep, the gaps between phases).
    assert summary.steps == 2
    assert summary.total_ms == pytest.approx(0.044)
    assert summary.shares == pytest.approx(
        {"verifying": 12 / 44, "sampling": 3 / 44, "proposing": 7 / 44, "other": 22 / 44}
    )
    assert sum(summary.shares.values()) == pytest.approx(1.0)
    assert summary.top_events[0] == [pytest.approx(11 / 44), "gpu_model_runner: forward"]


def test_overlapping_scopes_go_to_the_higher_phase():
    events = [
        scope("execute_context_0(0)_generation_1(1)", 0, 10),
        scope("gpu_model_runner: forward", 0, 10),
        scope("gpu_model_runner: draft", 4, 2),  # inside the forward: proposing takes it
    ]
    shares = profiles.summarise_events(events).shares
    assert shares == pytest.approx({"proposing": 0.2, "verifying": 0.8, "sampling": 0.0, "other": 0.0})


def test_plain_decoding_proposes_nothing():
    events = [e for e in two_steps() if e.get("name") != "gpu_model_runner: draft"]
    shares = profiles.summarise_events(events).shares
    # the window now ends with the last sample (41 µs)
    assert shares["proposing"] == 0.0
    assert shares["verifying"] == pytest.approx(12 / 41)
    assert sum(shares.values()) == pytest.approx(1.0)


def test_the_device_timeline_is_read_when_it_has_steps():
    host = [scope("execute_context_0(0)_generation_1(1)", 0, 100), scope("gpu_model_runner: sample", 0, 100)]
    events = host + two_steps(cat="gpu_user_annotation")
    summary = profiles.summarise_events(events)
    assert summary.total_ms == pytest.approx(0.044)
    assert summary.shares["sampling"] == pytest.approx(3 / 44)


def test_a_trace_without_steps_is_refused():
    with pytest.raises(profiles.TraceError, match="no engine step"):
        profiles.summarise_events([scope("gpu_model_runner: forward", 0, 5)])


def kernel(name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "args": {"stream": 7, "grid": [1, 1, 1]}}


def v2_steps() -> list[dict]:
    """Two engine steps as vLLM 0.32's V2 model runner leaves them on a GPU host (v1/worker/gpu/,
    no record_function): the worker's step annotation around execute_model on the host and its
    mirror on the GPU, the target's forward as one CUDA graph launch, then sample_tokens'
    Triton kernels (sampler, rejection) and the proposer's, outside any scope; the engine
    core's scheduler scope sits between the steps on the host."""
    return [
        scope("execute_context_0(0)_generation_2(8)", 0, 30),
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 20, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": 2, "dur": 4},
        scope("execute_context_0(0)_generation_2(8)", 25, 60, DEVICE_SCOPES),
        kernel("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn", 30, 40),
        kernel("_rejection_kernel", 86, 3),
        kernel("_gumbel_sample_kernel", 89, 2),
        kernel("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x3_tn", 92, 6),  # the draft's forward
        scope("schedule: allocate_slots", 100, 4),
        scope("execute_context_0(0)_generation_2(10)", 110, 30),
        scope("execute_context_0(0)_generation_2(10)", 135, 60, DEVICE_SCOPES),
        kernel("_gumbel_sample_kernel", 196, 2),
    ]


def test_a_v2_runner_trace_on_gpu_is_not_split():
    summary = profiles.summarise_events(v2_steps())
    # The GPU's timeline: its two steps, 25-195 µs.
    assert (summary.steps, summary.total_ms) == (2, pytest.approx(0.170))
    assert not summary.split
    assert summary.shares == {}
    assert summary.top_events == []
    assert summary.not_split_reason.startswith("not split on this model runner: the traces hold 2 engine steps")


def test_a_cpu_trace_without_phase_scopes_is_not_split(tmp_path):
    """What the V1 runner on CPU leaves when VLLM_CUSTOM_SCOPES_FOR_PROFILING is not set:
    engine steps and operators, no gpu_model_runner scope."""
    events = [
        scope("execute_context_1(8)_generation_0(0)", 0, 10),
        scope("execute_context_0(0)_generation_1(5)", 30, 8),
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 2, "dur": 3},
    ]
    trace = tmp_path / "a_rank0.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    summary = profiles.summarise_files([trace])
    assert (summary.steps, summary.total_ms, summary.split, summary.shares) == (2, pytest.approx(0.038), False, {})
    assert "VLLM_CUSTOM_SCOPES_FOR_PROFILING=1" in summary.not_split_reason


def test_a_v1_runner_trace_on_gpu_is_split_on_the_gpu_timeline():
    """The V1 runner's scopes on the host and their GPU mirrors, among kernels and CUDA calls:
    the kernels are not scopes, the GPU's scopes give the shares."""
    host = [scope(e["name"], e["ts"] - 5, e["dur"] / 2) for e in two_steps() if e.get("ph") == "X"]
    noise = [kernel("_gumbel_sample_kernel", 12, 2), {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel"}]
    summary = profiles.summarise_events(host + noise + two_steps(cat=DEVICE_SCOPES))
    assert (summary.split, summary.not_split_reason) == (True, "")
    assert summary.shares == pytest.approx(
        {"verifying": 12 / 44, "sampling": 3 / 44, "proposing": 7 / 44, "other": 22 / 44}
    )


def test_a_phase_scope_outside_the_steps_counts_for_nothing():
    events = [
        scope("gpu_model_runner: forward", -50, 5),  # before the first step: a warm-up's
        scope("execute_context_0(0)_generation_1(1)", 0, 10),
    ]
    summary = profiles.summarise_events(events)
    assert (summary.split, summary.shares, dict(summary.scope_ms)) == (False, {}, {})


def test_scopes_overlapping_in_one_phase_are_counted_once():
    events = [
        scope("execute_context_0(0)_generation_1(1)", 0, 10),
        scope("gpu_model_runner: forward", 0, 6),
        scope("gpu_model_runner: postprocess", 4, 4),  # verifying too, 4-8: 2 µs new
        scope("gpu_model_runner: sample", 8, 0),  # a point: no time
    ]
    assert profiles.summarise_events(events).shares == pytest.approx(
        {"proposing": 0.0, "verifying": 0.8, "sampling": 0.0, "other": 0.2}
    )


def _write(path: Path, document: object) -> Path:
    """A trace laid out as Kineto writes it: one key per line, an event per few lines."""
    text = json.dumps(document, indent=1)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as trace:
            trace.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def kineto(events: list[dict]) -> dict:
    """A trace object with the keys Kineto writes around its events: plain numbers before them,
    which a chunk can cut in two, and the trace's name after."""
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85031714816}],
        "cupti_version": 24,
        "cuda_runtime_version": 12080,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1764690000000000000,
        "traceEvents": events,
        "traceName": "level-1_rank0.1764690000000000000.pt.trace.json",
    }


TRACES = {
    "v1 cpu": lambda: kineto(two_steps()),
    "v1 gpu": lambda: kineto(two_steps() + two_steps(cat=DEVICE_SCOPES)),
    "v2 gpu": lambda: kineto(v2_steps()),
    "bare list": two_steps,
    "real ngram": lambda: json.loads((FIXTURES / "profile_ngram_cpu.json").read_text()),
}


@pytest.mark.parametrize("chunk", [1, 3, 64, 1 << 20])
@pytest.mark.parametrize("suffix", [".pt.trace.json", ".pt.trace.json.gz"])
@pytest.mark.parametrize("trace", TRACES)
def test_the_streamed_reader_reads_what_json_load_reads(tmp_path, monkeypatch, chunk, suffix, trace):
    document = TRACES[trace]()
    path = _write(tmp_path / f"a_rank0{suffix}", document)
    monkeypatch.setattr(profiles, "CHUNK_CHARS", chunk)  # events and numbers cut across chunks
    expected = document["traceEvents"] if isinstance(document, dict) else document
    assert list(profiles.trace_events(path)) == expected
    streamed, loaded = profiles.summarise_files([path]), profiles.summarise_events(expected)
    assert (streamed.steps, streamed.total_ms, streamed.shares) == (loaded.steps, loaded.total_ms, loaded.shares)


@pytest.mark.parametrize(
    "text",
    ['{"traceEvents": [{"ph": "X"} {"ph": "X"}]}', '{"schemaVersion" 1, "traceEvents": []}', '{"traceEvents": [}'],
)
def test_a_trace_that_is_not_json_is_refused_not_read_on(tmp_path, text):
    path = tmp_path / "a_rank0.pt.trace.json"
    path.write_text(text)
    with pytest.raises((profiles.TraceError, json.JSONDecodeError)):
        list(profiles.trace_events(path))


def test_a_truncated_trace_is_an_error(tmp_path):
    path = tmp_path / "a_rank0.pt.trace.json"
    path.write_text(json.dumps(kineto(two_steps()))[:-200])
    with pytest.raises(json.JSONDecodeError):
        profiles.summarise_files([path])


def test_files_of_several_workers_add_up(tmp_path):
    first, second = tmp_path / "a_rank0.pt.trace.json.gz", tmp_path / "a_rank1.pt.trace.json"
    with gzip.open(first, "wt") as trace:
        json.dump({"traceEvents": two_steps()}, trace)
    second.write_text(json.dumps({"traceEvents": [scope("execute_context_0(0)_generation_1(1)", 0, 44)]}))
    summary = profiles.summarise_files([first, second])
    assert (summary.steps, summary.total_ms) == (3, pytest.approx(0.088))
    assert summary.shares["verifying"] == pytest.approx(12 / 88)
    assert summary.shares["other"] == pytest.approx((22 + 44) / 88)


def test_a_scope_in_both_files_adds_up_and_a_bare_event_list_is_read(tmp_path):
    # The second worker's trace is a bare list of events (no "traceEvents" object) and starts
    # at 1,000 µs: its window is 1,000-1,010 µs, not 0-1,010.
    first, second = tmp_path / "a_rank0.json", tmp_path / "a_rank1.json"
    first.write_text(json.dumps({"traceEvents": two_steps()}))
    second.write_text(
        json.dumps(
            [scope("execute_context_0(0)_generation_1(1)", 1000, 10), scope("gpu_model_runner: forward", 1001, 6)]
        )
    )
    summary = profiles.summarise_files([first, second])
    assert (summary.steps, summary.total_ms) == (3, pytest.approx(0.054))
    assert summary.scope_ms["gpu_model_runner: forward"] == pytest.approx((6 + 5 + 6) / 1000)
    assert summary.top_events[0] == [pytest.approx(17 / 54), "gpu_model_runner: forward"]


@pytest.mark.parametrize(
    ("fixture", "steps"),
    [("profile_ngram_cpu.json", 31), ("profile_draft_cpu.json", 16)],
)
def test_names_in_real_cpu_traces_are_classified(fixture, steps):
    """The scopes vLLM 0.32's CPU worker wrote for the demo pair's n-gram arm and draft-model
    arm (k=4, 3 requests of 32 tokens on a fresh server: the first step includes one-off
    compilation). The draft model's forward passes run inside the draft scope."""
    events = json.loads((FIXTURES / fixture).read_text())["traceEvents"]
    names = {e["name"] for e in events if not e["name"].startswith(profiles.STEP_PREFIX)}
    classified = {name: profiles.phase_of(name) for name in names}
    assert classified["gpu_model_runner: draft"] == "proposing"
    assert classified["gpu_model_runner: forward"] == "verifying"
    assert classified["gpu_model_runner: postprocess"] == "verifying"
    assert classified["gpu_model_runner: sample"] == "sampling"
    assert {name for name, phase in classified.items() if phase is None} == {
        "gpu_model_runner: preprocess",
        "gpu_model_runner: bookkeep",
        "gpu_model_runner: eplb",
        "gpu_model_runner: ModelRunnerOutput",
    }
    summary = profiles.summarise_events(events)
    assert summary.steps == steps
    assert sum(summary.shares.values()) == pytest.approx(1.0)
    assert all(share > 0 for share in summary.shares.values())
