"""What vLLM decided per arm, on the protocol card and in the API, and the flags where an arm's
runner, async scheduling or CUDA graphs differ from the baseline's. The log lines are the ones
tests/workers/server/test_engine_report.py quotes from vLLM 0.32's source."""

import pytest
from django.urls import reverse

from experiments.models import Arm, Run
from experiments.results import selectors
from tests.factories import ArmFactory, EnvironmentSnapshotFactory, ExperimentFactory, RunFactory

pytestmark = pytest.mark.django_db

V2_GPU = {
    "model_runner": "V2", "async_scheduling": None, "cuda_graphs": "FULL_AND_PIECEWISE", "kv_cache_tokens": 1_234_560,
    "engine_log_lines": {"model_runner": "Using V2 Model Runner"},
}  # fmt: skip
SUFFIX_OFF = "Async scheduling not supported with suffix-based speculative decoding and will be disabled."
V1_GPU_SUFFIX = {
    "model_runner": "V1", "async_scheduling": False, "cuda_graphs": "on", "kv_cache_tokens": 1_100_000,
    "engine_log_lines": {
        "model_runner": "Model Runner V2 does not yet support speculative method 'suffix'; using the V1 model "
        "runner instead.",
        "async_scheduling": SUFFIX_OFF,
    },
}  # fmt: skip
CPU = {"model_runner": "V1", "async_scheduling": False, "cuda_graphs": "off", "kv_cache_tokens": 87_296}


def _experiment(baseline_engine: dict, arm_engine: dict, method=Arm.Method.SUFFIX):
    experiment = ExperimentFactory(concurrency_levels=[1], repetitions=2)
    baseline = ArmFactory(experiment=experiment, baseline=True, position=0)
    arm = ArmFactory(experiment=experiment, position=1, label="suffix k=8", method=method, params={})
    for block in (1, 2):
        for each, engine in ((baseline, baseline_engine), (arm, arm_engine)):
            run = RunFactory(arm=each, concurrency=1, repetition=block, status=Run.Status.SUCCEEDED)
            EnvironmentSnapshotFactory(run=run, **engine)
    return experiment


def _rows(experiment) -> dict:
    return {row.arm.label: row for row in selectors.experiment_arms(experiment=experiment)}


def test_an_arm_on_another_runner_than_the_baseline_is_flagged_on_the_protocol_card(logged_in_client):
    experiment = _experiment(V2_GPU, V1_GPU_SUFFIX)

    rows = _rows(experiment)

    # Two servers each, the same decisions: shown once.
    assert [d.runner_text for d in rows["baseline"].engine_decisions] == ["Model Runner V2"]
    assert rows["baseline"].engine_flags == []
    flags = rows["suffix k=8"].engine_flags
    assert flags[0] == (
        "suffix k=8 ran on Model Runner V1 while the baseline ran on V2: a runner difference is mixed into its speedup."
    )
    # The baseline's log said nothing about async scheduling (vLLM logs it only when turned off).
    assert flags[1].startswith(f"suffix k=8 ran without async scheduling (vLLM: “{SUFFIX_OFF}”)")
    assert "likely mixed into its speedup" in flags[1]
    assert flags[2] == (
        "suffix k=8 ran with CUDA graphs on while the baseline ran with CUDA graphs on (FULL_AND_PIECEWISE): "
        "a CUDA-graph difference is mixed into its speedup."
    )
    html = logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).text
    assert "Model Runner V1 while the baseline ran on V2" in html
    assert (
        'Model Runner V2</span> ·\n        <span title="no line of its log said">async scheduling not logged</span>'
        in html
    )
    assert "KV cache 1,234,560 tokens" in html
    assert 'title="Using V2 Model Runner"' in html


def test_arms_that_decided_alike_are_not_flagged():
    rows = _rows(_experiment(CPU, CPU, method=Arm.Method.NGRAM))
    assert [row.engine_flags for row in rows.values()] == [[], []]
    decision = rows["suffix k=8"].engine_decisions[0]
    assert (decision.runner_text, decision.scheduling_text, decision.graphs_text, decision.kv_cache_text) == (
        "Model Runner V1", "async scheduling off", "CUDA graphs off", "KV cache 87,296 tokens",
    )  # fmt: skip


def test_known_async_scheduling_on_both_sides_is_flagged_where_it_differs():
    rows = _rows(_experiment(V2_GPU | {"async_scheduling": True}, V2_GPU | {"async_scheduling": False}))
    assert rows["suffix k=8"].engine_flags == [
        "suffix k=8 ran with async scheduling off while the baseline ran with async scheduling on: a scheduling "
        "difference is mixed into its speedup."
    ]


def test_runs_stored_before_the_logs_were_read_show_and_flag_nothing(logged_in_client):
    experiment = _experiment({}, V1_GPU_SUFFIX)
    rows = _rows(experiment)
    assert rows["baseline"].engine_decisions == []
    assert rows["suffix k=8"].engine_flags == []
    assert "vLLM decided" in logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).text


def test_a_calibration_arm_is_never_flagged():
    experiment = _experiment(V2_GPU, V1_GPU_SUFFIX)
    calibration = ArmFactory(
        experiment=experiment, baseline=True, position=2, label="draft alone", is_calibration=True, params={}
    )
    EnvironmentSnapshotFactory(run=RunFactory(arm=calibration, status=Run.Status.SUCCEEDED), **V1_GPU_SUFFIX)
    assert _rows(experiment)["draft alone"].engine_flags == []


def test_the_api_gives_each_arms_decisions_and_flags(logged_in_client):
    experiment = _experiment(V2_GPU, V1_GPU_SUFFIX)
    body = logged_in_client.get(reverse("api:experiment-detail", args=[experiment.pk])).json()
    engine = {arm["label"]: arm["engine"] for arm in body["arms"]}
    assert engine["baseline"]["decisions"] == [
        {
            "model_runner": "V2", "async_scheduling": None, "cuda_graphs": "FULL_AND_PIECEWISE",
            "kv_cache_tokens": 1_234_560, "log_lines": {"model_runner": "Using V2 Model Runner"},
        }
    ]  # fmt: skip
    assert engine["suffix k=8"]["flags"][0].startswith("suffix k=8 ran on Model Runner V1")


def test_an_arm_whose_servers_hold_fewer_kv_tokens_is_flagged_with_the_share():
    """87,296 tokens for the baseline, 69,837 for the draft arm's servers (−20 %: its weights and KV
    cache share the budget); within 5 % is not flagged."""
    rows = _rows(_experiment(CPU, CPU | {"kv_cache_tokens": 69_837}, method=Arm.Method.DRAFT_MODEL))
    assert rows["suffix k=8"].engine_flags == [
        "suffix k=8's servers hold 69,837 KV-cache tokens against the baseline's 87,296 (-20%): at a concurrency "
        "the baseline's cache holds, its requests may queue or be preempted, so its per-token speedup need not "
        "carry over to capacity (the question's capacity guard)."
    ]
    close = _rows(_experiment(CPU, CPU | {"kv_cache_tokens": 85_000}, method=Arm.Method.DRAFT_MODEL))
    assert close["suffix k=8"].engine_flags == []
