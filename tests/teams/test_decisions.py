"""Decisions are seen, reviewed and flagged within their team; notices name the team's only."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from experiments.decisions import services as decisions
from experiments.decisions.services import DecisionSpec
from experiments.models import Decision, Experiment, SpeedupEstimate
from tests.factories import seed_finished_experiment
from tests.teams.helpers import client_of, member, proposal

pytestmark = pytest.mark.django_db


def test_decisions_are_seen_and_reviewed_by_their_team_only(alice, carol, bob, experiment):
    decision = proposal(alice, experiment)
    assert decision.team == experiment.team

    assert "red-chat" in client_of(carol).get(reverse("experiments:decisions")).content.decode()
    page = client_of(carol).get(reverse("experiments:decision", args=[decision.pk])).content.decode()
    assert '<span id="decision-team">red</span>' in page
    assert "red-chat" not in client_of(bob).get(reverse("experiments:decisions")).content.decode()
    assert client_of(bob).get(reverse("experiments:decision", args=[decision.pk])).status_code == 404
    assert client_of(bob).get(reverse("experiments:decision_edit", args=[decision.pk])).status_code == 404
    approve = reverse("experiments:decision_act", args=[decision.pk, "approve"])
    assert client_of(bob).post(approve, {"version": 1}).status_code == 404
    decision.refresh_from_db()
    assert decision.state == Decision.State.PROPOSED

    assert client_of(carol).post(approve, {"version": 1}).status_code == 302
    decision.refresh_from_db()
    assert decision.state == Decision.State.FINAL


def test_a_decision_cannot_cite_an_experiment_its_author_cannot_see(bob, experiment):
    client = client_of(bob)
    form = client.get(reverse("experiments:decision_new"), {"experiments": experiment.pk}).content.decode()
    assert "secret" not in form

    data = {
        "service": "chat",
        "kind": "needs_more_data",
        "evidence": [experiment.pk],
        "metric": "tpot",
        "rationale": "x",
    }
    response = client.post(f"{reverse('experiments:decision_new')}?experiments={experiment.pk}", data)

    assert response.status_code == 400
    assert not Decision.objects.exists()


def test_a_decision_cites_experiments_of_one_team(red, blue, experiment, bob):
    both = member("dana", red, blue)
    blue_experiment = seed_finished_experiment(owner=bob, team=blue)
    ids = [experiment.pk, blue_experiment.pk]
    data = {"service": "chat", "kind": "needs_more_data", "evidence": ids, "metric": "tpot", "rationale": "x"}

    response = client_of(both).post(
        f"{reverse('experiments:decision_new')}?experiments={ids[0]}&experiments={ids[1]}", data
    )

    assert "Cite experiments of one team" in response.content.decode()
    assert not Decision.objects.exists()


def test_an_edit_cites_experiments_of_the_decisions_team_only(red, blue, experiment, bob):
    both = member("dana", red, blue)
    decision = proposal(both, experiment)
    blue_experiment = seed_finished_experiment(owner=bob, team=blue)
    edit = reverse("experiments:decision_edit", args=[decision.pk])
    data = {"service": "chat", "kind": "needs_more_data", "evidence": [blue_experiment.pk], "metric": "tpot",
            "rationale": "x", "version": 1}  # fmt: skip

    response = client_of(both).post(f"{edit}?experiments={blue_experiment.pk}", data)

    assert response.status_code == 400
    assert list(decision.citations.values_list("experiment_id", flat=True)) == [experiment.pk]


def test_each_team_has_its_own_final_decision_for_a_service(alice, carol, bob, blue, experiment):
    dave = member("dave", blue)
    blue_experiment = seed_finished_experiment(owner=bob, team=blue)
    for author, reviewer, cited in ((alice, carol, experiment), (bob, dave, blue_experiment)):
        decisions.decision_approve(decision=proposal(author, cited), by=reviewer, version=1)

    assert Decision.objects.filter(service="red-chat", state=Decision.State.FINAL).count() == 2


def _finished_days_ago(days: float, team, owner) -> Experiment:
    experiment = seed_finished_experiment(owner=owner, team=team)
    Experiment.objects.filter(pk=experiment.pk).update(finished_at=timezone.now() - timedelta(days=days))
    experiment.refresh_from_db()
    return experiment


def test_another_teams_experiment_never_flags_a_decision(alice, carol, bob, red, blue):
    cited = _finished_days_ago(10, red, alice)
    spec = DecisionSpec(
        service="chat", kind=Decision.Kind.DEPLOY, arm=cited.arms.get(label="n-gram k=4"), max_concurrency=4,
        metric="tpot", rationale="Faster.", evidence=[cited],
    )  # fmt: skip
    blue_newer = _finished_days_ago(1, blue, bob)
    SpeedupEstimate.objects.filter(arm__experiment=blue_newer, arm__label="n-gram k=4").update(outcome="slower")

    decision = decisions.decision_approve(decision=decisions.decision_propose(by=alice, spec=spec), by=carol, version=1)
    assert decisions.decisions_flag_contradicted(experiment=blue_newer) == []
    decision.refresh_from_db()
    assert not decision.is_flagged

    red_newer = _finished_days_ago(1, red, carol)
    SpeedupEstimate.objects.filter(arm__experiment=red_newer, arm__label="n-gram k=4").update(outcome="slower")
    assert decisions.decisions_flag_contradicted(experiment=red_newer) == [decision]


def test_the_notices_name_the_teams_proposals_only(alice, carol, bob, experiment):
    proposal(alice, experiment)

    assert "Waiting for your approval" in client_of(carol).get(reverse("experiments:list")).content.decode()
    assert "Waiting for your approval" not in client_of(bob).get(reverse("experiments:list")).content.decode()
