"""The stored analysis against hand-computed cases, through PostgreSQL."""

import struct

import pytest

from experiments.analysis import page_warnings
from experiments.analysis.services import experiment_analyse
from experiments.measurement.encoding.token_ids import pack_token_ids, unpack_token_ids
from experiments.measurement.stats.sequential import PER_CELL_T
from experiments.models import Arm, EnvironmentSnapshot, Experiment, RequestRecord, Run, RunSummary, SpeedupEstimate
from tests.factories import ArmFactory, ExperimentFactory, RequestRecordFactory, RunFactory, RunSummaryFactory

pytestmark = pytest.mark.django_db

PROMPTS = 4
BLOCKS = 3


def _pack(ids):
    return struct.pack(f"<{len(ids)}I", *ids)


def _cell(arm, block, *, tpot, throughput, drafts=0, accepted=0, per_pos=None, vllm="0.32.0", outputs=None):
    run = RunFactory(arm=arm, experiment=arm.experiment, concurrency=1, repetition=block, status=Run.Status.SUCCEEDED)
    RunSummaryFactory(
        run=run,
        output_throughput=throughput,
        request_throughput=throughput / 10,
        tpot_mean_ms=tpot,
        spec_num_drafts=drafts,
        spec_num_accepted_tokens=accepted,
        spec_num_draft_tokens=drafts * 4,
        spec_accepted_per_pos=per_pos or [],
        achieved_concurrency=1.0,
    )
    EnvironmentSnapshot.objects.create(run=run, host_name="h", vllm_version=vllm)
    speculative = arm.is_speculative
    for index in range(PROMPTS):
        RequestRecordFactory(
            run=run,
            prompt_index=index,
            ttft_ms=50.0,
            output_tokens=11,
            e2e_ms=50.0 + 10 * tpot,
            tpot_ms=tpot,
            # The engine's clock agrees with the stream's.
            server_decode_ms=10 * tpot,
            server_tpot_ms=tpot,
            # 10 tokens after the first: steps of 3 (accepted 2) and 2 (accepted 1), then 5 steps
            # of one token that drafted nothing -> 7 decode steps.
            chunk_tokens=[1, 3, 2, 1, 1, 1, 1, 1] if speculative else [1] * 11,
            spec_acceptance_length=2.5 if speculative else None,
            spec_accepted_per_step=[2, 1] if speculative else None,
            spec_proposed_per_step=[4, 4] if speculative else None,
            output_token_ids=_pack((outputs or {}).get(index, [7] * 11)),
        )


@pytest.fixture
def experiment():
    # The per-cell method's hand-computed numbers (old experiments replay it); the block model's:
    # tests/analysis/test_block_model_page.py.
    experiment = ExperimentFactory(
        concurrency_levels=[1], repetitions=BLOCKS, status=Experiment.Status.FINISHED, verdict_method=PER_CELL_T
    )
    baseline = ArmFactory(experiment=experiment, baseline=True, position=0)
    replicate = ArmFactory(experiment=experiment, baseline=True, position=1, label="replicate", is_replicate=True)
    arm = ArmFactory(experiment=experiment, position=2, label="n-gram k=4", method=Arm.Method.NGRAM)
    # Baseline TPOT 20 ms and 100 tok/s in every block; the replicate 20, 21 and 19 ms and
    # 100, 95, 105 tok/s; the arm 10 ms and 200 tok/s, exactly 2x in every block. The arm's
    # output differs from the baseline's for prompt 3 from token 5 on, in every block.
    for block in range(1, BLOCKS + 1):
        _cell(baseline, block, tpot=20.0, throughput=100.0)
        _cell(replicate, block, tpot=(20.0, 21.0, 19.0)[block - 1], throughput=(100.0, 95.0, 105.0)[block - 1])
        _cell(
            arm,
            block,
            tpot=10.0,
            throughput=200.0,
            drafts=10,
            accepted=10,
            per_pos=[5, 3, 2, 0],
            vllm="0.32.0" if block == 1 else "0.33.0",
            outputs={3: [7] * 5 + [8] * 6},
        )
    return experiment


def _speedup(experiment, label, metric):
    return SpeedupEstimate.objects.get(experiment=experiment, arm__label=label, metric=metric)


def test_speedups_are_exact_on_an_exact_two_fold_case(experiment):
    experiment_analyse(experiment=experiment)
    tpot = _speedup(experiment, "n-gram k=4", "tpot")
    assert tpot.block_ratios == [2.0, 2.0, 2.0]
    assert (tpot.point, tpot.ci_low, tpot.ci_high) == pytest.approx((2.0, 2.0, 2.0))
    assert (tpot.n_pairs, tpot.n_repetitions, tpot.outcome) == (BLOCKS * PROMPTS, BLOCKS, "faster")
    assert (tpot.failed_baseline, tpot.failed_arm) == (0, 0)
    assert _speedup(experiment, "n-gram k=4", "output_throughput").point == pytest.approx(2.0)
    assert _speedup(experiment, "n-gram k=4", "ttft").point == pytest.approx(1.0)  # same TTFT on both sides


def test_the_engine_timed_tpot_is_a_metric_of_its_own(experiment):
    # The engine timed the arm's tokens at 8 ms where the client saw 10: baseline 20 ms / 8 ms.
    RequestRecord.objects.filter(run__arm__label="n-gram k=4").update(server_tpot_ms=8.0)
    experiment_analyse(experiment=experiment)
    engine = _speedup(experiment, "n-gram k=4", "server_tpot")
    assert engine.block_ratios == pytest.approx([2.5, 2.5, 2.5])
    assert (engine.n_pairs, engine.outcome) == (BLOCKS * PROMPTS, "faster")


def test_a_distorted_stream_withholds_the_client_timed_verdicts_and_says_why(experiment):
    # Block 2's baseline run: 2 of its 4 requests reached the client distorted (over 5 %).
    summaries = RunSummary.objects.filter(run__experiment=experiment)
    summaries.update(stream_checked=PROMPTS, stream_distorted=0)
    baseline = experiment.arms.get(position=0)
    summaries.filter(run__arm=baseline, run__repetition=2).update(stream_distorted=2, stream_bursts=2)
    analysis = experiment_analyse(experiment=experiment)
    metrics = ("server_tpot", "tpot", "ttft", "e2e")
    outcomes = {metric: _speedup(experiment, "n-gram k=4", metric).outcome for metric in metrics}
    assert outcomes == {
        "server_tpot": "faster", "tpot": "stream distorted", "ttft": "stream distorted", "e2e": "faster",
    }  # fmt: skip
    assert _speedup(experiment, "n-gram k=4", "tpot").point == pytest.approx(2.0)  # still estimated
    rows = [row for row in analysis.series["stream_fidelity"] if row["flagged"]]
    assert [(row["arm_id"], row["block"], row["distorted"], row["checked"]) for row in rows] == [(baseline.id, 2, 2, 4)]
    warning = next(w for w in analysis.warnings if "did not reach the client" in w)
    assert f"{baseline.label} at 1, block 2 (2 of 4)" in warning


def test_the_replicate_is_compared_like_an_arm(experiment):
    experiment_analyse(experiment=experiment)
    tpot = _speedup(experiment, "replicate", "tpot")
    # 20/20, 20/21, 20/19
    assert tpot.block_ratios == pytest.approx([1.0, 20 / 21, 20 / 19])
    assert tpot.outcome == "inconclusive"
    throughput = _speedup(experiment, "replicate", "output_throughput")
    assert throughput.block_ratios == pytest.approx([1.0, 0.95, 1.05])


def test_verdict_texts_and_break_even(experiment):
    analysis = experiment_analyse(experiment=experiment)
    by_arm = {(v["arm"], v["metric"]): v for v in analysis.verdicts}
    arm_tpot = by_arm[("n-gram k=4", "tpot")]
    assert arm_tpot["text"] == "n-gram k=4 is faster than the baseline at 1 (TPOT 2.00× [2.00, 2.00] at 1)."
    assert arm_tpot["break_even"] == {
        "state": "not estimable", "level": None, "lo": None, "hi": None, "reason": "fewer than two levels",
    }  # fmt: skip
    assert by_arm[("replicate", "tpot")]["text"].startswith("The A/A replicate, identical to the baseline")


def test_fidelity_counts_equal_outputs_per_prompt_and_block(experiment):
    analysis = experiment_analyse(experiment=experiment)
    rows = {row["arm_id"]: row for row in analysis.fidelity}
    arm = experiment.arms.get(label="n-gram k=4")
    replicate = experiment.arms.get(label="replicate")
    assert (rows[replicate.id]["compared"], rows[replicate.id]["identical"]) == (BLOCKS * PROMPTS, BLOCKS * PROMPTS)
    assert (rows[arm.id]["compared"], rows[arm.id]["identical"]) == (12, 9)
    assert rows[arm.id]["median_divergence"] == 5
    # The test is on prompts: prompt 3 differs in all 3 blocks, one prompt of 4 against none of
    # the replicate's 4. One-sided Fisher: the one differing prompt of the 8 falls on the arm's
    # side with P = 4 / 8 = 0.5 (as 3 of 12 outputs against 0 of 12 it read 0.1087).
    assert (rows[arm.id]["prompts"], rows[arm.id]["prompts_differing"]) == (4, 1)
    assert (rows[replicate.id]["prompts"], rows[replicate.id]["prompts_differing"]) == (4, 0)
    assert (rows[arm.id]["replicate"], rows[replicate.id]["replicate"]) == (False, True)
    assert rows[arm.id]["p_more_than_replicate"] == pytest.approx(0.5)
    assert not rows[arm.id]["warn"]


def test_the_fidelity_warning_claims_only_more_differences_than_the_replicate():
    rows = [
        {"arm_id": 1, "replicate": True, "level": 4, "prompts": 40, "prompts_differing": 1,
         "p_more_than_replicate": None, "warn": False},
        {"arm_id": 2, "replicate": False, "level": 4, "prompts": 40, "prompts_differing": 12,
         "p_more_than_replicate": 0.00081, "warn": True},
    ]  # fmt: skip
    [warning] = page_warnings.fidelity_warnings(rows, {1: "replicate", 2: "draft k=4"})
    assert warning.startswith(
        "draft k=4 at concurrency 4: the output differed from the baseline's in at least one block for 12 of 40 "
        "prompts, against 1 of 40 for the A/A replicate: clearly more often (one-sided Fisher exact test on "
        "prompts, p = 0.00081)."
    )
    assert "lossless up to the precision of the hardware's numerics" in warning
    assert "should not change outputs" not in warning


def test_no_fidelity_when_sampling(experiment):
    experiment.temperature = 0.7
    experiment.save()
    assert experiment_analyse(experiment=experiment).fidelity == []


def test_along_the_output_reads_merged_requests_from_their_per_step_counts(experiment):
    """A request whose chunks merged still counts where vLLM's per-step counts account for
    every step, and under plain decoding; one whose counts miss steps is left out."""
    arm = experiment.arms.get(label="n-gram k=4")
    first = RequestRecord.objects.filter(run__arm=arm).order_by("id")
    # 10 tokens after the first in steps of 3, 3, 3 and 1 (the last step's 3 accepted cut to 1):
    # start at indices 1, 4, 7 (bucket 0) and 10 (bucket 8). Chunks merged into 2.
    covered = first[0]
    covered.chunk_tokens, covered.spec_accepted_per_step = [1, 6, 4], [2, 2, 2, 3]
    covered.spec_proposed_per_step = [4, 4, 4, 4]
    covered.save()
    # The seeded steps [2, 1] miss the 5 steps that drafted nothing, and the chunks merged.
    missed = first[1]
    missed.chunk_tokens = [1, 5, 5]
    missed.save()
    baseline_record = RequestRecord.objects.filter(run__arm__label="baseline").order_by("id").first()
    baseline_record.chunk_tokens = [1, 2] + [1] * 8
    baseline_record.save()

    analysis = experiment_analyse(experiment=experiment)

    # The other 10 of the 12 requests as seeded: 4 steps of 7 tokens in bucket 0, 3 of 3 in
    # bucket 8; the covered one adds 3 steps of 9 tokens to bucket 0 and 1 of 1 to bucket 8.
    [(start_0, mean_0, steps_0), (start_8, mean_8, steps_8)] = analysis.series["along_output"][str(arm.id)]
    assert (start_0, mean_0, steps_0) == (0, pytest.approx(79 / 43), 43)
    assert (start_8, mean_8, steps_8) == (8, 1.0, 31)
    assert analysis.series["along_output_merged"][str(arm.id)] == 1
    # Plain decoding emits one token a step: its merged chunks leave nothing unknown.
    baseline = experiment.arms.get(label="baseline")
    assert analysis.series["along_output_merged"][str(baseline.id)] == 0
    buckets = [list(bucket) for bucket in analysis.series["along_output"][str(baseline.id)]]
    assert buckets == [[0, 1.0, 7 * 12], [8, 1.0, 3 * 12]]


def test_series_hold_tokens_per_step_along_output_and_the_prediction(experiment):
    analysis = experiment_analyse(experiment=experiment)
    analysis.refresh_from_db()  # the stored JSON, as the page reads it
    arm = experiment.arms.get(label="n-gram k=4")
    baseline = experiment.arms.get(label="baseline")
    # 10 tokens after the first in 7 decode steps (2 drafted, 5 that drafted nothing).
    assert analysis.series["tokens_per_step"][f"{arm.id}:1"] == pytest.approx(10 / 7)
    assert analysis.series["tokens_per_step"][f"{baseline.id}:1"] == 1.0
    # Steps start at output indices 1 (3 tokens), 4 (2), 6, 7 (bucket 0: (3+2+1+1)/4),
    # 8, 9, 10 (bucket 8: 3/3).
    assert analysis.series["along_output"][str(arm.id)] == [[0, 7 / 4, 4 * 12], [8, 1.0, 3 * 12]]
    assert analysis.series["along_output_merged"][str(arm.id)] == 0
    # Drafted 4, accepted 2 and 1: position 0 accepted 2 of 2, position 1 1 of 2, position 2 0 of 1.
    assert analysis.series["conditional_drafted"][str(arm.id)] == [[24, 24], [12, 24], [0, 12]]
    assert analysis.series["tpot_cdf"][f"{arm.id}:1"][0] == 10.0
    # n-gram lookup has no draft model to serve alone: its cost is not measured, so no prediction.
    [point] = analysis.series["predicted"][str(arm.id)]["points"]
    assert point["cost_source"].startswith("not measured: n-gram lookup")
    assert (point["predicted"], point["agreement"]) == (None, None)
    # Still the acceptance side: 30 drafts, accepted at positions 0-3: 15, 9, 6, 0 -> 1 + 30/30.
    assert point["tokens_per_step"] == pytest.approx(2.0)
    assert point["measured"] == pytest.approx(2.0)
    assert analysis.series["calibration"] == []


@pytest.fixture
def calibrated():
    """Baseline, a draft-model arm k=2 and the calibration arm serving its draft alone, 3 blocks."""
    experiment = ExperimentFactory(
        concurrency_levels=[1], repetitions=BLOCKS, status=Experiment.Status.FINISHED, draft_calibration=True
    )
    baseline = ArmFactory(experiment=experiment, baseline=True, position=0)
    arm = ArmFactory(
        experiment=experiment, position=1, label="draft k=2", method=Arm.Method.DRAFT_MODEL,
        num_speculative_tokens=2, params={"model": "/models/draft"},
    )  # fmt: skip
    calibration = ArmFactory(
        experiment=experiment, baseline=True, position=2, label="calibration", is_calibration=True,
        params={"model": "/models/draft"},
    )  # fmt: skip
    for block in range(1, BLOCKS + 1):
        # Decode steps: baseline 200 ms / 10 steps = 20 ms; the draft alone 50 ms / 10 = 5 ms.
        _cell(baseline, block, tpot=20.0, throughput=100.0)
        _cell(calibration, block, tpot=5.0, throughput=400.0)
        # 10 drafts accepted at positions 0 and 1: 8 and 6 per block. TPOT 10, 10.5, 9.5 ms.
        _cell(arm, block, tpot=(10.0, 10.5, 9.5)[block - 1], throughput=200.0, drafts=10, accepted=14, per_pos=[8, 6])
    return experiment


def test_the_prediction_uses_the_measured_draft_cost_and_the_acceptance_by_position(calibrated):
    analysis = experiment_analyse(experiment=calibrated)
    analysis.refresh_from_db()
    arm = calibrated.arms.get(label="draft k=2")
    [point] = analysis.series["predicted"][str(arm.id)]["points"]
    # c = 5 ms / 20 ms in every block; E = 1 + 0.8 + 0.8 * 0.75 = 2.4; 2.4 / (2 * 0.25 + 1) = 1.6.
    assert point["cost_source"] == "measured at this level by the calibration arm"
    assert (point["cost_ratio"], point["cost_ratio_lo"], point["cost_ratio_hi"]) == pytest.approx((0.25, 0.25, 0.25))
    assert (point["draft_step_ms"], point["baseline_step_ms"]) == pytest.approx((5.0, 20.0))
    assert point["conditional"] == pytest.approx([0.8, 0.75])
    assert point["tokens_per_step"] == pytest.approx(2.4)
    assert point["predicted"] == pytest.approx(1.6)
    # Measured: 20/10, 20/10.5, 20/9.5, around 2 with an interval that leaves 1.6 below it.
    assert point["measured_lo"] > 1.6
    assert point["agreement"] == "part"
    sentence = analysis.series["predicted"][str(arm.id)]["sentence"]
    assert sentence.startswith(
        "draft k=2: at concurrency 1 predicted 1.60 [1.60, 1.60] (c = 0.250 [0.250, 0.250]), measured 2.00 ["
    )
    assert sentence.endswith("they part, the predicted interval lies below the measured one.")
    [calibration] = analysis.series["calibration"]
    assert calibration["label"] == "calibration"
    assert calibration["rows"][0]["relative_cost"]["point"] == pytest.approx(0.25)


def test_a_calibration_arm_gets_no_speedup_and_no_verdict(calibrated):
    analysis = experiment_analyse(experiment=calibrated)
    calibration = calibrated.arms.get(label="calibration")
    assert not SpeedupEstimate.objects.filter(arm=calibration).exists()
    assert all(v["arm_id"] != calibration.id for v in analysis.verdicts)
    assert all(row["arm_id"] != calibration.id for row in analysis.series["step_accounting"]["rows"])
    assert str(calibration.id) not in analysis.series["predicted"]


def test_warnings_name_runtime_differences_and_design_limits(experiment):
    experiment.repetitions = 2
    experiment.server_per_block = False
    experiment.save()
    text = " ".join(experiment_analyse(experiment=experiment).warnings)
    assert "same vLLM version" in text
    assert "0.33.0" in text
    assert "2 block(s): the page shows estimates but no verdicts" in text
    assert "leave out the variance between server starts" in text


def test_low_achieved_concurrency_is_flagged(experiment):
    experiment.runs.filter(arm__label="baseline", repetition=1).update(concurrency=4)
    summary = experiment.runs.get(arm__label="baseline", repetition=1).summary
    summary.achieved_concurrency = 3.5  # 87.5 % of 4
    summary.save()
    assert any("less than 90% of the nominal level" in w for w in experiment_analyse(experiment=experiment).warnings)


def test_analysing_twice_replaces_the_estimates(experiment):
    experiment_analyse(experiment=experiment)
    experiment_analyse(experiment=experiment)
    # arms x metrics (goodput only with an SLO)
    assert SpeedupEstimate.objects.filter(experiment=experiment).count() == 2 * 7


def test_unpack_token_ids_reads_little_endian_uint32():
    assert unpack_token_ids(b"\x01\x00\x00\x00\xff\xff\x00\x00") == [1, 65535]
    assert unpack_token_ids(None) == []
    assert pack_token_ids([1, 65535]) == b"\x01\x00\x00\x00\xff\xff\x00\x00"


def test_a_replicate_called_different_from_the_baseline_is_a_warning(experiment):
    assert not any("identical to the baseline" in w for w in experiment_analyse(experiment=experiment).warnings)
    # The replicate's client TPOT 30 % slower in every block: not the question's metric, no warning.
    for block, tpot in ((1, 26.0), (2, 27.0), (3, 26.0)):
        RequestRecord.objects.filter(run__arm__label="replicate", run__repetition=block).update(tpot_ms=tpot)
    assert not any("identical to the baseline" in w for w in experiment_analyse(experiment=experiment).warnings)
    # Its engine-timed TPOT (the question's metric) the same: the family's test calls it slower.
    for block, tpot in ((1, 26.0), (2, 27.0), (3, 26.0)):
        RequestRecord.objects.filter(run__arm__label="replicate", run__repetition=block).update(server_tpot_ms=tpot)
    warnings = experiment_analyse(experiment=experiment).warnings
    [warning] = [w for w in warnings if "identical to the baseline" in w]
    assert "slower at 1" in warning
    assert "at most 5% of experiments" in warning
    assert "0 earlier A/A replicate(s)" in warning  # no history on this host: it may be chance


def test_the_tpot_verdict_pools_decode_time_and_the_per_request_ratio_is_stored(experiment):
    # Prompt 0 becomes long: 41 output tokens (40 decode tokens) at 40 ms for the baseline and
    # 10 ms for the arm (4x); prompts 1-3 keep 10 decode tokens at 20 and 10 ms (2x). Per request:
    # (40 + 3 * 20) / (10 + 3 * 10) = 2.5. Pooled: (40 * 40 + 3 * 20 * 10) / (10 * 40 + 3 * 10 * 10)
    # = 2200 / 700 = 22 / 7, in every block, for the client's and the engine's TPOT alike.
    for label, tpot in (("baseline", 40.0), ("n-gram k=4", 10.0)):
        requests = RequestRecord.objects.filter(run__arm__label=label, prompt_index=0)
        requests.update(output_tokens=41, tpot_ms=tpot, server_tpot_ms=tpot)
    analysis = experiment_analyse(experiment=experiment)
    for metric in ("tpot", "server_tpot"):
        assert _speedup(experiment, "n-gram k=4", metric).block_ratios == pytest.approx([22 / 7] * BLOCKS)
    rows = {(row["arm"], row["metric"]): row for row in analysis.series["tpot_estimands"]["cells"]}
    tpot = rows[("n-gram k=4", "tpot")]
    assert (tpot["pooled"]["point"], tpot["per_request"]["point"]) == pytest.approx((22 / 7, 2.5))
    assert (tpot["per_request"]["figure"], tpot["differs"], tpot["level"]) == ("2.50× [2.50, 2.50]", True, 1)
    assert rows[("n-gram k=4", "server_tpot")]["metric_name"] == "Engine-timed TPOT"
    # Both TPOT metrics of the arm and of the replicate (whose baseline changed too), no other metric.
    assert sorted(rows) == sorted((arm, m) for arm in ("n-gram k=4", "replicate") for m in ("tpot", "server_tpot"))
    assert analysis.series["tpot_estimands"]["differing"] == 4


def test_equal_tpot_estimands_are_stored_without_a_difference(experiment):
    analysis = experiment_analyse(experiment=experiment)
    estimands = analysis.series["tpot_estimands"]
    assert estimands["differing"] == 0
    arm = next(row for row in estimands["cells"] if row["arm"] == "n-gram k=4" and row["metric"] == "tpot")
    assert (arm["pooled"]["point"], arm["per_request"]["point"]) == pytest.approx((2.0, 2.0))


def test_failures_are_compared_as_rates_of_the_requests_sent(experiment):
    # Each run sent 4 measured requests. One of the arm's failed in block 2 (1 of 12 against 0
    # of 12: Fisher's p = 1): the verdict stands, though the counts differ.
    summaries = RunSummary.objects.filter(run__experiment=experiment)
    summaries.update(completed=PROMPTS, failed=0)
    arm_runs = summaries.filter(run__arm__label="n-gram k=4")
    RequestRecord.objects.filter(run__arm__label="n-gram k=4", run__repetition=2, prompt_index=3).delete()
    arm_runs.filter(run__repetition=2).update(completed=PROMPTS - 1, failed=1)
    experiment_analyse(experiment=experiment)
    tpot = _speedup(experiment, "n-gram k=4", "tpot")
    assert (tpot.failed_arm, tpot.failed_baseline, tpot.outcome) == (1, 0, "faster")
    # Every run of the arm also failed 8 more requests: 25 of 36 sent against 0 of 12, p < 0.05.
    arm_runs.exclude(run__repetition=2).update(failed=8)
    arm_runs.filter(run__repetition=2).update(failed=9)
    experiment_analyse(experiment=experiment)
    tpot = _speedup(experiment, "n-gram k=4", "tpot")
    assert (tpot.failed_arm, tpot.outcome) == (25, "failures differ")


def test_the_question_s_cells_are_stored_as_primary_with_their_decision_and_why(experiment):
    analysis = experiment_analyse(experiment=experiment)
    primary = _speedup(experiment, "n-gram k=4", "server_tpot")
    other = _speedup(experiment, "n-gram k=4", "tpot")
    # Exactly 2x in every block: no spread, p = 0, called at the first (and only) look.
    assert (primary.primary, primary.outcome, primary.p_value, primary.confidence) == (True, "faster", 0.0, 0.95)
    assert (other.primary, other.p_value) == (False, None)
    question = analysis.series["question"]
    assert (question["metric"], question["levels"], question["blocks_run"]) == ("server_tpot", [1], BLOCKS)
    assert (question["stop"], question["open"]) == ("settled", [])
    [cell] = question["cells"]
    assert (cell["arm"], cell["level"], cell["outcome"]) == ("n-gram k=4", 1, "faster")
    assert cell["why"].startswith("called faster after 3 blocks")
    # The replicate is a family of its own, beside the candidates.
    assert [c["arm"] for c in question["replicate_cells"]] == ["replicate"]


def test_a_fixed_design_stops_for_its_blocks_and_a_budget_is_named(experiment):
    experiment.sequential = False
    experiment.save()
    assert experiment_analyse(experiment=experiment).series["question"]["stop"] == "fixed"
