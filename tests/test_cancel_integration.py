"""Cancelling through the real parts: a Celery worker process running the demo target on a
real vLLM server. Cancelled in the middle of a run's load, the worker stops the load and
the server within seconds, keeps the run that completed, and starts nothing more."""

import subprocess
import time

import pytest
from django.conf import settings

from experiments import services
from experiments.models import Arm, EnvironmentSnapshot, Experiment, Run
from experiments.services import ArmSpec
from experiments.workloads import prompt_set_hash
from tests.factories import UserFactory

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TARGET = settings.SPECDASH_MODELS_DIR / "target"
STOP_WITHIN_S = 30
NGRAM_PARAMS = {"prompt_lookup_min": 2, "prompt_lookup_max": 4}


def _poll(condition, *, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise TimeoutError(f"{what}: not within {timeout_s} s")


def _processes() -> str:
    return subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(not (TARGET / "config.json").exists(), reason="demo models not built (./dev test builds them)")
def test_cancel_stops_the_load_and_the_server_and_keeps_the_completed_run(celery_worker_process):
    owner = UserFactory(username="canceller")
    experiment = services.experiment_create(
        owner=owner,
        arms=[ArmSpec(method=Arm.Method.NGRAM, num_speculative_tokens=3, params=NGRAM_PARAMS)],
        name="cancel me", target_model=str(TARGET), dtype="float32", max_model_len=512, prompt_set="code_edit",
        prompt_set_hash=prompt_set_hash("code_edit"), num_prompts=24, max_tokens=48, concurrency_levels=[1, 2],
        repetitions=1, warmup_requests=1,
        # Paced arrivals keep each run about 12 s long however fast the host decodes, so the
        # cancel lands while the second run is under way (unpaced, a fast host finished it
        # between the poll and the cancel).
        request_rate=2.0,
    )  # fmt: skip
    first, second, *later = experiment.runs.in_execution_order(server_per_block=True)
    assert first.arm_id == second.arm_id  # the first two runs share the first server

    # Wait until the first run is stored and the second, on the same server, is under way.
    _poll(
        lambda: Run.objects.filter(id=second.id, status=Run.Status.RUNNING, requests_done__gte=1).exists(),
        timeout_s=600,
        what="the second run under way",
    )
    command = " ".join(EnvironmentSnapshot.objects.get(run=first).server_command)
    assert command in _processes()

    started = time.monotonic()
    services.experiment_cancel(experiment=experiment, by=owner)
    _poll(lambda: command not in _processes(), timeout_s=STOP_WITHIN_S, what="the vLLM server stopped")
    stopped_after_s = time.monotonic() - started
    # Time enough for a worker that ignored the cancel to claim the next run and start its server.
    time.sleep(10)

    experiment.refresh_from_db()
    assert experiment.status == Experiment.Status.CANCELLED
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == Run.Status.SUCCEEDED
    assert first.requests.count() == experiment.num_prompts
    assert second.status == Run.Status.CANCELLED
    assert 1 <= second.requests_done < experiment.num_prompts
    assert not second.requests.exists()
    never_started = Run.objects.filter(id__in=[run.id for run in later])
    assert {(run.status, run.started_at) for run in never_started} == {(Run.Status.CANCELLED, None)}
    assert EnvironmentSnapshot.objects.filter(run__experiment=experiment).count() == 1
    print(f"vLLM server stopped {stopped_after_s:.1f} s after the cancel")
