"""The API reads, lists and cancels a team's experiments for its members only."""

import json
import urllib.error
import urllib.request

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token

from experiments.models import Experiment
from tests.factories import ExperimentFactory, seed_finished_experiment
from tests.teams.helpers import member

pytestmark = pytest.mark.django_db


def _api(user) -> Client:
    return Client(headers={"Authorization": f"Token {Token.objects.create(user=user).key}"})


API_READS = [
    "experiment-detail",
    "experiment-progress",
    "experiment-results",
    "experiment-summaries",
    "experiment-requests",
]


@pytest.mark.parametrize("name", API_READS)
def test_the_api_reads_a_teams_experiment_for_members_only(carol, bob, experiment, name):
    url = reverse(f"api:{name}", args=[experiment.pk])

    assert _api(carol).get(url).status_code == 200
    refused = _api(bob).get(url)
    assert refused.status_code == 404
    assert b"secret" not in refused.content


def test_the_api_lists_the_teams_experiments_with_their_team(carol, bob, experiment):
    listed = _api(carol).get(reverse("api:experiments")).json()["results"]

    assert [(row["id"], row["team"]) for row in listed] == [(experiment.pk, "red")]
    assert _api(bob).get(reverse("api:experiments")).json()["results"] == []


def test_the_api_cancel_is_a_404_for_an_outsider(alice, bob, red):
    running = ExperimentFactory(owner=alice, team=red, status=Experiment.Status.RUNNING)

    assert _api(bob).post(reverse("api:experiment-cancel", args=[running.pk])).status_code == 404
    running.refresh_from_db()
    assert running.status == Experiment.Status.RUNNING


def test_the_api_spec_names_the_team(red, blue, celery_dispatch):
    both = member("dana", red, blue)
    spec = {"name": "api", "prompt_set": "chat", "max_tokens": 64, "num_prompts": 20, "concurrency_levels": [1, 4],
            "arms": [{"method": "ngram"}]}  # fmt: skip
    api = _api(both)

    refused = api.post(reverse("api:experiments"), spec, content_type="application/json")
    assert refused.status_code == 400
    assert refused.json()["errors"]["team"] == ["Choose a team: you are in blue, red."]
    created = api.post(reverse("api:experiments"), spec | {"team": "red"}, content_type="application/json")
    assert created.status_code == 201
    assert created.json()["spec"]["team"] == "red"
    assert Experiment.objects.get().team == red


@pytest.mark.live_http
@pytest.mark.django_db(transaction=True)
def test_over_http_an_outsiders_token_reads_nothing(live_server, red, blue):
    """The real stack short of a worker: an HTTP server thread, token authentication and PostgreSQL."""
    alice, bob = member("alice", red), member("bob", blue)
    experiment = seed_finished_experiment(owner=alice, team=red)

    tokens = {user: Token.objects.create(user=user).key for user in (alice, bob)}

    def get(user, path):
        request = urllib.request.Request(live_server.url + path, headers={"Authorization": f"Token {tokens[user]}"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, None

    assert get(alice, reverse("api:experiment-results", args=[experiment.pk]))[0] == 200
    assert get(bob, reverse("api:experiment-results", args=[experiment.pk]))[0] == 404
    assert get(bob, reverse("api:experiments"))[1]["results"] == []
