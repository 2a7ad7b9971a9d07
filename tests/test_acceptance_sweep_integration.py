"""A synthetic acceptance sweep through the real parts: PostgreSQL, a Celery worker process
and vLLM servers of the demo target. The baseline and an n-gram arm with two swept lengths
run at one level on a tiny workload.

What the sweep's runs do depends on the host's vLLM: 0.32's GPU kernels implement synthetic
acceptance, its CPU build refuses it (workers/synthetic_acceptance.py). On a host that runs
it, the stored sweep is checked against what vLLM measured (τ near the length asked for); on
a CPU host, that the worker started no server for the sweep and failed its runs with vLLM's
reason, while the arm's own runs, statistics and page are those of an experiment without it."""

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from experiments import acceptance_sweep, services
from experiments.models import Arm, Experiment, Run, RunSummary, SpeedupEstimate
from experiments.services import ArmSpec
from experiments.workloads import prompt_set_hash
from tests.factories import experiment_fields
from tests.worker_fixtures import wait_for_experiment
from workers import synthetic_acceptance

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TARGET = settings.SPECDASH_MODELS_DIR / "target"
LENGTHS = (1.5, 3.0)


@pytest.mark.skipif(not (TARGET / "config.json").exists(), reason="demo models not built (./dev test builds them)")
def test_a_sweep_runs_where_vllm_allows_it_and_never_touches_the_arms_figures(celery_worker_process):
    owner = get_user_model().objects.create_user(username="sweeper", password="pw-for-tests")
    fields = experiment_fields(
        name="sweep", prompt_set="code_edit", prompt_set_hash=prompt_set_hash("code_edit"), num_prompts=4,
        max_tokens=16, temperature=0.0, concurrency_levels=[1], repetitions=1, warmup_requests=1,
    )  # fmt: skip
    arm = ArmSpec(
        method=Arm.Method.NGRAM, num_speculative_tokens=3, synthetic_sweep=LENGTHS,
        params={"prompt_lookup_min": 2, "prompt_lookup_max": 3},
    )  # fmt: skip
    experiment = services.experiment_create(owner=owner, arms=[arm], **fields)

    experiment = wait_for_experiment(experiment.id, timeout_s=900)

    assert experiment.status == Experiment.Status.FINISHED
    real = experiment.runs.real()
    assert sorted(real.values_list("status", flat=True)) == [Run.Status.SUCCEEDED] * 2
    assert RunSummary.objects.succeeded_of(experiment).count() == 2
    assert set(SpeedupEstimate.objects.filter(experiment=experiment).values_list("concurrency", flat=True)) == {1}
    (sweep,) = acceptance_sweep.acceptance_sweeps(experiment=experiment)
    assert sweep.tau is not None
    assert sweep.tau > 1
    reason = synthetic_acceptance.unsupported_reason(settings.SPECDASH_VLLM_PYTHON)
    if reason is None:
        _check_the_sweep_ran(experiment, sweep)
    else:
        _check_the_sweep_was_refused(experiment, sweep, reason)
    page = Client()
    page.force_login(owner)
    html = page.get(reverse("experiments:detail", args=[experiment.pk])).content.decode()
    assert "What acceptance it would take" in html
    assert "your draft gives τ" in html


def _check_the_sweep_ran(experiment, sweep):
    synthetic = RunSummary.objects.synthetic_sweep_of(experiment).select_related("run")
    assert sorted(s.run.synthetic_acceptance_length for s in synthetic) == list(LENGTHS)
    (level,) = sweep.levels
    assert [p.length for p in level.points] == list(LENGTHS)
    for point in level.points:
        assert point.speedup > 0
        # vLLM accepted at the rates that give the length asked for; 4 short requests leave some noise.
        assert point.measured_tau == pytest.approx(point.length, abs=0.35)


def _check_the_sweep_was_refused(experiment, sweep, reason):
    assert "Synthetic acceptance not supported with CPU sampling" in reason
    synthetic = experiment.runs.synthetic()
    assert sorted(synthetic.values_list("synthetic_acceptance_length", flat=True)) == list(LENGTHS)
    for run in synthetic:
        assert run.status == Run.Status.FAILED
        assert "refuses synthetic acceptance" in run.error
        assert "Synthetic acceptance not supported with CPU sampling" in run.error
    # A synthetic session's server log would be named …-synthetic-<length>-…: none was started.
    assert not list((settings.DATA_DIR / "server-logs" / f"experiment-{experiment.id}").glob("*synthetic*"))
    assert sweep.failed_runs == 2
    assert all(not level.points for level in sweep.levels)
    assert not any("failed" in warning for warning in experiment.analysis.warnings)
