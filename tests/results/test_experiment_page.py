"""The experiment page before its results (experiments/results/views.py): protocol, arms and runs,
the server settings every arm holds, and the progress partial that polls while runs are open."""

import pytest
from django.urls import reverse
from django.utils.html import escape

from experiments.models import Experiment, Run
from tests.factories import ArmFactory, RunFactory, UserFactory, experiment_with_arms

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def test_missing_experiment_is_404(logged_in_client):
    assert logged_in_client.get(reverse("experiments:detail", args=[999])).status_code == 404
    assert logged_in_client.get(reverse("experiments:progress", args=[999])).status_code == 404


def test_everyone_in_the_team_sees_every_experiment(logged_in_client):
    experiment = experiment_with_arms(owner=UserFactory(username="carol"))

    assert logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).status_code == 200


def test_detail_shows_protocol_arms_and_runs(logged_in_client):
    experiment = experiment_with_arms(
        workload_kind=Experiment.WorkloadKind.SYNTHETIC, prompt_set="", synthetic_input_len=100, ignore_eos=True
    )
    draft = ArmFactory(
        experiment=experiment, position=2, label="draft k=3", method="draft_model",
        num_speculative_tokens=3, params={"model": "/models/draft"},
    )  # fmt: skip
    RunFactory(
        arm=draft, concurrency=4, status=Run.Status.RUNNING, worker_host="gpu-7", requests_done=3, requests_total=8
    )
    RunFactory(arm=draft, concurrency=16, status=Run.Status.FAILED, error="CUDA out of memory\n  at step 3")

    response = logged_in_client.get(reverse("experiments:detail", args=[experiment.pk]))

    text = response.text
    config = '{"method": "draft_model", "num_speculative_tokens": 3, "model": "/models/draft"}'
    assert escape(config) in text
    assert "Synthetic random-word prompts" in text
    assert "ignore_eos is on" in text
    assert "gpu-7" in text
    assert "3/8" in text
    assert "<pre>CUDA out of memory\n  at step 3</pre>" in text
    assert 'hx-trigger="every 2s"' in text
    assert reverse("experiments:progress", args=[experiment.pk]) in text


def _server_settings_shown(client, experiment) -> str:
    text = client.get(reverse("experiments:detail", args=[experiment.pk])).text
    return text.split('id="protocol-server-settings">')[1].split("</dd>")[0]


def test_the_protocol_card_lists_the_server_settings_held_for_every_arm(logged_in_client):
    plain = experiment_with_arms()
    tuned = experiment_with_arms(max_num_seqs=8, gpu_memory_utilization=0.9, kv_cache_dtype="fp8")

    assert _server_settings_shown(logged_in_client, plain).startswith("vLLM's defaults")
    shown = _server_settings_shown(logged_in_client, tuned)
    assert "GPU memory utilization 0.9 <code>--gpu-memory-utilization</code>" in shown
    assert "Max sequences per step 8 <code>--max-num-seqs</code>" in shown
    assert "KV cache dtype fp8 <code>--kv-cache-dtype</code>" in shown
    assert "the same for the baseline and every arm" in shown


def test_detail_of_a_finished_experiment_does_not_poll(logged_in_client):
    experiment = experiment_with_arms(status=Experiment.Status.FINISHED)

    response = logged_in_client.get(reverse("experiments:detail", args=[experiment.pk]))

    assert "hx-trigger" not in response.text
    assert experiment.prompt_set_hash in response.text


def test_progress_partial_polls_while_running(logged_in_client):
    experiment = experiment_with_arms(status=Experiment.Status.RUNNING)
    RunFactory(arm=experiment.arms.last(), status=Run.Status.SUCCEEDED)
    RunFactory(arm=experiment.arms.last(), status=Run.Status.QUEUED)

    response = logged_in_client.get(reverse("experiments:progress", args=[experiment.pk]), headers=HTMX)

    assert response.status_code == 200
    assert "<html" not in response.text
    assert 'hx-trigger="every 2s"' in response.text
    assert "1 of 2 runs done" in response.text
    assert "HX-Refresh" not in response.headers


def test_progress_partial_stops_polling_when_finished(logged_in_client):
    experiment = experiment_with_arms(status=Experiment.Status.FINISHED)

    response = logged_in_client.get(reverse("experiments:progress", args=[experiment.pk]), headers=HTMX)

    assert "hx-trigger" not in response.text
    assert response.headers["HX-Refresh"] == "true"
