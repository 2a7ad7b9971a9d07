"""Nothing stuck, lost or recorded twice, without Celery or vLLM:
submitting while Redis is down, the lease a worker process holds on its experiment, the
reaper taking work back from a dead process, per-run time limits, and results kept on the
worker's disk until PostgreSQL answers."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import IntegrityError, OperationalError
from django.urls import reverse
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError

from experiments.definition import services as definition
from experiments.definition.forms.experiment import ExperimentForm
from experiments.execution import dispatch, worker_queues
from experiments.execution import services as execution
from experiments.measurement.engine import capacity, prom, stream_fidelity
from experiments.measurement.engine.capacity import CapacityFigures
from experiments.measurement.engine.prom import SpecCounters
from experiments.measurement.planning import limits
from experiments.models import Experiment, RequestRecord, Run, RunSummary
from specdash.env import env_seconds_by_name
from tests.factories import (
    ExperimentFactory,
    RequestRecordFactory,
    RunFactory,
    UserFactory,
    experiment_fields,
    form_data,
)
from tests.workers.fakes import FakeServer, served  # noqa: F401 (a fixture)
from workers import runner, tasks
from workers.measure import loadgen
from workers.measure.loadgen import LoadResult, RequestResult
from workers.server.command import ServerLaunch
from workers.server.vllm_server import ServerStartError, VllmServer
from workers.storage import spool

pytestmark = pytest.mark.django_db

STALE = timedelta(seconds=30)


# ---------------------------------------------------------------- durable submission


def test_submitting_while_redis_is_down_saves_the_experiment_and_says_it_waits(logged_in_client, celery_dispatch):
    celery_dispatch.side_effect = BrokerError("Error 111 connecting to 127.0.0.1:63799. Connection refused.")

    response = logged_in_client.post(reverse("experiments:create"), form_data(), follow=True)

    assert response.status_code == 200
    experiment = Experiment.objects.get()
    assert experiment.status == Experiment.Status.QUEUED
    assert experiment.dispatched_at is None
    assert "waiting for the task queue" in response.text


def test_the_dispatcher_hands_waiting_experiments_over_once_redis_answers(celery_dispatch):
    waiting = ExperimentFactory(worker_queue="h100", dispatched_at=None)
    Experiment.objects.filter(id=waiting.id).update(created_at=timezone.now() - timedelta(minutes=1))
    dispatched = ExperimentFactory(dispatched_at=timezone.now())
    celery_dispatch.side_effect = BrokerError("down")

    tasks.experiments_dispatch_waiting()
    waiting.refresh_from_db()
    assert waiting.dispatched_at is None

    celery_dispatch.side_effect = None
    celery_dispatch.reset_mock()
    tasks.experiments_dispatch_waiting()

    celery_dispatch.assert_called_once_with(args=[waiting.id], queue="h100")
    waiting.refresh_from_db()
    assert waiting.dispatched_at is not None
    assert dispatched.id not in [c.kwargs["args"][0] for c in celery_dispatch.call_args_list]


def test_the_dispatcher_leaves_alone_an_experiment_being_dispatched_on_commit(celery_dispatch):
    ExperimentFactory(dispatched_at=None)

    tasks.experiments_dispatch_waiting()

    celery_dispatch.assert_not_called()


def test_the_reaper_and_the_dispatcher_run_on_the_control_queue(settings):
    assert settings.CELERY_TASK_ROUTES[tasks.runs_reap_stale.name] == {"queue": "control"}
    assert settings.CELERY_TASK_ROUTES[tasks.experiments_dispatch_waiting.name] == {"queue": "control"}
    assert all(entry["schedule"] <= 10 for entry in settings.CELERY_BEAT_SCHEDULE.values())


# ---------------------------------------------------------------- the lease and the reaper


def _take(experiment, owner):
    return dispatch.experiment_lease_take(experiment_id=experiment.id, owner=owner, stale_after=STALE)


def test_a_live_holder_keeps_its_experiment_from_a_redelivered_task():
    experiment = ExperimentFactory()

    assert _take(experiment, "host-a:1:cpu@a")
    assert not _take(experiment, "host-b:2:cpu@b")
    assert dispatch.experiment_lease_beat(experiment_id=experiment.id, owner="host-a:1:cpu@a")


def test_a_stale_lease_is_taken_and_its_old_holder_learns_it_lost_it():
    experiment = ExperimentFactory(lease_owner="host-a:1:cpu@a", lease_at=timezone.now() - timedelta(minutes=1))

    assert _take(experiment, "host-b:2:cpu@b")
    assert not dispatch.experiment_lease_beat(experiment_id=experiment.id, owner="host-a:1:cpu@a")


def test_a_holder_that_died_on_this_host_is_replaced_at_once():
    dead = subprocess.Popen(["true"])
    dead.wait()
    experiment = ExperimentFactory(lease_owner=f"host-a:{dead.pid}:cpu@a", lease_at=timezone.now())
    alive = ExperimentFactory(lease_owner=f"host-a:{os.getpid()}:cpu@a", lease_at=timezone.now())

    assert _take(experiment, "host-a:99:cpu@a")
    assert not _take(alive, "host-a:99:cpu@a")


def test_a_holder_is_judged_dead_at_once_only_by_its_own_worker():
    """Two workers can report one host name (containers started with the machine's hostname),
    each with process ids of its own: a process id missing here says nothing about another's."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    experiment = ExperimentFactory(lease_owner=f"gpu-host-7:{dead.pid}:h100-0@gpu-host-7", lease_at=timezone.now())

    assert not _take(experiment, "gpu-host-7:99:h100-1@gpu-host-7")
    assert _take(experiment, "gpu-host-7:99:h100-0@gpu-host-7")


def test_a_beat_keeps_the_holders_running_runs_fresh():
    experiment = ExperimentFactory(lease_owner="me", lease_at=timezone.now())
    run = RunFactory(arm__experiment=experiment, status=Run.Status.RUNNING, heartbeat_at=timezone.now() - STALE * 2)

    dispatch.experiment_lease_beat(experiment_id=experiment.id, owner="me")

    run.refresh_from_db()
    assert timezone.now() - run.heartbeat_at < timedelta(seconds=5)


def test_the_reaper_takes_back_an_experiment_whose_holder_stopped_beating(celery_dispatch):
    old = timezone.now() - timedelta(seconds=31)
    experiment = ExperimentFactory(
        status=Experiment.Status.RUNNING, worker_queue="h100", lease_owner="host-a:1:cpu@a", lease_at=old
    )
    run = RunFactory(arm__experiment=experiment, status=Run.Status.RUNNING, heartbeat_at=old, attempts=1)
    busy = ExperimentFactory(status=Experiment.Status.RUNNING, lease_owner="host-b:2:x", lease_at=timezone.now())
    RunFactory(arm__experiment=busy, status=Run.Status.RUNNING, heartbeat_at=timezone.now(), attempts=1)

    tasks.runs_reap_stale()

    run.refresh_from_db()
    experiment.refresh_from_db()
    assert run.status == Run.Status.QUEUED
    assert (experiment.lease_owner, experiment.lease_at) == ("", None)
    assert experiment.dispatched_at is not None
    celery_dispatch.assert_called_once_with(args=[experiment.id], queue="h100")


def test_a_run_left_running_by_a_dead_holder_is_given_up_after_three_attempts():
    experiment = ExperimentFactory(status=Experiment.Status.RUNNING)
    worn = RunFactory(arm__experiment=experiment, status=Run.Status.RUNNING, attempts=3)
    fresh = RunFactory(arm__experiment=experiment, status=Run.Status.RUNNING, attempts=1)

    dispatch.runs_take_back(experiment_id=experiment.id, reason="Its worker process died")

    worn.refresh_from_db()
    fresh.refresh_from_db()
    assert worn.status == Run.Status.FAILED
    assert worn.error == "Its worker process died (tried 3 times); gave up."
    assert fresh.status == Run.Status.QUEUED


# ---------------------------------------------------------------- time limits


def test_a_runs_time_limit_grows_with_its_size_and_shrinks_with_concurrency():
    size = limits.Size(warmup=2, prompts=16, max_tokens=48, request_rate=None)

    one = limits.run_time_limit_s(size, concurrency=1, seconds_per_token=0.25)
    four = limits.run_time_limit_s(size, concurrency=4, seconds_per_token=0.25)

    assert one == limits.RUN_BASE_S + 18 * 48 * 0.25
    assert four == limits.RUN_BASE_S + 5 * 48 * 0.25
    paced = limits.Size(warmup=2, prompts=16, max_tokens=48, request_rate=0.5)
    assert limits.run_time_limit_s(paced, concurrency=4, seconds_per_token=0.25) == four + 32


def test_an_experiment_longer_than_the_visibility_timeout_is_refused(settings):
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 2 * 3600}
    user = UserFactory()
    form = ExperimentForm(
        form_data(num_prompts="20", max_tokens="400", max_model_len="2048"), user=user, speculative_arms=1
    )

    assert not form.is_valid()
    assert "SPECDASH_VISIBILITY_TIMEOUT_S" in str(form.non_field_errors())
    assert ExperimentForm(form_data(), user=user, speculative_arms=1).is_valid()


# ---------------------------------------------------------------- durable results


def _record(run: Run, prompts: int = 3) -> spool.SpooledRun:
    now = datetime.now(UTC)
    requests = [
        RequestResult(
            prompt_index=index, input_tokens=5, output_tokens=2, ttft_ms=10.0, e2e_ms=30.0, tpot_ms=20.0,
            chunk_times_ms=[10.0, 30.0], chunk_tokens=[1, 1], output_token_ids=[7, 8], finish_reason="length",
        )
        for index in range(prompts)
    ]  # fmt: skip
    load = LoadResult(requests, 1.0, now, now, SpecCounters(0, 0, 0, []))
    return spool.SpooledRun(run.id, run.experiment_id, load, SpecCounters(0, 0, 0, []), {"host_name": "h"})


WORKER = "cpu-1@host-a"


@pytest.fixture
def spool_folder(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    return tmp_path / "spool" / WORKER


def test_a_run_is_stored_once_however_often_its_results_arrive(spool_folder):
    run = RunFactory(status=Run.Status.RUNNING)

    assert spool.spool_store(spool.spool_write(_record(run), worker_name=WORKER), wait_s=0)
    assert not spool.spool_store(spool.spool_write(_record(run), worker_name=WORKER), wait_s=0)

    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert RequestRecord.objects.filter(run=run).count() == 3
    assert RunSummary.objects.filter(run=run).count() == 1
    assert list(spool_folder.iterdir()) == []


@pytest.mark.parametrize("prom_was", ["workers.prom", "workers.measure.prom"])
def test_a_spool_file_written_before_the_worker_modules_moved_is_still_stored(spool_folder, monkeypatch, prom_was):
    """A worker upgraded with a run on its disk: the file names workers.loadgen, the /metrics
    parser's module of its time and workers.spool, as the worker before the move wrote it."""
    run = RunFactory(status=Run.Status.RUNNING)
    with monkeypatch.context() as before_the_move:
        for module, was in ((loadgen, "workers.loadgen"), (prom, prom_was), (spool, "workers.spool")):
            before_the_move.setitem(sys.modules, was, module)
            for value in vars(module).values():
                if isinstance(value, type) and value.__module__ == module.__name__:
                    before_the_move.setattr(value, "__module__", was)
        path = spool.spool_write(_record(run), worker_name=WORKER)
    assert b"workers.loadgen" in path.read_bytes()
    assert prom_was.encode() in path.read_bytes()
    assert "workers.loadgen" not in sys.modules

    assert spool.spool_store(path, wait_s=0)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert RequestRecord.objects.filter(run=run).count() == 3


def test_a_spool_file_written_before_measurement_moved_into_families_is_still_stored(spool_folder, monkeypatch):
    """The stream checks and capacity figures a spooled run holds were pickled under
    experiments.measurement.stream_fidelity and experiments.measurement.capacity."""
    run = RunFactory(status=Run.Status.RUNNING)
    record = _record(run)
    record = replace(record, load=replace(record.load, capacity=CapacityFigures(samples=2, kv_cache_peak=0.5)))
    old_names = (
        (stream_fidelity, "experiments.measurement.stream_fidelity"),
        (capacity, "experiments.measurement.capacity"),
    )
    with monkeypatch.context() as before_the_move:
        for module, was in old_names:
            before_the_move.setitem(sys.modules, was, module)
            for value in vars(module).values():
                if isinstance(value, type) and value.__module__ == module.__name__:
                    before_the_move.setattr(value, "__module__", was)
        path = spool.spool_write(record, worker_name=WORKER)
    assert b"experiments.measurement.stream_fidelity" in path.read_bytes()
    assert b"experiments.measurement.capacity" in path.read_bytes()

    assert spool.spool_read(path).load.capacity == CapacityFigures(samples=2, kv_cache_peak=0.5)
    assert spool.spool_store(path, wait_s=0)
    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED


def test_results_wait_on_disk_while_the_database_does_not_answer(spool_folder):
    run = RunFactory(status=Run.Status.RUNNING)
    path = spool.spool_write(_record(run), worker_name=WORKER)
    real = execution.run_record_result
    outage = [OperationalError("the database system is shutting down")] * 2

    def flaky(**kwargs):
        if outage:
            assert path.exists()  # on disk while PostgreSQL is away
            raise outage.pop()
        return real(**kwargs)

    # The connection is not closed here: it holds the test's transaction.
    with (
        mock.patch.object(execution, "run_record_result", side_effect=flaky),
        mock.patch.object(spool, "connection"),
        mock.patch.object(spool, "close_old_connections"),
        mock.patch.object(spool.time, "sleep") as sleep,
    ):
        assert spool.spool_store(path, wait_s=60)
    assert sleep.call_count == 2

    run.refresh_from_db()
    assert run.status == Run.Status.SUCCEEDED
    assert not path.exists()


def test_a_result_left_by_a_dead_worker_is_stored_by_the_next_task_even_if_the_run_was_queued_again(spool_folder):
    requeued = RunFactory(status=Run.Status.QUEUED, attempts=1)
    cancelled = RunFactory(status=Run.Status.CANCELLED)
    for run in (requeued, cancelled):
        spool.spool_write(_record(run), worker_name=WORKER)

    assert spool.spool_flush(worker_name=WORKER, wait_s=0) == [requeued.id]

    requeued.refresh_from_db()
    assert requeued.status == Run.Status.SUCCEEDED
    assert not RequestRecord.objects.filter(run=cancelled).exists()


def test_a_worker_leaves_alone_the_results_another_worker_on_its_data_folder_is_storing(spool_folder):
    """Two workers on one host may share a data folder. A live worker's file, taken by the other
    as it starts an experiment, would be stored under it while its own store then found the run
    taken and stopped the experiment as if cancelled."""
    run = RunFactory(status=Run.Status.RUNNING)
    path = spool.spool_write(_record(run), worker_name=WORKER)

    assert spool.spool_flush(worker_name="cpu-2@host-a", wait_s=0) == []
    assert spool.spool_store(path, wait_s=0)
    assert list(spool_folder.iterdir()) == []
    assert list(spool_folder.iterdir()) == []


def test_the_database_refuses_a_second_row_for_a_runs_prompt():
    row = RequestRecordFactory()

    with pytest.raises(IntegrityError):
        RequestRecordFactory(run=row.run, prompt_index=row.prompt_index)


# ---------------------------------------------------------------- a server that dies under a run


def test_a_server_that_dies_under_a_run_is_replaced_and_the_run_measured_again(served, celery_dispatch, monkeypatch):  # noqa: F811
    experiment = definition.experiment_create(
        owner=UserFactory(), arms=[], **experiment_fields(num_prompts=4, max_tokens=8, concurrency_levels=[1, 4],
                                                          repetitions=1, warmup_requests=1)
    )  # fmt: skip
    first = experiment.runs.in_execution_order(server_per_block=True).first()
    monkeypatch.setattr(FakeServer, "exit_code", lambda server: 9 if server is served.servers[0] else None)

    runner.experiment_run_all(experiment.id, worker_host="host-1", worker_name="cpu@host-1")

    experiment.refresh_from_db()
    first.refresh_from_db()
    assert experiment.status == Experiment.Status.FINISHED
    assert len(served.servers) == 2
    assert (first.status, first.attempts) == (Run.Status.SUCCEEDED, 2)
    assert served.servers[1].run_ids[0] == first.id
    assert RequestRecord.objects.filter(run=first).count() == 4


# ---------------------------------------------------------------- model paths, checked by the worker


def test_a_server_that_fails_to_start_says_when_its_model_is_not_on_this_host(tmp_path):
    draft = json.dumps({"method": "draft_model", "model": str(tmp_path / "no-draft")})
    args = [sys.executable, "-c", "raise SystemExit(1)", "--model", str(tmp_path / "no-target"),
            "--speculative-config", draft, "--port", "1"]  # fmt: skip

    server = VllmServer(ServerLaunch(args, log_path=tmp_path / "server.log", start_timeout_s=30))
    with pytest.raises(ServerStartError) as caught:
        server.__enter__()

    assert f"no model at {tmp_path / 'no-target'}, {tmp_path / 'no-draft'} on " in caught.value.message


def test_the_reaper_leaves_closing_to_the_live_holder_of_an_experiment(celery_dispatch):
    held = ExperimentFactory(status=Experiment.Status.RUNNING, lease_owner="host-a:1:cpu@a", lease_at=timezone.now())
    RunFactory(arm__experiment=held, status=Run.Status.SUCCEEDED)

    tasks.runs_reap_stale()

    held.refresh_from_db()
    assert held.status == Experiment.Status.RUNNING
    held.lease_owner = ""
    held.save(update_fields=["lease_owner"])
    tasks.runs_reap_stale()
    held.refresh_from_db()
    assert held.status == Experiment.Status.FINISHED


def test_a_queue_named_in_the_start_limits_gets_its_own_in_the_forms_time_limit(settings):
    """form_data's experiment fits the 2 h a worker may hold it with 300 s per server start;
    on a queue whose servers may take 30 min each to start (a GPU pool's real models) it does
    not, and the form says so before anything is queued."""
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 2 * 3600}
    settings.SPECDASH_SERVER_START_TIMEOUT_S_BY_QUEUE = {"h100": 1800.0}
    user = UserFactory()

    assert worker_queues.server_start_timeout_s("h100") == 1800.0
    assert worker_queues.server_start_timeout_s("cpu") == settings.SPECDASH_SERVER_START_TIMEOUT_S
    assert ExperimentForm(form_data(worker_queue="cpu"), user=user, speculative_arms=1).is_valid()
    on_h100 = ExperimentForm(form_data(worker_queue="h100"), user=user, speculative_arms=1)
    assert not on_h100.is_valid()
    assert "SPECDASH_VISIBILITY_TIMEOUT_S" in str(on_h100.non_field_errors())


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        (None, {}),
        ("", {}),
        ("h100=1800", {"h100": 1800.0}),
        (" h100 = 1800 , a100=900.5", {"h100": 1800.0, "a100": 900.5}),
    ],
)
def test_the_start_limits_by_queue_read_queue_equals_seconds(monkeypatch, raw, parsed):
    if raw is None:
        monkeypatch.delenv("SPECDASH_X", raising=False)
    else:
        monkeypatch.setenv("SPECDASH_X", raw)
    assert env_seconds_by_name("SPECDASH_X") == parsed


@pytest.mark.parametrize("raw", ["h100", "h100=", "=1800", "h100=soon", "h100=0", "h100=-5", "h100=1800,"])
def test_a_malformed_start_limit_stops_start_up_by_name(monkeypatch, raw):
    monkeypatch.setenv("SPECDASH_X", raw)
    with pytest.raises(ImproperlyConfigured, match="SPECDASH_X must read queue=seconds"):
        env_seconds_by_name("SPECDASH_X")
