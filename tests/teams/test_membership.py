"""Which team a user is in and writes to: the default team for every new user and, through
migration 0013, everything that existed before; a member of several teams chooses one."""

from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse

from experiments import teams
from experiments.models import Experiment
from tests.factories import UserFactory, form_data
from tests.teams.helpers import client_of, member

pytestmark = pytest.mark.django_db


def test_a_new_user_joins_the_default_team():
    user = UserFactory(username="newcomer")
    admin = get_user_model().objects.create_superuser(username="root", email="", password="x")

    assert [g.name for g in user.groups.all()] == [teams.DEFAULT_TEAM]
    assert [g.name for g in admin.groups.all()] == [teams.DEFAULT_TEAM]


def test_ensure_admin_and_the_demo_submission_need_no_team_set_up(celery_dispatch):
    call_command("ensure_admin", username="admin", password="pw")
    call_command("submit_demo", owner="admin")

    experiment = Experiment.objects.get()
    assert experiment.team.name == teams.DEFAULT_TEAM


def test_a_single_team_user_writes_to_their_team_without_naming_it(alice, red, celery_dispatch):
    response = client_of(alice).post(reverse("experiments:create"), form_data())

    assert response.status_code == 302
    assert Experiment.objects.get().team == red


@pytest.mark.slow(reason="migrates the test database back to 0012 and forward again")
@pytest.mark.django_db(transaction=True)
def test_the_migration_puts_every_row_and_user_in_the_default_team():
    executor = MigrationExecutor(connection)
    executor.migrate([("experiments", "0012_input_lengths")])
    old = executor.loader.project_state([("experiments", "0012_input_lengths")]).apps
    user = old.get_model("auth", "User").objects.create(username="old-timer")
    experiment = old.get_model("experiments", "Experiment").objects.create(
        name="before teams", owner_id=user.pk, target_model="/m", num_prompts=1, max_tokens=1, concurrency_levels=[1]
    )
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    default = Group.objects.get(name=teams.DEFAULT_TEAM)
    assert Experiment.objects.get(pk=experiment.pk).team == default
    assert list(get_user_model().objects.get(pk=user.pk).groups.all()) == [default]


def test_a_member_of_several_teams_chooses_one_and_only_one_of_theirs(red, blue, celery_dispatch):
    both = member("dana", red, blue)
    client = client_of(both)

    unnamed = client.post(reverse("experiments:create"), form_data())
    assert "Choose a team: you are in blue, red." in unnamed.content.decode()
    foreign = client.post(reverse("experiments:create"), form_data(team=teams.DEFAULT_TEAM))
    assert f"You are in no team named “{teams.DEFAULT_TEAM}”." in foreign.content.decode()
    assert not Experiment.objects.exists()

    assert client.post(reverse("experiments:create"), form_data(team="blue")).status_code == 302
    assert Experiment.objects.get().team == blue
    assert 'name="team"' in client.get(reverse("experiments:create")).content.decode()


def test_a_user_in_no_team_is_told_how_to_get_one(celery_dispatch):
    loner = UserFactory(username="loner")
    loner.groups.clear()

    response = client_of(loner).post(reverse("experiments:create"), form_data())

    assert "You are in no team" in response.content.decode()
    assert not Experiment.objects.exists()


def test_an_import_goes_to_the_team_named_and_is_refused_for_a_team_not_ones_own(red, blue):
    member("dana", red, blue)
    bench = str(Path(__file__).resolve().parents[1] / "fixtures" / "vllm_bench")

    with pytest.raises(CommandError, match="Choose a team: you are in blue, red"):
        call_command("import_bench", bench, owner="dana", name="unnamed")
    with pytest.raises(CommandError, match=f"You are not in the team “{teams.DEFAULT_TEAM}”"):
        call_command("import_bench", bench, owner="dana", name="foreign", team=teams.DEFAULT_TEAM)
    call_command("import_bench", bench, owner="dana", name="imported", team="blue")

    assert Experiment.objects.get().team == blue
