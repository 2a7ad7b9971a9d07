"""Cancelling a running experiment, worker side, with the fake server and load generator of
tests/workers/fakes.py: the load stops at the next progress report, the server stops, what
completed is kept, nothing more starts, and the experiment stays cancelled."""

from datetime import UTC, datetime

import pytest
from django.conf import settings

from experiments.definition import services as definition
from experiments.execution import services as execution
from experiments.measurement.engine.prom import SpecCounters
from experiments.models import Experiment, RequestRecord, Run
from tests.factories import UserFactory
from tests.workers import fakes
from workers import runner, sessions
from workers.measure.loadgen import LoadResult, RequestResult

pytestmark = pytest.mark.django_db

served = fakes.served  # the fake server and load generator, as a fixture here too


def _load_that_cancels(*, during_run: int, after_requests: int | None):
    """A load generator that reports progress request by request and cancels the experiment
    during its `during_run`-th load: after `after_requests` reports, or (None) just before
    it returns its results."""
    loads = []

    def run_load_sync(*, base_url, prompts, warmup, on_request_done, **kwargs) -> LoadResult:
        loads.append(on_request_done.run.id)
        experiment = on_request_done.run.experiment
        server = next(s for s in fakes.FakeServer.served.servers if s.base_url == base_url)
        assert server.running
        measured = range(warmup, len(prompts))
        for done, _ in enumerate(measured, start=1):
            if len(loads) == during_run and done == after_requests:
                execution.experiment_cancel(experiment=experiment, by=experiment.owner)
            on_request_done(done, len(measured))
        if len(loads) == during_run and after_requests is None:
            execution.experiment_cancel(experiment=experiment, by=experiment.owner)
        now = datetime.now(UTC)
        requests = [
            RequestResult(
                prompt_index=i, input_tokens=5, output_tokens=2, ttft_ms=10.0, e2e_ms=30.0, tpot_ms=20.0,
                chunk_times_ms=[10.0, 30.0], chunk_tokens=[1, 1], output_token_ids=[7, 8], finish_reason="length",
            )
            for i in measured
        ]  # fmt: skip
        return LoadResult(requests, 1.0, now, now, SpecCounters(0, 0, 0, []))

    return run_load_sync, loads


@pytest.fixture
def experiment(served, celery_dispatch, monkeypatch):
    monkeypatch.setattr(sessions, "HEARTBEAT_EVERY_S", 0.0)
    return definition.experiment_create(
        owner=UserFactory(username="owner"), arms=[fakes.NGRAM], name="to cancel",
        target_model=str(settings.SPECDASH_MODELS_DIR / "target"),
        prompt_set="chat", num_prompts=6, max_tokens=8, concurrency_levels=[1, 2], repetitions=2, warmup_requests=1,
    )  # fmt: skip


def _run(experiment):
    runner.experiment_run_all(experiment.id, worker_host="host-1", worker_name="cpu@host-1")
    experiment.refresh_from_db()
    return experiment


def test_a_cancel_during_a_load_stops_it_and_its_server_and_keeps_what_completed(served, experiment, monkeypatch):
    load, loads = _load_that_cancels(during_run=3, after_requests=2)
    monkeypatch.setattr(sessions, "run_load_sync", load)

    experiment = _run(experiment)

    assert experiment.status == Experiment.Status.CANCELLED
    statuses = [run.status for run in experiment.runs.in_execution_order(server_per_block=True)]
    assert statuses[:2] == [Run.Status.SUCCEEDED, Run.Status.SUCCEEDED]
    assert set(statuses[2:]) == {Run.Status.CANCELLED}
    stopped = Run.objects.get(id=loads[2])
    assert stopped.requests_done == 1  # the report after the cancel raised instead of recording
    assert not RequestRecord.objects.filter(run=stopped).exists()
    assert RequestRecord.objects.filter(run_id__in=loads[:2]).count() == 2 * experiment.num_prompts
    assert len(loads) == 3
    assert len(served.servers) == 2  # no server started after the cancel
    assert not any(server.running for server in served.servers)


def test_a_cancel_while_results_are_stored_rolls_them_back(served, experiment, monkeypatch):
    load, loads = _load_that_cancels(during_run=1, after_requests=None)
    monkeypatch.setattr(sessions, "run_load_sync", load)

    experiment = _run(experiment)

    assert experiment.status == Experiment.Status.CANCELLED
    assert set(experiment.runs.values_list("status", flat=True)) == {Run.Status.CANCELLED}
    assert not RequestRecord.objects.exists()
    assert len(loads) == len(served.servers) == 1
    assert not served.servers[0].running


def test_a_cancel_while_a_server_starts_stops_it_before_it_is_healthy(served, experiment, monkeypatch):
    # The second server is still starting (minutes on a GPU host) when the experiment is cancelled.
    entered = fakes.FakeServer.__enter__

    def cancel_during_start(server):
        if len(served.servers) == 2:
            execution.experiment_cancel(experiment=experiment, by=experiment.owner)
        return entered(server)

    monkeypatch.setattr(fakes.FakeServer, "__enter__", cancel_during_start)

    experiment = _run(experiment)

    assert experiment.status == Experiment.Status.CANCELLED
    assert len(served.servers) == 2
    assert not served.servers[1].running  # never became healthy, never ran a load
    assert not served.servers[1].loads
    statuses = [run.status for run in experiment.runs.in_execution_order(server_per_block=True)]
    assert statuses[:2] == [Run.Status.SUCCEEDED, Run.Status.SUCCEEDED]  # the first server's runs kept
    assert set(statuses[2:]) == {Run.Status.CANCELLED}


def test_a_cancelled_experiment_starts_nothing(served, experiment):
    execution.experiment_cancel(experiment=experiment, by=experiment.owner)

    experiment = _run(experiment)

    assert experiment.status == Experiment.Status.CANCELLED
    assert served.servers == []


def test_a_heartbeat_says_when_the_run_is_no_longer_running(experiment):
    run = experiment.runs.first()
    execution.run_claim(run_id=run.id, worker_host="h")

    assert execution.run_heartbeat(run_id=run.id, requests_done=1, requests_total=5) is True
    execution.experiment_cancel(experiment=experiment, by=experiment.owner)
    assert execution.run_heartbeat(run_id=run.id, requests_done=2, requests_total=5) is False
    run.refresh_from_db()
    assert (run.status, run.requests_done) == (Run.Status.CANCELLED, 1)
