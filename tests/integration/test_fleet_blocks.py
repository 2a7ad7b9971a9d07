"""An experiment on a fleet (issue 38) through the real parts: two Celery worker processes on one
queue, PostgreSQL, Redis and real vLLM CPU servers running the demo target.

One experiment of two blocks (the baseline and an n-gram arm, one level, a few short outputs).
Each worker claims one block whole and runs its arms back to back on its own servers; the two
blocks run at the same time. Worker a is killed (SIGKILL of its process group) once its block has
a run stored and one to go; the reaper (called here, its beat limit passed by ageing the block's
lease) queues that block again whole, and worker b runs all of it: every run of both blocks
measured once, on b, nothing stored twice. The stored rows and the page say which worker ran
which block. About six server starts: two on a (the second killed while it loads or serves),
four on b. The two workers share this machine's two cores, so the figures are not what the test
is about (tests/integration/test_execution.py judges those).
"""

import os
import signal
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from experiments.definition import services as definition
from experiments.definition.services import ArmSpec
from experiments.models import (
    Arm,
    Block,
    EnvironmentSnapshot,
    Experiment,
    FleetWorker,
    RequestRecord,
    Run,
    RunSummary,
)
from experiments.prompts.catalog import prompt_set_hash
from tests.factories import experiment_fields
from tests.worker_fixtures import WorkerProcess, celery_workers, wait_for_experiment
from workers import tasks
from workers.server.launch import server_pid_dir
from workers.server.orphans import stop_orphaned_servers

TARGET = settings.SPECDASH_MODELS_DIR / "target"
pytestmark = [
    pytest.mark.worker,
    pytest.mark.vllm,
    pytest.mark.skipif(not (TARGET / "config.json").exists(), reason="demo models not built (./dev test builds them)"),
]

QUEUE = "fleet"
NGRAM = ArmSpec(method=Arm.Method.NGRAM, num_speculative_tokens=2, params={"prompt_lookup_min": 2})


def _fields() -> dict:
    protocol = {
        "name": "two blocks on two workers", "worker_queue": QUEUE, "prompt_set": "code_edit",
        "prompt_set_hash": prompt_set_hash("code_edit"), "num_prompts": 3, "max_tokens": 8, "temperature": 0.0,
        "concurrency_levels": [1], "repetitions": 2, "warmup_requests": 1, "sequential": False,
        "aa_replicate": False, "server_per_block": True,
    }  # fmt: skip
    return experiment_fields(**protocol)


def _both_claimed_then_a_half_done(experiment: Experiment, a: WorkerProcess, timeout_s: float = 300) -> Block:
    """Wait until both blocks are claimed, by the two workers, and a's block has a run stored and
    another still to do; returns a's block."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        running = {block.worker_name: block for block in experiment.blocks.filter(status=Block.Status.RUNNING)}
        held = running.get(a.node)
        if len(running) == 2 and held is not None:
            runs = experiment.runs.filter(repetition=held.number)
            if runs.filter(status=Run.Status.SUCCEEDED).exists() and runs.open().exists():
                return held
        time.sleep(0.2)
    raise TimeoutError(f"worker a's block never got half done: {list(experiment.blocks.values())}")


def _kill(worker: WorkerProcess) -> None:
    os.killpg(worker.process.pid, signal.SIGKILL)
    worker.process.wait()
    stop_orphaned_servers(server_pid_dir(worker.node))


@pytest.mark.django_db(transaction=True)
def test_two_workers_run_the_blocks_in_parallel_each_whole_and_a_killed_workers_block_again_elsewhere():
    owner = get_user_model().objects.create_user(username="fleet-owner", password="pw-for-tests")
    with celery_workers([(QUEUE, "fleet-a", None), (QUEUE, "fleet-b", None)]) as (a, b):
        started = time.monotonic()
        experiment = definition.experiment_create(owner=owner, arms=[NGRAM], **_fields())
        lost = _both_claimed_then_a_half_done(experiment, a)  # both claimed at once: in parallel
        _kill(a)
        Block.objects.filter(id=lost.id).update(lease_at=timezone.now() - timedelta(hours=1))
        tasks.runs_reap_stale()
        experiment = wait_for_experiment(experiment.id, timeout_s=600)
        print(f"\ntwo blocks on two workers, one killed: {time.monotonic() - started:.0f} s")

    assert experiment.status == Experiment.Status.FINISHED
    blocks = list(experiment.blocks.order_by("number"))
    assert all(block.status == Block.Status.DONE for block in blocks)
    # Each block whole on one worker: the lost one measured again, every run of it, on b.
    assert {block.number: (block.worker_name, block.attempts) for block in blocks} == {
        block.number: (b.node, 2 if block.id == lost.id else 1) for block in blocks
    }
    assert (
        f"Attempt 1 on {a.node}: Its worker stopped beating. Queued again whole." in Block.objects.get(id=lost.id).error
    )
    runs = experiment.runs.all()
    assert runs.count() == 4  # two blocks of the baseline and the n-gram arm
    assert set(runs.values_list("worker_name", "status")) == {(b.node, Run.Status.SUCCEEDED)}
    # Nothing recorded twice: one summary and one row per measured prompt for every run.
    for run in runs:
        assert RunSummary.objects.filter(run=run).count() == 1
        assert EnvironmentSnapshot.objects.filter(run=run).count() == 1
        assert RequestRecord.objects.filter(run=run).count() == experiment.num_prompts
    assert sorted(block.look_order for block in blocks) == [1, 2]
    assert set(FleetWorker.objects.filter(experiment=experiment).values_list("worker_name", "took_part")) == {
        (a.node, True),
        (b.node, True),
    }

    client = Client()
    client.force_login(owner)
    page = client.get(reverse("experiments:detail", args=[experiment.id])).content.decode()
    assert f'id="fleet-block-{lost.number}" data-worker="{b.node}"' in page
    assert f"Attempt 1 on {a.node}" in page
