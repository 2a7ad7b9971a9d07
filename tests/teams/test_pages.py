"""Another team's experiment is a 404 on every page and download; a member opens, re-runs,
cancels and compares the team's."""

import pytest
from django.urls import reverse

from experiments.models import Experiment
from tests.factories import ExperimentFactory, form_data, seed_finished_experiment
from tests.teams.helpers import client_of

pytestmark = pytest.mark.django_db


EXPERIMENT_PAGES = [
    ("get", "experiments:detail"),
    ("get", "experiments:progress"),
    ("get", "experiments:rerun"),
    ("post", "experiments:rerun"),
    ("get", "experiments:clone"),
    ("post", "experiments:cancel"),
    ("post", "experiments:budget"),
    ("post", "experiments:comment"),
    ("get", "experiments:summaries_csv"),
    ("get", "experiments:summaries_json"),
    ("get", "experiments:requests_csv"),
    ("get", "experiments:requests_json"),
]


@pytest.mark.parametrize(("method", "name"), EXPERIMENT_PAGES)
def test_another_teams_experiment_is_a_404_everywhere(bob, experiment, method, name, celery_dispatch):
    response = getattr(client_of(bob), method)(reverse(name, args=[experiment.pk]), {"body": "hi", "name": "x"})

    assert response.status_code == 404
    assert b"secret" not in response.content
    assert experiment.comments.count() == 0
    assert Experiment.objects.count() == 1


@pytest.mark.parametrize("name", ["detail", "progress", "rerun", "clone", "summaries_csv", "requests_json"])
def test_a_member_opens_the_teams_experiment(carol, experiment, name):
    response = client_of(carol).get(reverse(f"experiments:{name}", args=[experiment.pk]))

    assert response.status_code == 200


def test_the_experiment_page_names_its_team(carol, experiment):
    page = client_of(carol).get(reverse("experiments:detail", args=[experiment.pk])).content.decode()

    assert '<span id="experiment-team">red</span>' in page


def test_a_member_downloads_the_csv_and_an_outsider_gets_none(carol, bob, experiment):
    url = reverse("experiments:requests_csv", args=[experiment.pk])

    rows = b"".join(client_of(carol).get(url).streaming_content).decode().splitlines()
    assert len(rows) == 1 + experiment.runs.count() * experiment.num_prompts
    assert client_of(bob).get(url).status_code == 404


def test_the_history_lists_the_teams_experiments_only(carol, bob, alice, red, experiment):
    ExperimentFactory(owner=alice, team=red, target_model="/models/red-only")
    mine = ExperimentFactory(owner=bob, team=bob.groups.get(), name="blue sweep", target_model="/models/blue")

    red_page = client_of(carol).get(reverse("experiments:list")).content.decode()
    blue_page = client_of(bob).get(reverse("experiments:list")).content.decode()

    assert "red secret sweep" in red_page
    assert "/models/red-only" in red_page
    assert mine.name not in red_page
    assert mine.name in blue_page
    # Nor do the filters' choices name what another team ran, or who is in it.
    for hidden in ("secret", "/models/red-only", "alice"):
        assert hidden not in blue_page


def test_an_outsider_cannot_filter_by_another_teams_model(bob, alice, red):
    ExperimentFactory(owner=alice, team=red, name="red secret sweep", target_model="/models/red-only")

    response = client_of(bob).get(reverse("experiments:list"), {"model": "/models/red-only"})

    assert response.status_code == 400
    assert "secret" not in response.content.decode()


def test_the_comparison_refuses_another_teams_experiment_as_unknown(carol, bob, experiment):
    other = seed_finished_experiment(owner=carol, team=experiment.team, name="red second")
    params = {"experiments": [experiment.pk, other.pk]}

    assert client_of(carol).get(reverse("experiments:compare"), params).status_code == 200
    refused = client_of(bob).get(reverse("experiments:compare"), params)
    assert refused.status_code == 400
    assert f"There is no experiment #{experiment.pk}, #{other.pk}." in refused.content.decode()
    assert "secret" not in refused.content.decode()


def test_a_rerun_of_a_teams_experiment_stays_in_the_team(alice, carol, red, celery_dispatch):
    client_of(alice).post(reverse("experiments:create"), form_data(name="origin"))
    origin = Experiment.objects.get(name="origin")

    response = client_of(carol).post(
        reverse("experiments:rerun", args=[origin.pk]), {"name": "again", "worker_queue": "cpu"}
    )

    assert response.status_code == 302
    assert Experiment.objects.get(name="again").team == red


def test_a_member_cancels_and_an_outsider_cannot(alice, bob, red, celery_dispatch):
    running = ExperimentFactory(owner=alice, team=red, status=Experiment.Status.RUNNING)

    assert client_of(bob).post(reverse("experiments:cancel", args=[running.pk])).status_code == 404
    running.refresh_from_db()
    assert running.status == Experiment.Status.RUNNING
    assert client_of(alice).post(reverse("experiments:cancel", args=[running.pk])).status_code == 302
    running.refresh_from_db()
    assert running.status == Experiment.Status.CANCELLED


def test_a_clone_posted_with_another_teams_origin_is_refused(bob, experiment, celery_dispatch):
    response = client_of(bob).post(reverse("experiments:create"), form_data(origin=str(experiment.pk)))

    assert response.status_code == 400
    assert "is not one you can see" in response.content.decode()
    assert "secret" not in response.content.decode()
    assert Experiment.objects.count() == 1
