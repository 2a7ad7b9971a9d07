"""Which worker executed a run: several workers share a host, so each run records the Celery
node name of the worker that claimed it, and the experiment page names it."""

import pytest
from django.urls import reverse

from experiments.definition import services as definition
from experiments.execution import dispatch
from experiments.execution import services as execution
from experiments.models import Experiment, Run
from experiments.results import selectors
from tests.factories import ArmFactory, ExperimentFactory, RunFactory, UserFactory, experiment_fields
from tests.workers.fakes import NGRAM
from workers import runner

pytestmark = pytest.mark.django_db


def test_a_claim_records_the_worker_and_a_requeue_forgets_it():
    run = RunFactory()
    assert execution.run_claim(run_id=run.id, worker_host="gpu-host-7", worker_name="h100-3@gpu-host-7")
    run.refresh_from_db()
    assert (run.worker_host, run.worker_name) == ("gpu-host-7", "h100-3@gpu-host-7")

    dispatch.runs_requeue(Run.objects.filter(id=run.id), reason="its worker died")
    run.refresh_from_db()
    assert (run.status, run.worker_host, run.worker_name) == (Run.Status.QUEUED, "", "")


def test_the_worker_executing_an_experiment_is_recorded_on_every_run(served, celery_dispatch):
    fields = experiment_fields(num_prompts=2, max_tokens=4, concurrency_levels=[1, 2], repetitions=2)
    experiment = definition.experiment_create(owner=UserFactory(), arms=[NGRAM], **fields)

    runner.experiment_run_all(experiment.id, worker_host="host-1", worker_name="pool-2@host-1")

    names = set(experiment.runs.values_list("status", "worker_host", "worker_name"))
    assert names == {(Run.Status.SUCCEEDED, "host-1", "pool-2@host-1")}
    assert selectors.experiment_workers(experiment=experiment) == ["pool-2@host-1"]


def test_runs_that_fail_before_a_server_starts_record_the_worker_too(served, celery_dispatch, monkeypatch):
    fields = experiment_fields(num_prompts=2, max_tokens=4, concurrency_levels=[1], repetitions=1)
    experiment = definition.experiment_create(owner=UserFactory(), arms=[NGRAM], **fields)
    monkeypatch.setattr(runner, "experiment_requests", _no_prompts)

    runner.experiment_run_all(experiment.id, worker_host="host-1", worker_name="cpu@host-1")

    assert set(experiment.runs.values_list("status", "worker_name")) == {(Run.Status.FAILED, "cpu@host-1")}


def _no_prompts(experiment):
    raise ValueError("the prompt set changed")


def _experiment_run_by(*workers: str) -> Experiment:
    experiment = ExperimentFactory(status=Experiment.Status.FINISHED)
    baseline = ArmFactory(experiment=experiment, baseline=True, position=0)
    for level, worker in enumerate(workers, start=1):
        RunFactory(
            arm=baseline, concurrency=level, status=Run.Status.SUCCEEDED, worker_host="host-1", worker_name=worker
        )
    return experiment


def test_the_page_names_the_one_worker_that_ran_the_experiment(logged_in_client):
    experiment = _experiment_run_by("h100-3@gpu-host-7", "h100-3@gpu-host-7")
    RunFactory(arm=experiment.arms.get(), concurrency=9, status=Run.Status.SUCCEEDED, worker_host="old-host")

    text = logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).text

    assert 'id="executed-by">Executed by worker <span class="mono">h100-3@gpu-host-7</span>' in text
    assert text.count('<td class="mono">h100-3@gpu-host-7</td>') == 2
    assert '<td class="mono">old-host</td>' in text  # recorded before worker names were: its host


def test_the_page_warns_when_an_experiment_was_taken_over_by_another_worker(logged_in_client):
    experiment = _experiment_run_by("cpu-1@a", "cpu-2@b")

    text = logged_in_client.get(reverse("experiments:progress", args=[experiment.pk])).text

    assert 'class="message warning" id="executed-by">Executed by 2 workers' in text
    assert "cpu-1@a, cpu-2@b" in text
