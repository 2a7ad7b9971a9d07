"""Device-minutes from the records (experiments/analysis/device_time.py): what an experiment has
used, and a worker queue's recorded costs."""

from datetime import timedelta

import pytest
from django.utils import timezone

from experiments.analysis import device_time
from experiments.measurement.planning.device_cost import Median
from experiments.models import Experiment, Run
from tests.factories import ArmFactory, ExperimentFactory, RunFactory

pytestmark = pytest.mark.django_db

T0 = timezone.now() - timedelta(hours=2)


def _run(experiment: Experiment, *, start: float | None, seconds: float | None, **fields) -> Run:
    """A run of `experiment` claimed `start` seconds after T0 and done `seconds` later."""
    started = None if start is None else T0 + timedelta(seconds=start)
    finished = None if started is None or seconds is None else started + timedelta(seconds=seconds)
    arm = ArmFactory(experiment=experiment)
    return RunFactory(arm=arm, experiment=experiment, started_at=started, finished_at=finished, **fields)


def test_spent_is_the_recorded_start_ups_and_runs_times_the_gpus_per_server():
    experiment = ExperimentFactory(tensor_parallel_size=2, started_at=T0)
    _run(experiment, start=0, seconds=100, status=Run.Status.SUCCEEDED, server_start_s=40.0)
    _run(experiment, start=100, seconds=60, status=Run.Status.FAILED)
    _run(experiment, start=None, seconds=None)  # queued: nothing yet

    spent = device_time.spent(experiment)

    assert (spent.recorded.start_s, spent.recorded.load_s) == (40.0, 160.0)
    assert (spent.recorded.starts, spent.recorded.runs) == (1, 2)
    assert (spent.recorded.start_minutes, spent.recorded.load_minutes) == pytest.approx((80 / 60, 320 / 60))
    assert not spent.wall_clock
    assert device_time.device_minutes(experiment) == pytest.approx(400 / 60)


def test_a_run_under_way_counts_to_now():
    experiment = ExperimentFactory(started_at=T0)
    _run(experiment, start=0, seconds=None, status=Run.Status.RUNNING, server_start_s=30.0)

    # Now is when it is asked, minutes after T0 was taken at import on a busy or parallel run.
    running_s = (timezone.now() - T0).total_seconds()
    assert device_time.spent(experiment).recorded.load_s == pytest.approx(running_s, abs=60)


def test_an_experiment_recorded_before_start_ups_were_is_counted_by_wall_clock_and_says_so():
    experiment = ExperimentFactory(tensor_parallel_size=4, started_at=T0, finished_at=T0 + timedelta(minutes=30))
    _run(experiment, start=60, seconds=300, status=Run.Status.SUCCEEDED)

    spent = device_time.spent(experiment)

    assert spent.wall_clock
    assert spent.minutes == pytest.approx(30 * 4)
    assert spent.recorded.load_minutes == pytest.approx(5 * 4)


def test_runs_that_never_had_a_server_are_no_sign_of_old_records():
    experiment = ExperimentFactory(started_at=T0)
    _run(experiment, start=10, seconds=0.5, status=Run.Status.FAILED)  # its server did not start

    spent = device_time.spent(experiment)

    assert not spent.wall_clock
    assert spent.minutes == pytest.approx(0.5 / 60)


def test_a_queue_without_records_states_its_bounds(settings):
    settings.SPECDASH_SERVER_START_TIMEOUT_S_BY_QUEUE = {"h100": 900.0}
    settings.SPECDASH_RUN_SECONDS_PER_TOKEN = 0.25

    costs = device_time.queue_costs("h100")

    assert (costs.start, costs.step) == (Median(900.0, 0), Median(0.25, 0))


def test_a_queues_start_up_is_the_median_of_its_latest_server_starts(monkeypatch):
    monkeypatch.setattr(device_time, "RECENT_STARTS", 3)
    cpu = ExperimentFactory(worker_queue="cpu")
    for start, seconds in ((0, 10.0), (100, 50.0), (200, 30.0), (300, 40.0)):
        _run(cpu, start=start, seconds=20, status=Run.Status.SUCCEEDED, server_start_s=seconds)
    _run(cpu, start=400, seconds=20, status=Run.Status.SUCCEEDED)  # not the first run of its server
    _run(ExperimentFactory(worker_queue="h100"), start=500, seconds=20, server_start_s=999.0)

    assert device_time.queue_costs("cpu").start == Median(40.0, 3)  # 50, 30, 40: the oldest is left out


def test_a_queues_run_time_is_the_median_seconds_per_token_step_of_its_succeeded_runs():
    # (2 warm-up + 8 measured) × 10 tokens at concurrency 2: 50 token steps.
    cpu = ExperimentFactory(worker_queue="cpu", warmup_requests=2, num_prompts=8, max_tokens=10)
    for seconds in (25.0, 20.0, 10.0):
        _run(cpu, start=0, seconds=seconds, concurrency=2, status=Run.Status.SUCCEEDED)
    _run(cpu, start=0, seconds=500.0, concurrency=2, status=Run.Status.FAILED)
    paced = ExperimentFactory(worker_queue="cpu", warmup_requests=2, num_prompts=8, max_tokens=10, request_rate=0.1)
    _run(paced, start=0, seconds=90.0, concurrency=2, status=Run.Status.SUCCEEDED)
    imported = ExperimentFactory(worker_queue="cpu", source=Experiment.Source.IMPORTED)
    _run(imported, start=0, seconds=900.0, concurrency=2, status=Run.Status.SUCCEEDED)

    assert device_time.queue_costs("cpu").step == Median(20.0 / 50, 3)
