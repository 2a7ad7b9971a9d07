"""The stored analysis against hand-computed cases."""

import pytest

from experiments.analysis import experiment_analyse
from experiments.models import Arm, EnvironmentSnapshot, Experiment, Run, SpeedupEstimate
from tests.factories import ArmFactory, ExperimentFactory, RequestRecordFactory, RunFactory, RunSummaryFactory

pytestmark = pytest.mark.django_db

PROMPTS = 4


def _cell(arm, repetition, *, tpot, throughput, drafts=0, accepted=0, per_pos=None, vllm="0.32.0"):
    run = RunFactory(
        arm=arm, experiment=arm.experiment, concurrency=1, repetition=repetition, status=Run.Status.SUCCEEDED
    )
    RunSummaryFactory(
        run=run, output_throughput=throughput, request_throughput=throughput / 10, tpot_mean_ms=tpot,
        spec_num_drafts=drafts, spec_num_accepted_tokens=accepted, spec_num_draft_tokens=drafts * 4,
        spec_accepted_per_pos=per_pos or [],
    )  # fmt: skip
    EnvironmentSnapshot.objects.create(run=run, host_name="h", vllm_version=vllm)
    speculative = not arm.is_baseline
    for index in range(PROMPTS):
        RequestRecordFactory(
            run=run, prompt_index=index, ttft_ms=50.0, output_tokens=11, e2e_ms=50.0 + 10 * tpot, tpot_ms=tpot,
            spec_acceptance_length=2.0 if speculative else None,
            spec_accepted_per_step=[2, 1] if speculative else None,
            spec_proposed_per_step=[4, 4] if speculative else None,
        )  # fmt: skip


@pytest.fixture
def experiment():
    experiment = ExperimentFactory(concurrency_levels=[1], repetitions=2, status=Experiment.Status.FINISHED)
    baseline = ArmFactory(experiment=experiment, baseline=True, position=0)
    arm = ArmFactory(experiment=experiment, position=1, label="n-gram k=4", method=Arm.Method.NGRAM)
    for repetition in (1, 2):
        # Baseline TPOT 20 ms, 100 tok/s; arm TPOT 10 ms, 200 tok/s: exactly 2x everywhere.
        _cell(baseline, repetition, tpot=20.0, throughput=100.0)
        _cell(arm, repetition, tpot=10.0, throughput=200.0, drafts=10, accepted=10, per_pos=[5, 3, 2, 0],
              vllm="0.32.0" if repetition == 1 else "0.33.0")  # fmt: skip
    return experiment


def test_speedups_are_exact_on_an_exact_two_fold_case(experiment):
    experiment_analyse(experiment=experiment)
    tpot = SpeedupEstimate.objects.get(experiment=experiment, metric="tpot")
    # Every pair is 20 ms / 10 ms: ratio of means 2, and every resample gives 2.
    assert (tpot.point, tpot.ci_low, tpot.ci_high) == (2.0, 2.0, 2.0)
    assert (tpot.n_pairs, tpot.n_repetitions) == (2 * PROMPTS, 2)
    throughput = SpeedupEstimate.objects.get(experiment=experiment, metric="output_throughput")
    assert throughput.point == 2.0
    assert throughput.ci_low == 2.0
    ttft = SpeedupEstimate.objects.get(experiment=experiment, metric="ttft")
    assert ttft.point == 1.0  # same TTFT on both sides


def test_verdicts_call_a_significant_gain_faster_and_equal_ttft_not(experiment):
    analysis = experiment_analyse(experiment=experiment)
    by_metric = {v["metric"]: v for v in analysis.verdicts}
    assert "n-gram k=4 is faster than the baseline" in by_metric["tpot"]["text"]
    assert "2.00×" in by_metric["tpot"]["text"]
    assert by_metric["tpot"]["break_even"] is None


def test_series_hold_acceptance_along_output_cdfs_and_the_prediction(experiment):
    analysis = experiment_analyse(experiment=experiment)
    analysis.refresh_from_db()  # the stored JSON, as the page reads it
    arm = experiment.arms.get(position=1)
    # Steps start at output index 1 and 1 + 3 = 4: both in bucket 0 (8 tokens); mean (2 + 1) / 2.
    assert analysis.series["along_output"][str(arm.id)] == [[0, 1.5, 2 * 2 * PROMPTS]]
    assert analysis.series["tpot_cdf"][f"{arm.id}:1"][0] == 10.0
    predicted = analysis.series["predicted"][str(arm.id)]
    # tau = 1 + 20 accepted / 20 drafts = 2; c from TPOT at level 1: (10 * 2 / 20 - 1) / 4 = 0.
    assert predicted["cost_ratio"] == 0.0
    point = predicted["points"][0]
    assert point["tau"] == 2.0
    assert point["predicted"] == pytest.approx(2.0)
    assert point["measured"] == 2.0


def test_warnings_name_runtime_differences_and_small_samples(experiment):
    analysis = experiment_analyse(experiment=experiment)
    text = " ".join(analysis.warnings)
    assert "same vLLM version" in text
    assert "0.33.0" in text
    assert "Fewer than 30 paired requests at concurrency 1" in text


def test_analysing_twice_replaces_the_estimates(experiment):
    experiment_analyse(experiment=experiment)
    experiment_analyse(experiment=experiment)
    assert SpeedupEstimate.objects.filter(experiment=experiment).count() == 5
