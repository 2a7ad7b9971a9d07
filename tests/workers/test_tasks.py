"""The Celery tasks as thin wrappers: the stale-run reaper re-dispatches to the right queue
and closes experiments with no work left. Celery's dispatch is replaced by a mock."""

from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from experiments.execution import dispatch as dispatch_module
from experiments.models import Experiment, Run
from tests.factories import ExperimentFactory, RunFactory, RunSummaryFactory
from workers import tasks

pytestmark = pytest.mark.django_db


@pytest.fixture
def dispatch():
    with mock.patch.object(dispatch_module, "task_send") as send:
        yield send


def _stale(experiment, **fields):
    old = timezone.now() - timedelta(hours=1)
    return RunFactory(
        arm__experiment=experiment, status=Run.Status.RUNNING, heartbeat_at=old, **{"attempts": 1} | fields
    )


def test_reaper_requeues_stale_runs_and_redispatches_on_each_experiments_queue(dispatch):
    gpu = ExperimentFactory(status=Experiment.Status.RUNNING, worker_queue="h100")
    cpu = ExperimentFactory(status=Experiment.Status.RUNNING, worker_queue="cpu")
    gpu_run, cpu_run = _stale(gpu), _stale(cpu)

    tasks.runs_reap_stale()

    assert {(c.kwargs["args"][0], c.kwargs["queue"]) for c in dispatch.call_args_list} == {
        (gpu.id, "h100"),
        (cpu.id, "cpu"),
    }
    gpu_run.refresh_from_db()
    cpu_run.refresh_from_db()
    assert (gpu_run.status, cpu_run.status) == (Run.Status.QUEUED, Run.Status.QUEUED)


def test_reaper_closes_running_experiments_with_no_work_left(dispatch):
    done = ExperimentFactory(status=Experiment.Status.RUNNING)
    RunSummaryFactory(run__arm__experiment=done)
    busy = ExperimentFactory(status=Experiment.Status.RUNNING)
    RunFactory(arm__experiment=busy, status=Run.Status.RUNNING, heartbeat_at=timezone.now())

    tasks.runs_reap_stale()

    done.refresh_from_db()
    busy.refresh_from_db()
    assert done.status == Experiment.Status.FINISHED
    assert busy.status == Experiment.Status.RUNNING
    dispatch.assert_not_called()


def test_reaper_fails_a_run_tried_too_often_and_then_closes_its_experiment(dispatch):
    experiment = ExperimentFactory(status=Experiment.Status.RUNNING)
    worn = _stale(experiment, attempts=3)

    tasks.runs_reap_stale()

    worn.refresh_from_db()
    experiment.refresh_from_db()
    assert worn.status == Run.Status.FAILED
    assert "gave up" in worn.error
    assert experiment.status == Experiment.Status.FAILED
    dispatch.assert_not_called()


def test_the_registered_task_names_stay_stable():
    # Queued messages and the beat schedule refer to these names.
    assert tasks.experiment_execute.name == "workers.tasks.experiment_execute"
    # The web side sends the experiment task by this name (it does not import workers).
    assert tasks.experiment_execute.name == dispatch_module.EXECUTE_TASK
    assert tasks.runs_reap_stale.name == "workers.tasks.runs_reap_stale"
