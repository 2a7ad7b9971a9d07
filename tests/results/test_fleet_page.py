"""The experiment page on a fleet (issue 38, experiments/results/fleet.py): which worker ran each
block, which workers took part, and which were passed over and why."""

import pytest
from django.urls import reverse

from experiments.execution import block_claims
from experiments.execution.hardware_class import HardwareClass
from experiments.models import Block
from tests.workers import fakes

pytestmark = pytest.mark.django_db


def _seat(name: str, hardware: dict, gpu_ids: str = "") -> block_claims.Seat:
    host = name.split("@")[1]
    return block_claims.Seat(name, host, gpu_ids, HardwareClass.of(hardware), f"{host}:1:{name}")


def test_the_page_says_which_worker_ran_each_block_and_who_was_passed_over_and_why(client, celery_dispatch):
    experiment = fakes.new_experiment(celery_dispatch)
    gpu = fakes.FAKE_HARDWARE | {"gpu_name": "NVIDIA L4", "gpu_count": 1, "gpu_driver": "570.1"}
    a, b = _seat("gpu0@host-a", gpu, "0"), _seat("gpu1@host-a", gpu, "1")
    block_claims.block_claim(experiment_id=experiment.id, seat=a)
    block_claims.block_claim(experiment_id=experiment.id, seat=b)
    other = _seat("gpu0@host-c", gpu | {"gpu_driver": "550.2"}, "0")
    assert block_claims.block_claim(experiment_id=experiment.id, seat=other).passed_over
    client.force_login(experiment.owner)

    page = client.get(reverse("experiments:detail", args=[experiment.id])).content.decode()

    assert 'id="executed-by">Executed by 2 workers (<span class="mono">gpu0@host-a, gpu1@host-a</span>)' in page
    assert 'id="fleet-blocks"' in page
    assert 'id="fleet-block-1" data-worker="gpu0@host-a"' in page
    assert 'id="fleet-block-2" data-worker="gpu1@host-a"' in page
    assert 'id="fleet-block-3" data-worker=""' in page
    assert "1 × NVIDIA L4, driver 570.1, vLLM 0.32.0, torch 2.13.0" in page
    assert "3 blocks on 2 workers, 1 host." in page
    assert 'id="fleet-passed-over"' in page
    assert "GPU driver 550.2 where the experiment&#x27;s is 570.1" in page
    # Not the one-worker page's warning that a worker stopped and another took over.
    assert "a worker stopped and another took the remaining runs over" not in page


def test_an_experiment_without_blocks_keeps_the_one_worker_sentence(client, celery_dispatch):
    experiment = fakes.stored_before_blocks(fakes.new_experiment(celery_dispatch))
    experiment.runs.update(worker_name="cpu@host-1")
    client.force_login(experiment.owner)

    page = client.get(reverse("experiments:detail", args=[experiment.id])).content.decode()

    assert not Block.objects.filter(experiment=experiment).exists()
    assert 'id="fleet-blocks"' not in page
    assert "Executed by worker" in page


def test_one_worker_of_a_fleet_is_named_as_the_one_that_executed_it(client, celery_dispatch):
    experiment = fakes.new_experiment(celery_dispatch)
    block_claims.block_claim(experiment_id=experiment.id, seat=_seat("cpu@host-1", fakes.FAKE_HARDWARE))
    client.force_login(experiment.owner)

    page = client.get(reverse("experiments:detail", args=[experiment.id])).content.decode()

    assert 'id="executed-by">Executed by worker <span class="mono">cpu@host-1</span>' in page
    assert 'id="fleet-passed-over"' not in page
