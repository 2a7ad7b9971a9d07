from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from experiments import lifecycle
from experiments.definition import services as definition
from experiments.definition.services import ArmSpec
from experiments.execution import services as execution
from experiments.models import Arm, Experiment, IllegalTransition, Run
from tests.factories import ExperimentFactory, RunFactory, UserFactory, experiment_fields

pytestmark = pytest.mark.django_db


def test_experiment_create_makes_baseline_arms_and_every_run_then_dispatches_on_commit(
    django_capture_on_commit_callbacks, celery_dispatch
):
    owner = UserFactory()
    with django_capture_on_commit_callbacks(execute=True):
        experiment = definition.experiment_create(
            owner=owner,
            arms=[ArmSpec(method=Arm.Method.NGRAM, num_speculative_tokens=4, params={"prompt_lookup_max": 3})],
            **experiment_fields(worker_queue="h100", concurrency_levels=[1, 4], repetitions=2),
        )
    arms = list(experiment.arms.all())
    assert [a.method for a in arms] == [Arm.Method.BASELINE, Arm.Method.NGRAM]
    assert [a.label for a in arms] == ["baseline", "n-gram lookup k=4"]
    assert experiment.runs.count() == 2 * 2 * 2
    assert set(experiment.runs.values_list("status", flat=True)) == {Run.Status.QUEUED}
    # Each block is the unit of dispatch (issue 38): one message per queued block, so that every
    # idle worker of the queue can claim one.
    assert list(experiment.blocks.values_list("number", "status")) == [(1, "queued"), (2, "queued")]
    assert celery_dispatch.call_args_list == [mock.call(args=[experiment.id], queue="h100")] * 2


def test_speculative_config_carries_method_k_and_params():
    arm = Arm(method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=3, params={"model": "/m/draft"})
    assert arm.speculative_config() == {"method": "draft_model", "num_speculative_tokens": 3, "model": "/m/draft"}
    assert Arm(method=Arm.Method.BASELINE).speculative_config() is None


def test_run_claim_is_taken_once():
    run = RunFactory()
    assert execution.run_claim(run_id=run.id, worker_host="a") is True
    assert execution.run_claim(run_id=run.id, worker_host="b") is False
    run.refresh_from_db()
    assert (run.status, run.worker_host, run.attempts) == (Run.Status.RUNNING, "a", 1)


def test_a_claim_records_the_server_start_up_only_when_it_takes_the_run():
    run, other = RunFactory(), RunFactory()
    assert execution.run_claim(run_id=run.id, worker_host="a", server_start_s=31.5) is True
    assert execution.run_claim(run_id=run.id, worker_host="b", server_start_s=99.0) is False
    assert execution.run_claim(run_id=other.id, worker_host="a") is True
    run.refresh_from_db()
    other.refresh_from_db()
    assert (run.server_start_s, other.server_start_s) == (31.5, None)


def test_illegal_run_transition_raises_and_changes_nothing():
    run = RunFactory(status=Run.Status.SUCCEEDED)
    with pytest.raises(IllegalTransition):
        execution.run_mark_failed(run_id=run.id, error="late")
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert run.error == ""


def test_experiment_cannot_finish_with_runs_left():
    run = RunFactory()
    experiment = run.experiment
    experiment.status = Experiment.Status.RUNNING
    with pytest.raises(IllegalTransition):
        lifecycle.experiment_finish(experiment=experiment)


def test_experiment_with_only_failed_runs_ends_failed():
    run = RunFactory(status=Run.Status.FAILED)
    experiment = run.experiment
    execution.experiment_mark_running(experiment=experiment)
    assert lifecycle.experiment_finish(experiment=experiment) == Experiment.Status.FAILED


def test_stale_runs_are_requeued_then_failed_after_max_attempts():
    old = timezone.now() - timedelta(minutes=30)
    fresh = RunFactory(status=Run.Status.RUNNING, heartbeat_at=timezone.now(), attempts=1)
    stale = RunFactory(status=Run.Status.RUNNING, heartbeat_at=old, attempts=1, requests_done=5)
    worn = RunFactory(status=Run.Status.RUNNING, heartbeat_at=old, attempts=3)

    experiment_ids = execution.runs_requeue_stale(stale_after=timedelta(minutes=5), max_attempts=3)

    assert experiment_ids == [stale.experiment_id]
    for run in (fresh, stale, worn):
        run.refresh_from_db()
    assert fresh.status == Run.Status.RUNNING
    assert (stale.status, stale.requests_done, stale.heartbeat_at) == (Run.Status.QUEUED, 0, None)
    assert worn.status == Run.Status.FAILED
    assert "gave up" in worn.error


def test_experiments_without_work_lists_running_experiments_with_nothing_left():
    done = ExperimentFactory(status=Experiment.Status.RUNNING)
    RunFactory(experiment=done, arm__experiment=done, status=Run.Status.FAILED)
    busy = ExperimentFactory(status=Experiment.Status.RUNNING)
    RunFactory(experiment=busy, arm__experiment=busy, status=Run.Status.QUEUED)
    assert execution.experiments_without_work() == [done]


def test_a_failing_analysis_still_closes_the_finished_experiment(monkeypatch):
    run = RunFactory(status=Run.Status.SUCCEEDED)
    experiment = run.experiment
    execution.experiment_mark_running(experiment=experiment)

    def broken(**kwargs):
        raise ValueError("bad data")

    monkeypatch.setattr(lifecycle, "experiment_analyse", broken)
    assert lifecycle.experiment_finish(experiment=experiment) == Experiment.Status.FINISHED
    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.FINISHED


def test_create_adds_a_calibration_arm_per_draft_model(user, celery_dispatch):
    draft = {"model": "/models/draft"}
    experiment = definition.experiment_create(
        owner=user,
        arms=[
            ArmSpec(method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=2, params=draft),
            ArmSpec(method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=4, params=draft),
            ArmSpec(
                method=Arm.Method.DRAFT_MODEL,
                num_speculative_tokens=4,
                params={"model": "/models/other/"},
                label="other",
            ),
            ArmSpec(method=Arm.Method.NGRAM, num_speculative_tokens=2),
        ],
        **experiment_fields(repetitions=2, concurrency_levels=[1, 4], draft_calibration=True),
    )

    # Arms that share a draft share its calibration; the n-gram arm has no draft model to serve.
    calibrations = list(experiment.arms.filter(is_calibration=True).order_by("position"))
    assert [(a.label, a.method, a.params, a.num_speculative_tokens) for a in calibrations] == [
        ("calibration: draft model alone (draft)", "baseline", draft, None),
        ("calibration: draft model alone (other)", "baseline", {"model": "/models/other/"}, None),
    ]
    assert not any(a.is_baseline or a.is_speculative for a in calibrations)
    # Each is an arm of the randomised blocks: a run per block and level.
    assert experiment.runs.filter(arm__is_calibration=True).count() == 2 * 2 * 2
    assert experiment.runs.count() == 7 * 2 * 2


def test_no_calibration_arm_without_the_setting(user, celery_dispatch):
    experiment = definition.experiment_create(
        owner=user,
        arms=[ArmSpec(method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=2, params={"model": "/models/draft"})],
        **experiment_fields(),
    )
    assert not experiment.arms.filter(is_calibration=True).exists()


def test_create_adds_the_replicate_and_stores_the_block_schedule(user, celery_dispatch):
    from experiments.measurement.planning.schedule import block_orders

    experiment = definition.experiment_create(
        owner=user,
        arms=[ArmSpec(method=Arm.Method.NGRAM, num_speculative_tokens=2)],
        **experiment_fields(repetitions=3, aa_replicate=True, concurrency_levels=[1, 4], seed=5),
    )

    arms = list(experiment.arms.order_by("position"))
    assert [(a.label, a.method, a.is_replicate) for a in arms] == [
        ("baseline", "baseline", False),
        ("baseline replicate (A/A)", "baseline", True),
        ("n-gram lookup k=2", "ngram", False),
    ]
    assert [a.is_baseline for a in arms] == [True, False, False]
    for block, (arm_order, level_order) in enumerate(block_orders(n_arms=3, levels=[1, 4], blocks=3, seed=5), 1):
        runs = experiment.runs.filter(repetition=block)
        for run in runs:
            assert run.block_position == arm_order.index(run.arm.position) + 1
            assert run.level_position == level_order.index(run.concurrency) + 1
    assert experiment.runs.count() == 3 * 2 * 3
