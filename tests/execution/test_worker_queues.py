"""Routing you can see: the queues with live workers, offered by the form with their hardware,
any other queue accepted with a warning, and an experiment page that says when no live worker
listens on its queue. The unit tests fake Celery's answer (tests/conftest.py, `live_workers`);
the last test asks the real worker process of the integration tests."""

import pytest
from celery import Celery
from django.core.cache import cache
from django.db import connection
from django.urls import reverse
from kombu.exceptions import OperationalError

from experiments.execution import worker_queues
from experiments.execution.worker_queues import LiveQueue, LiveQueues
from experiments.models import Experiment, Run
from experiments.results import selectors
from tests.api_helpers import token_client
from tests.factories import ArmFactory, ExperimentFactory, RunFactory, form_data

# The real broadcast, kept before `live_workers` replaces it for each test.
real_inspect_workers = worker_queues.inspect_workers

H100_NODE = {"host_name": "gpu-host-7", "cpu_model": "AMD EPYC 9654", "cpu_count": 192}
REPLIES = (
    {
        "h100-0@gpu-host-7": [{"name": "h100"}],
        "h100-1@gpu-host-7": [{"name": "h100"}],
        "cpu@web": [{"name": "cpu"}],
        "control@web": [{"name": "control"}],
        "old@host": [{"name": "l4"}],
    },
    {
        "h100-0@gpu-host-7": {**H100_NODE, "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1},
        "h100-1@gpu-host-7": {**H100_NODE, "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1},
        "cpu@web": {"host_name": "web", "cpu_model": "Intel Xeon", "cpu_count": 8, "gpu_name": "", "gpu_count": 0},
        "control@web": {"host_name": "web", "cpu_model": "Intel Xeon", "cpu_count": 8, "gpu_name": "", "gpu_count": 0},
        # A worker that does not know the hardware command answers with an error.
        "old@host": {"error": "No such command"},
    },
)
NOTICE_H100 = "No live worker listens on queue h100; the experiment waits until one joins."


# ---------------------------------------------------------------- what the replies say


def test_replies_are_grouped_by_queue_with_their_hardware_and_without_control():
    answer = worker_queues.queues_from_replies(*REPLIES)

    assert answer == LiveQueues(
        queues=(
            LiveQueue(name="cpu", workers=("cpu@web",), hardware=("CPU: Intel Xeon",), cpu_only=True),
            LiveQueue(
                name="h100", workers=("h100-0@gpu-host-7", "h100-1@gpu-host-7"), hardware=("1 × NVIDIA H100 80GB HBM3",)
            ),
            LiveQueue(name="l4", workers=("old@host",), hardware=()),
        )
    )
    assert [queue.label for queue in answer.queues] == [
        "1 worker, CPU: Intel Xeon",
        "2 workers, 1 × NVIDIA H100 80GB HBM3",
        "1 worker, hardware not reported",
    ]
    assert answer.listens("h100")
    assert not answer.listens("control")
    assert not answer.listens("a100")
    # CPU only: every worker said it has no GPU. A worker that did not say is not counted as CPU.
    assert [queue for queue in ("cpu", "h100", "l4", "a100") if answer.cpu_only(queue)] == ["cpu"]


def test_a_queue_with_one_gpu_worker_among_cpu_workers_is_not_cpu_only():
    queues, hardware = REPLIES
    queues = {**queues, "cpu-gpu@gpu-host-7": [{"name": "cpu"}]}
    hardware = {**hardware, "cpu-gpu@gpu-host-7": hardware["h100-0@gpu-host-7"]}

    assert not worker_queues.queues_from_replies(queues, hardware).cpu_only("cpu")


def test_the_answer_is_kept_a_few_seconds(live_workers, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("django.core.cache.backends.locmem.time.time", lambda: clock[0])

    worker_queues.live_queues()
    worker_queues.live_queues()
    assert live_workers.call_count == 1

    clock[0] += worker_queues.CACHE_S + 1
    worker_queues.live_queues()
    assert live_workers.call_count == 2


def test_redis_down_is_said_and_remembered_as_unknown(live_workers):
    live_workers.side_effect = OperationalError("Error 111 connecting to 127.0.0.1:63799. Connection refused.")

    assert worker_queues.live_queues() == LiveQueues(readable=False)
    assert worker_queues.no_worker_notice("h100") == (
        "Could not tell whether a worker listens on queue h100: Redis did not answer."
    )
    assert live_workers.call_count == 1  # the pages that follow do not wait for Redis again


def test_a_broker_that_refuses_connections_reads_as_unknown(monkeypatch):
    """The real broadcast, against a port where nothing listens."""
    # Not the current app: tasks sent after this test (shared tasks follow the current app)
    # must still go to the suite's broker.
    down = Celery("down", broker="redis://127.0.0.1:1/0", set_as_current=False)
    down.conf.broker_connection_timeout = 1.0
    monkeypatch.setattr(worker_queues, "app", down)
    monkeypatch.setattr(worker_queues, "inspect_workers", real_inspect_workers)

    assert worker_queues.live_queues() == LiveQueues(readable=False)


def test_no_reply_means_no_live_worker(live_workers):
    live_workers.return_value = ({}, {})

    assert worker_queues.live_queues() == LiveQueues()
    assert worker_queues.no_worker_notice("cpu") == (
        "No live worker listens on queue cpu; the experiment waits until one joins."
    )


# ---------------------------------------------------------------- the form


@pytest.mark.django_db
def test_the_form_offers_the_live_queues_with_their_hardware(logged_in_client, live_workers):
    live_workers.return_value = REPLIES

    text = logged_in_client.get(reverse("experiments:create")).text

    assert 'list="live-queues"' in text
    assert '<option value="h100" label="2 workers, 1 × NVIDIA H100 80GB HBM3"></option>' in text
    # Marked CPU-only, so that the form can warn an arm's synthetic sweep (experiment_form.js).
    assert '<option value="cpu" label="1 worker, CPU: Intel Xeon" data-cpu-only></option>' in text
    assert 'value="control"' not in text
    assert "Live workers:" in text


@pytest.mark.django_db
def test_the_form_says_when_the_live_queues_cannot_be_read(logged_in_client, live_workers):
    live_workers.side_effect = OperationalError("connection refused")

    response = logged_in_client.get(reverse("experiments:create"))

    assert response.status_code == 200
    assert "Could not read which queues have live workers: Redis did not answer." in response.text
    assert 'data-readable="false"' in response.text


@pytest.mark.django_db
def test_a_typed_queue_without_a_worker_is_accepted_and_its_page_says_so(
    logged_in_client, celery_dispatch, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = logged_in_client.post(reverse("experiments:create"), form_data(worker_queue="h100"), follow=True)

    experiment = Experiment.objects.get()
    assert experiment.worker_queue == "h100"
    # One message per queued block (issue 38), every one on the typed queue.
    assert {call.kwargs["queue"] for call in celery_dispatch.call_args_list} == {"h100"}
    assert celery_dispatch.call_count == experiment.blocks.count()
    assert NOTICE_H100 in response.text
    assert 'id="queue-notice"' in response.text


@pytest.mark.django_db
def test_a_queue_with_a_live_worker_gets_no_notice(logged_in_client):
    experiment = ExperimentFactory(worker_queue="cpu")

    text = logged_in_client.get(reverse("experiments:progress", args=[experiment.pk])).text

    assert 'id="queue-notice"' not in text


@pytest.mark.django_db
def test_the_control_queue_is_refused(logged_in_client):
    response = logged_in_client.post(reverse("experiments:create"), form_data(worker_queue="control"))

    assert response.status_code == 400
    assert "is the queue of the reaper and the dispatcher" in response.text
    assert not Experiment.objects.exists()


@pytest.mark.django_db
def test_a_rerun_on_the_control_queue_is_refused(logged_in_client):
    origin = ExperimentFactory()

    response = logged_in_client.post(
        reverse("experiments:rerun", args=[origin.pk]), {"name": "again", "worker_queue": "control"}
    )

    assert response.status_code == 400
    assert "is the queue of the reaper and the dispatcher" in response.text
    assert Experiment.objects.count() == 1


@pytest.mark.django_db
def test_the_api_submission_carries_the_notice(user, celery_dispatch):
    spec = {"name": "on h100", "worker_queue": "h100", "prompt_set": "chat", "concurrency_levels": [1], "arms": [{}]}

    response = token_client(user).post(reverse("api:experiments"), spec, content_type="application/json")

    assert response.status_code == 201, response.content
    assert response.json()["queue_notice"] == NOTICE_H100


# ---------------------------------------------------------------- the experiment page


@pytest.mark.django_db
@pytest.mark.parametrize("status", [Experiment.Status.QUEUED, Experiment.Status.RUNNING])
def test_a_waiting_experiment_says_no_worker_listens(logged_in_client, status):
    experiment = ExperimentFactory(worker_queue="h100", status=status)

    assert selectors.experiment_queue_notice(experiment=experiment) == NOTICE_H100
    assert NOTICE_H100 in logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).text


SWEEP_NOTICE_CPU = (
    "Every live worker on queue cpu computes on CPU, and vLLM's CPU build refuses synthetic acceptance: "
    "the synthetic sweep's runs will fail without starting a server unless a GPU worker joins the queue. "
    "The arms' own runs are not affected."
)


@pytest.mark.django_db
def test_a_synthetic_sweep_waiting_on_cpu_workers_only_is_told_it_will_fail(logged_in_client, live_workers):
    """workers/server/synthetic_acceptance.py: a CPU worker fails a sweep's runs unstarted."""
    live_workers.return_value = REPLIES  # queue cpu: one worker, no GPU
    experiment = ExperimentFactory(worker_queue="cpu", status=Experiment.Status.RUNNING)
    arm = ArmFactory(experiment=experiment, position=1, label="draft", method="draft_model")
    RunFactory(arm=arm, status=Run.Status.SUCCEEDED)  # the arm's own run
    assert selectors.experiment_queue_notice(experiment=experiment) is None

    sweep_run = RunFactory(arm=arm, synthetic_acceptance_length=2.0, status=Run.Status.QUEUED)

    assert selectors.experiment_queue_notice(experiment=experiment) == SWEEP_NOTICE_CPU
    progress = logged_in_client.get(reverse("experiments:progress", args=[experiment.pk])).text
    assert "vLLM&#x27;s CPU build refuses synthetic acceptance" in progress
    # A GPU worker joins the queue: the sweep can run there.
    queues, hardware = REPLIES
    live_workers.return_value = (
        {**queues, "gpu@gpu-host-7": [{"name": "cpu"}]},
        {**hardware, "gpu@gpu-host-7": hardware["h100-0@gpu-host-7"]},
    )
    cache.clear()
    assert selectors.experiment_queue_notice(experiment=experiment) is None
    # The sweep's runs are done (failed, as on a CPU worker): nothing more to say.
    live_workers.return_value = REPLIES
    cache.clear()
    Run.objects.filter(pk=sweep_run.pk).update(status=Run.Status.FAILED)
    assert selectors.experiment_queue_notice(experiment=experiment) is None


@pytest.mark.django_db
def test_an_ended_experiment_asks_nothing(live_workers):
    experiment = ExperimentFactory(worker_queue="h100", status=Experiment.Status.FINISHED)

    assert selectors.experiment_queue_notice(experiment=experiment) is None
    live_workers.assert_not_called()


# ---------------------------------------------------------------- the real worker


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_the_real_worker_is_seen_on_its_queue(celery_worker_process, monkeypatch):
    monkeypatch.setattr(worker_queues, "inspect_workers", real_inspect_workers)

    answer = worker_queues.live_queues()

    node = f"test-cpu-{connection.settings_dict['NAME']}@"
    cpu = next(queue for queue in answer.queues if queue.name == "cpu")
    assert any(worker.startswith(node) for worker in cpu.workers), cpu
    assert cpu.hardware[0].startswith("CPU: ")
    assert worker_queues.no_worker_notice("cpu") is None
    assert worker_queues.no_worker_notice("made-up-queue") == (
        "No live worker listens on queue made-up-queue; the experiment waits until one joins."
    )
