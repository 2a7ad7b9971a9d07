"""Whether a sequential experiment runs another block, and for which arms
(experiments/analysis/continuation.py, experiments/lifecycle.experiment_block_add)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from experiments import lifecycle
from experiments.analysis import continuation, primary
from experiments.analysis.loader import load_runs
from experiments.models import Arm, Experiment, Run
from tests.factories import ArmFactory, ExperimentFactory, RequestRecordFactory, RunFactory, RunSummaryFactory

pytestmark = pytest.mark.django_db

# Engine-timed TPOT per block (ms): the baseline steady; "settled" exactly 2x faster in every
# block (called at the first look); "open" 0.8x to 1.25x from block to block (no look settles it).
BASELINE_TPOT = 20.0
SETTLED_TPOT = (10.0, 10.0, 10.0, 10.0)
OPEN_TPOT = (16.0, 25.0, 19.0, 24.0)
# About 1.11x with a spread of 1 %: not called at the first look's strict level, but a block or two
# more would settle it; OPEN_TPOT's spread would need many more.
NEAR_TPOT = (18.0, 18.3, 17.8, 18.1)


def _run(arm: Arm, block: int, tpot: float) -> Run:
    run = RunFactory(arm=arm, experiment=arm.experiment, concurrency=1, repetition=block, status=Run.Status.SUCCEEDED)
    RunSummaryFactory(run=run, output_throughput=1000 / tpot, request_throughput=100 / tpot, tpot_mean_ms=tpot)
    for index in range(4):
        RequestRecordFactory(
            run=run, prompt_index=index, ttft_ms=50.0, output_tokens=11, e2e_ms=50 + 10 * tpot, tpot_ms=tpot,
            server_decode_ms=10 * tpot, server_tpot_ms=tpot,
        )  # fmt: skip
    return run


def _experiment(*, blocks: int, max_blocks: int = 5, arms=("settled", "open"), **fields) -> Experiment:
    experiment = ExperimentFactory(
        concurrency_levels=[1], repetitions=max_blocks, status=Experiment.Status.RUNNING,
        started_at=timezone.now() - timedelta(minutes=30), **{"sequential": True} | fields,
    )  # fmt: skip
    baseline = ArmFactory(experiment=experiment, baseline=True, position=0)
    replicate = ArmFactory(experiment=experiment, baseline=True, position=1, label="replicate", is_replicate=True)
    calibration = ArmFactory(experiment=experiment, baseline=True, position=2, label="cal", is_calibration=True)
    made = {"baseline": baseline, "replicate": replicate, "cal": calibration}
    tpots = {"settled": SETTLED_TPOT, "open": OPEN_TPOT, "near": NEAR_TPOT}
    for position, label in enumerate(arms, start=3):
        made[label] = ArmFactory(experiment=experiment, position=position, label=label, method=Arm.Method.NGRAM)
    for block in range(1, blocks + 1):
        _run(baseline, block, BASELINE_TPOT)
        _run(replicate, block, BASELINE_TPOT)
        for label in arms:
            _run(made[label], block, tpots[label][block - 1])
    return experiment


def _step(experiment: Experiment) -> continuation.Step:
    decided = primary.primary_decisions(experiment, load_runs(experiment), final=False)
    return continuation.next_step(experiment, decided)


def test_a_block_is_added_for_the_controls_and_the_arms_still_open():
    experiment = _experiment(blocks=3)
    step = _step(experiment)

    assert (step.blocks_run, step.block, step.stop) == (3, 4, "")
    labels = set(experiment.arms.filter(id__in=step.arm_ids).values_list("label", flat=True))
    # The settled arm and the calibration arm sit the block out; the baseline and the replicate run.
    assert labels == {"baseline", "replicate", "open"}
    assert step.device_minutes == pytest.approx(30, abs=0.1)


def test_no_block_once_every_primary_cell_is_settled():
    assert _step(_experiment(blocks=3, arms=("settled",))).stop == continuation.SETTLED


def test_no_block_past_the_maximum_or_the_budget_or_in_a_fixed_design():
    assert _step(_experiment(blocks=3, max_blocks=3)).stop == continuation.MAXIMUM
    # 30 device-minutes for 3 blocks: the next would take about 10 more, past a budget of 35.
    assert _step(_experiment(blocks=3, max_device_minutes=35)).stop == continuation.BUDGET
    assert _step(_experiment(blocks=3, max_device_minutes=45)).block == 4
    assert _step(_experiment(blocks=3, sequential=False)).stop == continuation.FIXED


def test_the_worker_s_block_add_queues_the_drawn_block_once_the_runs_are_done():
    experiment = _experiment(blocks=3)
    last = experiment.runs.get(arm__label="open", repetition=3)
    Run.objects.filter(id=last.id).update(status=Run.Status.RUNNING)
    assert not lifecycle.experiment_block_add(experiment=experiment)  # a run is still under way
    Run.objects.filter(id=last.id).update(status=Run.Status.SUCCEEDED)

    assert lifecycle.experiment_block_add(experiment=experiment)
    added = experiment.runs.filter(repetition=4).order_by("block_position")
    assert {run.arm.label for run in added} == {"baseline", "replicate", "open"}
    assert sorted(run.block_position for run in added) == [1, 2, 3]
    assert all(run.status == Run.Status.QUEUED for run in added)
    # Asked again while block 4 is queued: nothing more.
    assert not lifecycle.experiment_block_add(experiment=experiment)


def test_a_cancelled_experiment_gets_no_block():
    experiment = _experiment(blocks=3)
    Experiment.objects.filter(id=experiment.id).update(status=Experiment.Status.CANCELLED)
    assert not lifecycle.experiment_block_add(experiment=experiment)
    assert not experiment.runs.filter(repetition=4).exists()


def test_a_budget_that_affords_one_arm_takes_the_one_closest_to_settling():
    # 30 device-minutes over 3 blocks of 4 servers: 2.5 a server. The next block needs 5 for the baseline and
    # the replicate and 2.5 per arm: 38 affords one of the two open arms, 41 both.
    experiment = _experiment(blocks=3, arms=("open", "near"), max_device_minutes=38)
    step = _step(experiment)
    near, far = (experiment.arms.get(label=label).id for label in ("near", "open"))
    assert step.block == 4
    assert near in step.arm_ids
    assert far not in step.arm_ids
    assert step.left_out == (far,)
    # With room for both, both run.
    Experiment.objects.filter(id=experiment.id).update(max_device_minutes=41)
    experiment.refresh_from_db()
    assert {near, far} <= _step(experiment).arm_ids
