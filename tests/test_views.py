"""The pages: login, history with filters and pages, the form's round trip, the experiment
page and its progress partial."""

import re

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from experiments.models import Experiment, Run
from tests.factories import (
    DRAFT_ARM_FORM,
    NGRAM_ARM_FORM,
    PASSWORD,
    ArmFactory,
    ExperimentFactory,
    RequestRecordFactory,
    RunFactory,
    RunSummaryFactory,
    UserFactory,
    form_data,
)

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


def _experiment_with_arms(**fields) -> Experiment:
    experiment = ExperimentFactory(**fields)
    ArmFactory(experiment=experiment, baseline=True, position=0)
    ArmFactory(experiment=experiment, position=1, label="n-gram k=4")
    return experiment


# ---------------------------------------------------------------- access


@pytest.mark.parametrize(("name", "args"), [("list", []), ("create", []), ("detail", [1]), ("progress", [1])])
def test_pages_need_a_login(client, name, args):
    url = reverse(f"experiments:{name}", args=args)

    response = client.get(url)

    assert response.status_code == 302
    assert response.url == f"{reverse('login')}?next={url}"


def test_an_htmx_poll_without_a_session_sends_the_whole_page_to_login(client):
    url = reverse("experiments:progress", args=[1])

    response = client.get(url, headers=HTMX)

    assert response.status_code == 204
    assert response.headers["HX-Redirect"] == f"{reverse('login')}?next={url}"


def test_login_page_and_logging_in(client):
    UserFactory(username="bob")

    assert client.get(reverse("login")).status_code == 200
    response = client.post(reverse("login"), {"username": "bob", "password": PASSWORD})

    assert response.status_code == 302
    assert response.url == reverse("experiments:list")


def test_login_refuses_a_wrong_password(client):
    UserFactory(username="bob")

    response = client.post(reverse("login"), {"username": "bob", "password": "wrong"})

    assert response.status_code == 200
    assert "_auth_user_id" not in client.session


def test_logout_is_a_post(logged_in_client):
    page = logged_in_client.get(reverse("experiments:list"))
    assert re.search(r'<form[^>]*method="post"[^>]*action="/logout/"', page.text)

    response = logged_in_client.post(reverse("logout"))

    assert response.status_code == 302
    assert "_auth_user_id" not in logged_in_client.session


def test_csrf_is_enforced(user, celery_dispatch):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)

    refused = client.post(reverse("experiments:create"), form_data())
    assert refused.status_code == 403

    page = client.get(reverse("experiments:create"))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    accepted = client.post(reverse("experiments:create"), {**form_data(), "csrfmiddlewaretoken": token})
    assert accepted.status_code == 302
    assert Experiment.objects.count() == 1


def test_missing_experiment_is_404(logged_in_client):
    assert logged_in_client.get(reverse("experiments:detail", args=[999])).status_code == 404
    assert logged_in_client.get(reverse("experiments:progress", args=[999])).status_code == 404


def test_everyone_in_the_team_sees_every_experiment(logged_in_client):
    experiment = _experiment_with_arms(owner=UserFactory(username="carol"))

    assert logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).status_code == 200


# ---------------------------------------------------------------- the form


def test_form_page_shows_defaults_and_the_baseline(logged_in_client, settings):
    response = logged_in_client.get(reverse("experiments:create"))

    assert response.status_code == 200
    text = response.text
    assert f'value="{settings.SPECDASH_MODELS_DIR / "target"}"' in text
    assert 'name="worker_queue" value="cpu"' in text
    assert "Baseline" in text
    assert 'name="arms-TOTAL_FORMS" value="1"' in text
    assert 'id="arm-template"' in text
    assert "arms-__prefix__-method" in text


def test_submitting_creates_and_redirects_with_a_message(
    logged_in_client, user, celery_dispatch, django_capture_on_commit_callbacks
):
    data = form_data(arms=[NGRAM_ARM_FORM, DRAFT_ARM_FORM])
    with django_capture_on_commit_callbacks(execute=True):
        response = logged_in_client.post(reverse("experiments:create"), data, follow=True)

    experiment = Experiment.objects.get()
    assert response.redirect_chain == [(reverse("experiments:detail", args=[experiment.pk]), 302)]
    assert experiment.owner == user
    assert experiment.arms.count() == 3
    assert "is queued" in response.text
    celery_dispatch.assert_called_once_with(args=[experiment.id], queue="cpu")


def test_a_refused_form_keeps_what_was_typed(logged_in_client):
    data = form_data(arms=[NGRAM_ARM_FORM, {**DRAFT_ARM_FORM, "model": "", "label": "my draft"}], name="keep me")

    response = logged_in_client.post(reverse("experiments:create"), data)

    assert 'value="keep me"' in response.text
    assert 'value="my draft"' in response.text
    assert 'name="arms-TOTAL_FORMS" value="2"' in response.text


# ---------------------------------------------------------------- experiment page


def test_detail_shows_protocol_arms_and_runs(logged_in_client):
    experiment = _experiment_with_arms(
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
    plain = _experiment_with_arms()
    tuned = _experiment_with_arms(max_num_seqs=8, gpu_memory_utilization=0.9, kv_cache_dtype="fp8")

    assert _server_settings_shown(logged_in_client, plain).startswith("vLLM's defaults")
    shown = _server_settings_shown(logged_in_client, tuned)
    assert "GPU memory utilization 0.9 <code>--gpu-memory-utilization</code>" in shown
    assert "Max sequences per step 8 <code>--max-num-seqs</code>" in shown
    assert "KV cache dtype fp8 <code>--kv-cache-dtype</code>" in shown
    assert "the same for the baseline and every arm" in shown


def test_detail_of_a_finished_experiment_does_not_poll(logged_in_client):
    experiment = _experiment_with_arms(status=Experiment.Status.FINISHED)

    response = logged_in_client.get(reverse("experiments:detail", args=[experiment.pk]))

    assert "hx-trigger" not in response.text
    assert experiment.prompt_set_hash in response.text


def test_progress_partial_polls_while_running(logged_in_client):
    experiment = _experiment_with_arms(status=Experiment.Status.RUNNING)
    RunFactory(arm=experiment.arms.last(), status=Run.Status.SUCCEEDED)
    RunFactory(arm=experiment.arms.last(), status=Run.Status.QUEUED)

    response = logged_in_client.get(reverse("experiments:progress", args=[experiment.pk]), headers=HTMX)

    assert response.status_code == 200
    assert "<html" not in response.text
    assert 'hx-trigger="every 2s"' in response.text
    assert "1 of 2 runs done" in response.text
    assert "HX-Refresh" not in response.headers


def test_progress_partial_stops_polling_when_finished(logged_in_client):
    experiment = _experiment_with_arms(status=Experiment.Status.FINISHED)

    response = logged_in_client.get(reverse("experiments:progress", args=[experiment.pk]), headers=HTMX)

    assert "hx-trigger" not in response.text
    assert response.headers["HX-Refresh"] == "true"


# ---------------------------------------------------------------- admin


ADMIN_MODELS = [
    "experiment", "arm", "run", "runsummary", "requestrecord", "environmentsnapshot", "speedupestimate",
    "experimentanalysis",
]  # fmt: skip


@pytest.mark.parametrize("model", ADMIN_MODELS)
def test_admin_lists_the_tables_read_mostly(client, model):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    RunSummaryFactory()
    RequestRecordFactory()

    assert client.get(reverse(f"admin:experiments_{model}_changelist")).status_code == 200
    assert client.get(reverse(f"admin:experiments_{model}_add")).status_code == 403


def test_admin_may_rename_an_experiment_but_not_change_its_protocol(client):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    experiment = _experiment_with_arms(name="old name")

    page = client.get(reverse("admin:experiments_experiment_change", args=[experiment.pk]))

    assert 'name="name"' in page.text
    assert 'name="target_model"' not in page.text
    assert 'name="concurrency_levels"' not in page.text
