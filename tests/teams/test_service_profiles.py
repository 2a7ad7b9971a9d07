"""Service profiles are seen, changed and recommended from by their team only."""

import pytest
from django.urls import reverse

from experiments.models import ServiceProfile
from tests.factories import ServiceProfileFactory, UserFactory, seed_finished_experiment
from tests.teams.helpers import client_of, member

pytestmark = pytest.mark.django_db


@pytest.fixture
def profile(alice, red):
    return ServiceProfileFactory(service="red-chat", owner=alice, team=red)


def test_a_profile_is_seen_by_its_team_only(profile, carol, bob):
    detail = reverse("experiments:service_profile", args=[profile.pk])
    edit = reverse("experiments:service_profile_edit", args=[profile.pk])

    assert "red-chat" in client_of(carol).get(reverse("experiments:service_profiles")).text
    assert "red-chat" not in client_of(bob).get(reverse("experiments:service_profiles")).text
    assert client_of(carol).get(detail).status_code == 200
    assert client_of(bob).get(detail).status_code == 404
    assert client_of(bob).get(edit).status_code == 404
    assert client_of(bob).post(edit, {"service": "blue-chat"}).status_code == 404
    assert ServiceProfile.objects.get().service == "red-chat"


def test_the_recommendation_reads_the_profiles_team_experiments_only(experiment, bob, blue):
    theirs = ServiceProfileFactory(service="chat", owner=bob, team=blue)
    ours = seed_finished_experiment(owner=bob, team=blue)

    response = client_of(bob).get(reverse("experiments:service_profile", args=[theirs.pk]))

    assert [e.pk for e in response.context["cited"]] == [ours.pk]
    assert f"#{experiment.pk}" not in response.text


def test_a_member_of_two_teams_names_the_profiles_team(red, blue):
    both = member("dana", red, blue)
    data = {"service": "chat", "target_model": ServiceProfileFactory.build().target_model, "worker_queue": "cpu",
            "metric": "server_tpot", "concurrency_low": "1", "concurrency_high": "4"}  # fmt: skip
    url = reverse("experiments:service_profile_new")

    assert "Choose a team: you are in blue, red." in client_of(both).post(url, data).text
    assert client_of(both).post(url, {**data, "team": "blue"}).status_code == 302
    assert ServiceProfile.objects.get().team == blue


def test_a_superuser_outside_the_team_reads_a_profile_but_does_not_change_it(profile):
    root = UserFactory(username="root", is_superuser=True)
    root.groups.clear()
    data = {"service": "renamed", "target_model": profile.target_model, "worker_queue": "cpu",
            "metric": "server_tpot", "concurrency_low": "1", "concurrency_high": "4"}  # fmt: skip

    assert client_of(root).get(reverse("experiments:service_profile", args=[profile.pk])).status_code == 200
    response = client_of(root).post(reverse("experiments:service_profile_edit", args=[profile.pk]), data)

    assert response.status_code == 403
    assert ServiceProfile.objects.get().service == "red-chat"
