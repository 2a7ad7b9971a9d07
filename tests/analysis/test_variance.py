"""The variance components stored with the analysis, against a case worked by hand through
PostgreSQL: known log ratios per block and level, and known run and server start times."""

import math
from datetime import timedelta

import pytest
from django.utils import timezone

from experiments.analysis import variance
from experiments.analysis.loader import load_runs
from experiments.analysis.services import experiment_analyse
from experiments.measurement.stats import variance_components as vc
from experiments.measurement.stats.sequential import PER_CELL_T
from experiments.models import Arm, Experiment, Run, SpeedupEstimate
from tests.factories import ArmFactory, ExperimentFactory, RequestRecordFactory, RunFactory, RunSummaryFactory

pytestmark = pytest.mark.django_db

LEVELS = (1, 4)
BLOCKS = 3
PROMPTS = 4
RUN_S, START_S = 10.0, 90.0
BASELINE_TPOT = 20.0
# Log ratios (baseline TPOT / arm TPOT, over 2×) by level, block by block.
# The arm: cov = 0.03·0.03 / 2 = 0.00045, each level's variance 0.0009 -> σ_start² = σ_run² = 0.00045.
ARM_LOGS = {1: (0.03, 0.0, -0.03), 4: (0.03, -0.03, 0.0)}
# The replicate (around 1×): the levels move against each other, cov = −0.0001, variances 0.0001.
REPLICATE_LOGS = {1: (0.01, 0.0, -0.01), 4: (-0.01, 0.0, 0.01)}


def _run(arm, level, block, tpot, started):
    run = RunFactory(
        arm=arm, concurrency=level, repetition=block, status=Run.Status.SUCCEEDED,
        started_at=started, finished_at=started + timedelta(seconds=RUN_S),
    )  # fmt: skip
    RunSummaryFactory(run=run, completed=PROMPTS, tpot_mean_ms=tpot, achieved_concurrency=float(level))
    for prompt in range(PROMPTS):
        RequestRecordFactory(
            run=run, prompt_index=prompt, output_tokens=11, ttft_ms=50.0, e2e_ms=50.0 + 10 * tpot, tpot_ms=tpot,
            server_tpot_ms=tpot, server_decode_ms=10 * tpot,
        )  # fmt: skip


def _experiment(*, arm_method=Arm.Method.NGRAM, timed=True, **fields):
    """Block by block, each arm's session waits START_S for its server, then runs level 1 and
    level 4 back to back, RUN_S each. Without `timed`, no run records its times."""
    # The per-cell method: its primary cells' ratios are over the baseline alone, as the components' are.
    experiment = ExperimentFactory(
        concurrency_levels=list(LEVELS), repetitions=BLOCKS, status=Experiment.Status.FINISHED,
        verdict_method=PER_CELL_T, **fields,
    )  # fmt: skip
    baseline = ArmFactory(experiment=experiment, baseline=True, position=0)
    replicate = ArmFactory(experiment=experiment, baseline=True, position=1, label="replicate", is_replicate=True)
    arm = ArmFactory(experiment=experiment, position=2, label="n-gram k=4", method=arm_method)
    sides = ((baseline, None, 1.0), (replicate, REPLICATE_LOGS, 1.0), (arm, ARM_LOGS, 2.0))
    clock = timezone.now()
    for block in range(BLOCKS):
        for side, logs, speedup in sides:
            clock += timedelta(seconds=START_S)
            for level in LEVELS:
                log_ratio = logs[level][block] if logs else 0.0
                tpot = BASELINE_TPOT / (speedup * math.exp(log_ratio))
                _run(side, level, block + 1, tpot, clock)
                clock += timedelta(seconds=RUN_S)
    if not timed:
        Run.objects.filter(experiment=experiment).update(started_at=None, finished_at=None)
    return experiment


def _rows(experiment):
    analysis = experiment_analyse(experiment=experiment)
    return {(row["arm"], row["metric"]): row for row in analysis.series["variance_components"]["rows"]}


def test_components_costs_and_rounds_of_a_case_worked_by_hand():
    rows = _rows(_experiment())
    arm = rows[("n-gram k=4", "server_tpot")]
    assert (arm["levels"], arm["blocks"], arm["replicate"]) == (2, 3, False)
    assert arm["sigma_start_pct"] == pytest.approx(100 * math.sqrt(0.00045))
    assert arm["sigma_run_pct"] == pytest.approx(100 * math.sqrt(0.00045))
    # Every session after the first waited 90 s; the baseline's first is left out, so its 2 and
    # the arm's 3 sessions count.
    assert (arm["c_start_s"], arm["c_run_s"], arm["start_sessions"]) == (pytest.approx(START_S), RUN_S, 5)
    # r* = √(90 / (2 · 10) · 1) = 2.12; 2 rounds: (0.00045 + 0.000225) · 130 = 0.0878 < 3 rounds: 0.09.
    assert arm["rounds_exact"] == pytest.approx(math.sqrt(4.5))
    assert (arm["rounds"], arm["note"]) == (2, "")
    # E2E = 50 + 10 · TPOT: the same shape, damped by the TTFT both sides share.
    assert rows[("n-gram k=4", "e2e")]["sigma_start_pct"] > 0


def test_a_negative_covariance_is_floored_and_the_note_says_so():
    replicate = _rows(_experiment())[("replicate", "server_tpot")]
    assert replicate["replicate"]
    assert replicate["sigma_start_pct"] == 0.0
    assert replicate["sigma_run_pct"] == pytest.approx(1.0)  # √0.0001 = 1 %
    assert (replicate["rounds"], replicate["rounds_exact"]) == (vc.MAX_ROUNDS, None)
    assert "covariance across levels came out negative (-0.0001); σ_start² set to 0" in replicate["note"]
    assert "σ_start² is 0: only the cap limits the rounds" in replicate["note"]


def test_the_blocks_ratios_are_the_stored_verdicts():
    experiment = _experiment()
    experiment_analyse(experiment=experiment)
    arm = experiment.arms.get(label="n-gram k=4")
    baseline = experiment.arms.get(position=0)
    ratios = vc.block_ratios(
        load_runs(experiment), baseline=baseline.id, arms=[arm.id], levels=list(LEVELS), metrics=variance.METRICS
    )
    for metric in variance.METRICS:
        for level in LEVELS:
            stored = SpeedupEstimate.objects.get(arm=arm, concurrency=level, metric=metric).block_ratios
            assert [ratios[(arm.id, str(metric))][level][block] for block in (1, 2, 3)] == pytest.approx(stored)


def test_without_recorded_times_the_components_stand_and_the_rounds_say_why():
    arm = _rows(_experiment(timed=False))[("n-gram k=4", "server_tpot")]
    assert arm["sigma_start_pct"] == pytest.approx(100 * math.sqrt(0.00045))
    assert (arm["c_start_s"], arm["c_run_s"], arm["rounds"]) == (None, None, None)
    assert arm["note"] == "the start-up or run times were not recorded"


def test_one_server_per_arm_is_not_estimable():
    arm = _rows(_experiment(server_per_block=False))[("n-gram k=4", "server_tpot")]
    assert (arm["sigma_start_pct"], arm["sigma_run_pct"], arm["rounds"]) == (None, None, None)
    assert arm["note"].startswith("one server per arm for all blocks")


def test_suffix_decoding_gets_a_server_per_run_and_is_not_estimable():
    rows = _rows(_experiment(arm_method=Arm.Method.SUFFIX))
    assert rows[("n-gram k=4", "server_tpot")]["note"].startswith("suffix decoding gets a fresh server for every run")
    assert rows[("replicate", "server_tpot")]["sigma_run_pct"] == pytest.approx(1.0)


def test_one_level_is_not_estimable():
    experiment = _experiment()
    experiment.concurrency_levels = [1]
    experiment.save(update_fields=["concurrency_levels"])
    Run.objects.filter(experiment=experiment, concurrency=4).delete()
    arm = _rows(experiment)[("n-gram k=4", "server_tpot")]
    assert (arm["levels"], arm["sigma_start_pct"]) == (1, None)
    assert arm["note"].startswith("one concurrency level")
