"""The experiment form's page round trip (experiments/definition/views.py): its defaults, a
submission that creates and redirects, a refusal that keeps what was typed."""

from unittest import mock

import pytest
from django.urls import reverse

from experiments.models import Experiment
from tests.factories import DRAFT_ARM_FORM, NGRAM_ARM_FORM, form_data

pytestmark = pytest.mark.django_db


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
    # One message per queued block (issue 38): each idle worker of the queue can claim one.
    assert celery_dispatch.call_args_list == [mock.call(args=[experiment.id], queue="cpu")] * experiment.blocks.count()


def test_a_refused_form_keeps_what_was_typed(logged_in_client):
    data = form_data(arms=[NGRAM_ARM_FORM, {**DRAFT_ARM_FORM, "model": "", "label": "my draft"}], name="keep me")

    response = logged_in_client.post(reverse("experiments:create"), data)

    assert 'value="keep me"' in response.text
    assert 'value="my draft"' in response.text
    assert 'name="arms-TOTAL_FORMS" value="2"' in response.text
