"""The admin lists a staff member's teams only; a superuser sees all."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.urls import reverse

from tests.factories import ExperimentFactory
from tests.teams.helpers import client_of, member, proposal

pytestmark = pytest.mark.django_db


def _staff(username: str, *groups: Group):
    user = member(username, *groups, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=["view_experiment", "view_decision", "view_run"]))
    return user


@pytest.mark.parametrize("model", ["experiment", "run"])
def test_the_admin_lists_a_staff_members_teams_only(blue, red, experiment, model):
    outsider, member = _staff("bea", blue), _staff("rob", red)
    changelist = reverse(f"admin:experiments_{model}_changelist")
    row = experiment if model == "experiment" else experiment.runs.first()

    assert f"/{row.pk}/change/" in client_of(member).get(changelist).content.decode()
    assert f"/{row.pk}/change/" not in client_of(outsider).get(changelist).content.decode()
    assert client_of(outsider).get(reverse(f"admin:experiments_{model}_change", args=[row.pk])).status_code == 302


def test_the_admin_hides_another_teams_decisions_and_a_superuser_sees_all(alice, blue, experiment):
    decision = proposal(alice, experiment)
    outsider = _staff("bea", blue)
    root = get_user_model().objects.create_superuser(username="root", email="", password="x")
    root.groups.clear()
    changelist = reverse("admin:experiments_decision_changelist")

    assert f"/{decision.pk}/change/" not in client_of(outsider).get(changelist).content.decode()
    assert f"/{decision.pk}/change/" in client_of(root).get(changelist).content.decode()
    assert client_of(root).get(reverse("experiments:detail", args=[experiment.pk])).status_code == 200


def test_the_admin_does_not_name_an_origin_of_another_team(alice, blue, red, experiment):
    experiment.origin = ExperimentFactory(owner=alice, team=red, name="red secret origin")
    experiment.team = blue
    experiment.save()
    member_of_blue, member_of_both = _staff("bea", blue), _staff("max", blue, red)
    page = reverse("admin:experiments_experiment_change", args=[experiment.pk])

    hidden = client_of(member_of_blue).get(page).content.decode()
    shown = client_of(member_of_both).get(page).content.decode()

    assert "red secret origin" not in hidden
    assert "an experiment of another team" in hidden
    assert "red secret origin" in shown
