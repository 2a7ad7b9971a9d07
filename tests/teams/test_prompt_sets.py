"""Prompt sets are seen, versioned and used by their team only."""

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from experiments.models import Experiment, UploadedPromptSet
from tests.factories import form_data
from tests.teams.helpers import client_of, jsonl, member, prompt_set

pytestmark = pytest.mark.django_db


def test_prompt_sets_are_seen_by_their_team_only(carol, bob, alice, red):
    uploaded = prompt_set(alice)
    assert uploaded.team == red

    assert "red-traffic" in client_of(carol).get(reverse("experiments:prompt_sets")).content.decode()
    assert "red-traffic" not in client_of(bob).get(reverse("experiments:prompt_sets")).content.decode()
    assert client_of(carol).get(reverse("experiments:prompt_set", args=[uploaded.pk])).status_code == 200
    assert client_of(bob).get(reverse("experiments:prompt_set", args=[uploaded.pk])).status_code == 404


def test_each_team_versions_its_own_sets(alice, bob):
    assert (prompt_set(alice, name="traffic").version, prompt_set(bob, name="traffic").version) == (1, 1)


def test_the_form_names_the_team_of_each_set_for_a_member_of_two(red, blue, alice, bob):
    both = member("dana", red, blue)
    red_set, blue_set = prompt_set(alice, name="traffic"), prompt_set(bob, name="traffic")

    page = client_of(both).get(reverse("experiments:create")).content.decode()
    assert f'<option value="{red_set.pk}">traffic v1 (red)</option>' in page
    assert f'<option value="{blue_set.pk}">traffic v1 (blue)</option>' in page
    # One team's member has no two sets to tell apart.
    assert (
        f'<option value="{red_set.pk}">traffic v1</option>'
        in client_of(alice).get(reverse("experiments:create")).content.decode()
    )


def test_the_upload_page_stores_in_the_uploaders_team(bob, blue):
    upload = SimpleUploadedFile("t.jsonl", jsonl())

    response = client_of(bob).post(reverse("experiments:prompt_sets"), {"name": "blue-set", "file": upload})

    assert response.status_code == 302
    assert UploadedPromptSet.objects.get().team == blue


def test_the_experiment_form_offers_the_teams_sets_only(alice, bob, celery_dispatch):
    uploaded = prompt_set(alice)
    data = form_data(
        workload_kind="uploaded", uploaded_prompt_set=str(uploaded.pk), num_prompts="8", concurrency_levels="1"
    )

    option = f'<option value="{uploaded.pk}"'
    assert option in client_of(alice).get(reverse("experiments:create")).content.decode()
    assert option not in client_of(bob).get(reverse("experiments:create")).content.decode()
    refused = client_of(bob).post(reverse("experiments:create"), data)
    assert "Select a valid choice" in refused.content.decode()
    assert not Experiment.objects.exists()
    assert client_of(alice).post(reverse("experiments:create"), data).status_code == 302


def test_an_experiment_uses_a_set_of_its_own_team(red, blue, alice, celery_dispatch):
    both = member("dana", red, blue)
    uploaded = prompt_set(alice)
    data = form_data(
        workload_kind="uploaded", uploaded_prompt_set=str(uploaded.pk), num_prompts="8", concurrency_levels="1",
        team="blue",
    )  # fmt: skip

    response = client_of(both).post(reverse("experiments:create"), data)

    assert "belongs to the team “red”, the experiment to “blue”" in response.content.decode()
    assert not Experiment.objects.exists()
