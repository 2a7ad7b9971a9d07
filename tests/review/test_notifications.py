"""The history page's notices: my experiments that ended since my last visit (a visit being
views less than 30 minutes apart), proposals waiting for my approval, flagged decisions."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils import timezone

from experiments.decisions import services as decisions
from experiments.decisions.services import DecisionSpec
from experiments.models import Decision, Experiment, HistoryVisit
from experiments.review import notifications
from tests.factories import ExperimentFactory, UserFactory, seed_finished_experiment

pytestmark = pytest.mark.django_db

URL = reverse("experiments:list")


def _ended(owner, name, *, hours_ago, status=Experiment.Status.FINISHED):
    return ExperimentFactory(
        owner=owner, name=name, status=status, finished_at=timezone.now() - timedelta(hours=hours_ago)
    )


def _last_visit(user, *, hours_ago):
    HistoryVisit.objects.update_or_create(
        user=user, defaults={"seen_at": timezone.now() - timedelta(hours=hours_ago), "previous_seen_at": None}
    )


def test_a_visit_is_views_less_than_half_an_hour_apart(user):
    start = timezone.now()

    assert notifications.history_visit_record(user=user, now=start) is None
    assert notifications.history_visit_record(user=user, now=start + timedelta(minutes=20)) is None
    later = start + timedelta(minutes=20 + 31)
    assert notifications.history_visit_record(user=user, now=later) == start + timedelta(minutes=20)
    # Paging and filtering within the new visit keep its "since".
    assert notifications.history_visit_record(user=user, now=later + timedelta(minutes=5)) == start + timedelta(
        minutes=20
    )


def test_my_experiments_that_ended_since_my_last_visit(logged_in_client, user):
    _last_visit(user, hours_ago=3)
    _ended(user, "finished since", hours_ago=1)
    _ended(user, "failed since", hours_ago=2, status=Experiment.Status.FAILED)
    _ended(user, "finished before", hours_ago=5)
    _ended(user, "cancelled since", hours_ago=1, status=Experiment.Status.CANCELLED)
    _ended(UserFactory(username="carol"), "carol's", hours_ago=1)
    ExperimentFactory(owner=user, name="still running", status=Experiment.Status.RUNNING)

    notices = logged_in_client.get(URL).context["notices"]

    assert [e.name for e in notices.ended] == ["finished since", "failed since"]
    page = logged_in_client.get(URL, {"status": "finished"}).text  # the same visit
    assert 'id="ended"' in page
    assert "finished since" in page


def test_nothing_new_means_no_notice(logged_in_client, user):
    _last_visit(user, hours_ago=3)
    _ended(user, "old", hours_ago=5)

    response = logged_in_client.get(URL)

    assert not response.context["notices"]
    assert 'id="notices"' not in response.text


def test_proposals_by_others_wait_for_me_and_flagged_decisions_show(logged_in_client, user):
    bob = UserFactory(username="bob")
    evidence = seed_finished_experiment(name="evidence")
    arm = evidence.arms.get(label="n-gram k=4")

    def propose(author, service):
        spec = DecisionSpec(service, Decision.Kind.DEPLOY, arm, 4, "tpot", "Faster.", [evidence])
        return decisions.decision_propose(by=author, spec=spec)

    theirs = propose(bob, "chat")
    propose(user, "code")
    flagged = propose(bob, "search")
    decisions.decision_approve(decision=flagged, by=user, version=1)
    Decision.objects.filter(pk=flagged.pk).update(flagged_at=timezone.now(), flag_reason="Contradicted.")

    response = logged_in_client.get(URL)

    notices = response.context["notices"]
    assert notices.awaiting == [theirs]
    assert [d.pk for d in notices.flagged] == [flagged.pk]
    assert f'data-decision="{theirs.pk}"' in response.text
    assert "Waiting for your approval" in response.text


def test_a_superuser_is_asked_to_review_their_own_teams_decisions_only(client):
    """A superuser sees every team's decisions, but only members may approve or dismiss a
    flag (experiments.decisions.services), so another team's proposals and flags are not theirs to act on."""
    red = Group.objects.create(name="red")
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    for member in (alice, bob):
        member.groups.set([red])
    evidence = seed_finished_experiment(name="red's evidence", owner=alice, team=red)
    arm = evidence.arms.get(label="n-gram k=4")

    def propose(service):
        spec = DecisionSpec(service, Decision.Kind.DEPLOY, arm, 4, "tpot", "Faster.", [evidence])
        return decisions.decision_propose(by=alice, spec=spec)

    waiting = propose("chat")
    flagged = propose("search")
    decisions.decision_approve(decision=flagged, by=bob, version=1)
    Decision.objects.filter(pk=flagged.pk).update(flagged_at=timezone.now(), flag_reason="Contradicted.")
    root = UserFactory(username="root", is_staff=True, is_superuser=True)  # in the default team only

    assert not notifications.notices_for(user=root, since=None)
    assert Decision.objects.visible_to(root).count() == 2  # they still see them
    bobs = notifications.notices_for(user=bob, since=None)
    assert bobs.awaiting == [waiting]
    assert [d.pk for d in bobs.flagged] == [flagged.pk]
