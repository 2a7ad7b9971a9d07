"""An experiment on a fleet (issue 38) through the real parts: two Celery worker processes on one
queue, PostgreSQL, Redis and real vLLM CPU servers running the demo target.

One experiment of two blocks (the baseline and an n-gram arm, one level, a few short outputs):
four server starts, two on each worker. Each worker claims one block whole and runs both its arms
back to back on its own servers; the two blocks run at the same time; the stored rows (and the
page) say which worker ran which block. The two workers share this machine's two cores, so the
figures are not what the test is about (tests/integration/test_execution.py judges those).
"""

import time

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from experiments.definition import services as definition
from experiments.definition.services import ArmSpec
from experiments.models import Arm, Block, Experiment, FleetWorker, Run
from experiments.prompts.catalog import prompt_set_hash
from tests.factories import experiment_fields
from tests.worker_fixtures import celery_workers, wait_for_experiment

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


@pytest.mark.django_db(transaction=True)
def test_two_workers_on_one_queue_run_the_blocks_in_parallel_each_block_whole_on_one():
    owner = get_user_model().objects.create_user(username="fleet-owner", password="pw-for-tests")
    with celery_workers([(QUEUE, "fleet-a", None), (QUEUE, "fleet-b", None)]) as workers:
        started = time.monotonic()
        experiment = definition.experiment_create(owner=owner, arms=[NGRAM], **_fields())
        experiment = wait_for_experiment(experiment.id, timeout_s=600)
        print(f"\ntwo blocks on two workers: {time.monotonic() - started:.0f} s")

    assert experiment.status == Experiment.Status.FINISHED
    blocks = list(experiment.blocks.order_by("number"))
    assert [(block.status, block.attempts) for block in blocks] == [(Block.Status.DONE, 1)] * 2
    # One block on each worker, each whole: every run of a block on the worker that claimed it.
    assert sorted(block.worker_name for block in blocks) == sorted(worker.node for worker in workers)
    for block in blocks:
        runs = experiment.runs.filter(repetition=block.number)
        assert set(runs.values_list("worker_name", "status", "attempts")) == {
            (block.worker_name, Run.Status.SUCCEEDED, 1)
        }
        assert runs.count() == 2  # the baseline and the n-gram arm
        assert all(block.claimed_at <= run.started_at and run.finished_at <= block.finished_at for run in runs)
    # In parallel: each block was claimed before the other one completed.
    first, second = blocks
    assert first.claimed_at < second.finished_at
    assert second.claimed_at < first.finished_at
    assert sorted(block.look_order for block in blocks) == [1, 2]
    assert set(FleetWorker.objects.filter(experiment=experiment).values_list("worker_name", "took_part", "reason")) == {
        (worker.node, True, "") for worker in workers
    }

    client = Client()
    client.force_login(owner)
    page = client.get(reverse("experiments:detail", args=[experiment.id])).content.decode()
    for block in blocks:
        assert block.worker_name in page
