"""The trace summary (experiments/measurement/trace_shares.py) on small hand-made traces and on the scopes of
a real one from vLLM 0.32's CPU build."""

import gzip
import json
from pathlib import Path

import pytest

from experiments.measurement import trace_shares as profiles

FIXTURES = Path(__file__).parents[1] / "fixtures"


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


def test_traces_of_steps_without_phase_scopes_are_not_split(tmp_path):
    """What vLLM 0.32's V2 model runner leaves: engine steps, no gpu_model_runner scopes."""
    events = [
        scope("execute_context_1(8)_generation_0(0)", 0, 10),
        scope("execute_context_0(0)_generation_1(5)", 30, 8),
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 2, "dur": 3},
    ]
    trace = tmp_path / "a_rank0.pt.trace.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    with pytest.raises(profiles.TraceError, match="not split on this model runner: the traces hold 2 engine steps"):
        profiles.summarise_files([trace])


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
