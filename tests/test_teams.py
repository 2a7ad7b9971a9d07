"""Teams (experiments/teams.py): a member sees and reviews the team's experiments, prompt sets
and decisions; anyone else gets a 404, an empty list, no API row, no CSV — on the pages, the
downloads, the API and the admin. Writes go to a team of the writer's. The default team
takes every new user and, through migration 0013, everything that existed before."""

import json
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token

from experiments import teams
from experiments.models import Decision, Experiment, SpeedupEstimate, UploadedPromptSet
from experiments.prompt_sets.services import prompt_set_upload
from experiments.prompts.uploads import prompt_file_read
from experiments.review import services as decisions
from experiments.review.services import DecisionSpec
from tests.factories import ExperimentFactory, UserFactory, form_data, seed_finished_experiment

pytestmark = pytest.mark.django_db


# ---------------------------------------------------------------- who is in which team


@pytest.fixture
def red():
    return Group.objects.create(name="red")


@pytest.fixture
def blue():
    return Group.objects.create(name="blue")


def _member(username: str, *groups: Group, **fields):
    """A user in exactly these teams (a new user also joins the default team)."""
    user = UserFactory(username=username, **fields)
    user.groups.set(groups)
    return user


@pytest.fixture
def alice(red):
    return _member("alice", red)


@pytest.fixture
def carol(red):
    return _member("carol", red)


@pytest.fixture
def bob(blue):
    """The outsider: in another team."""
    return _member("bob", blue)


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def experiment(alice, red):
    return seed_finished_experiment(owner=alice, team=red, name="red secret sweep")


def _proposal(author, experiment) -> Decision:
    spec = DecisionSpec(
        service="red-chat", kind=Decision.Kind.NEEDS_MORE_DATA, arm=None, max_concurrency=None, metric="tpot",
        rationale=f"More blocks on #{experiment.pk}.", evidence=[experiment],
    )  # fmt: skip
    return decisions.decision_propose(by=author, spec=spec)


def _jsonl(n=12) -> bytes:
    return "\n".join(json.dumps({"prompt": f"red prompt {i} " + "w " * i}) for i in range(n)).encode()


def _prompt_set(owner, team=None, name="red-traffic") -> UploadedPromptSet:
    data = _jsonl()
    parsed = prompt_file_read("t.jsonl", data)
    return prompt_set_upload(
        owner=owner, team=team, name=name, file_name="t.jsonl", size_bytes=len(data), parsed=parsed
    )


# ---------------------------------------------------------------- the default team


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
    response = _client(alice).post(reverse("experiments:create"), form_data())

    assert response.status_code == 302
    assert Experiment.objects.get().team == red


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


# ---------------------------------------------------------------- pages and downloads

EXPERIMENT_PAGES = [
    ("get", "experiments:detail"),
    ("get", "experiments:progress"),
    ("get", "experiments:rerun"),
    ("post", "experiments:rerun"),
    ("get", "experiments:clone"),
    ("post", "experiments:cancel"),
    ("post", "experiments:comment"),
    ("get", "experiments:summaries_csv"),
    ("get", "experiments:summaries_json"),
    ("get", "experiments:requests_csv"),
    ("get", "experiments:requests_json"),
]


@pytest.mark.parametrize(("method", "name"), EXPERIMENT_PAGES)
def test_another_teams_experiment_is_a_404_everywhere(bob, experiment, method, name, celery_dispatch):
    response = getattr(_client(bob), method)(reverse(name, args=[experiment.pk]), {"body": "hi", "name": "x"})

    assert response.status_code == 404
    assert b"secret" not in response.content
    assert experiment.comments.count() == 0
    assert Experiment.objects.count() == 1


@pytest.mark.parametrize("name", ["detail", "progress", "rerun", "clone", "summaries_csv", "requests_json"])
def test_a_member_opens_the_teams_experiment(carol, experiment, name):
    response = _client(carol).get(reverse(f"experiments:{name}", args=[experiment.pk]))

    assert response.status_code == 200


def test_the_experiment_page_names_its_team(carol, experiment):
    page = _client(carol).get(reverse("experiments:detail", args=[experiment.pk])).content.decode()

    assert '<span id="experiment-team">red</span>' in page


def test_a_member_downloads_the_csv_and_an_outsider_gets_none(carol, bob, experiment):
    url = reverse("experiments:requests_csv", args=[experiment.pk])

    rows = b"".join(_client(carol).get(url).streaming_content).decode().splitlines()
    assert len(rows) == 1 + experiment.runs.count() * experiment.num_prompts
    assert _client(bob).get(url).status_code == 404


def test_the_history_lists_the_teams_experiments_only(carol, bob, alice, red, experiment):
    ExperimentFactory(owner=alice, team=red, target_model="/models/red-only")
    mine = ExperimentFactory(owner=bob, team=bob.groups.get(), name="blue sweep", target_model="/models/blue")

    red_page = _client(carol).get(reverse("experiments:list")).content.decode()
    blue_page = _client(bob).get(reverse("experiments:list")).content.decode()

    assert "red secret sweep" in red_page
    assert "/models/red-only" in red_page
    assert mine.name not in red_page
    assert mine.name in blue_page
    # Nor do the filters' choices name what another team ran, or who is in it.
    for hidden in ("secret", "/models/red-only", "alice"):
        assert hidden not in blue_page


def test_an_outsider_cannot_filter_by_another_teams_model(bob, alice, red):
    ExperimentFactory(owner=alice, team=red, name="red secret sweep", target_model="/models/red-only")

    response = _client(bob).get(reverse("experiments:list"), {"model": "/models/red-only"})

    assert response.status_code == 400
    assert "secret" not in response.content.decode()


def test_the_comparison_refuses_another_teams_experiment_as_unknown(carol, bob, experiment):
    other = seed_finished_experiment(owner=carol, team=experiment.team, name="red second")
    params = {"experiments": [experiment.pk, other.pk]}

    assert _client(carol).get(reverse("experiments:compare"), params).status_code == 200
    refused = _client(bob).get(reverse("experiments:compare"), params)
    assert refused.status_code == 400
    assert f"There is no experiment #{experiment.pk}, #{other.pk}." in refused.content.decode()
    assert "secret" not in refused.content.decode()


def test_a_rerun_of_a_teams_experiment_stays_in_the_team(alice, carol, red, celery_dispatch):
    _client(alice).post(reverse("experiments:create"), form_data(name="origin"))
    origin = Experiment.objects.get(name="origin")

    response = _client(carol).post(
        reverse("experiments:rerun", args=[origin.pk]), {"name": "again", "worker_queue": "cpu"}
    )

    assert response.status_code == 302
    assert Experiment.objects.get(name="again").team == red


def test_a_member_cancels_and_an_outsider_cannot(alice, bob, red, celery_dispatch):
    running = ExperimentFactory(owner=alice, team=red, status=Experiment.Status.RUNNING)

    assert _client(bob).post(reverse("experiments:cancel", args=[running.pk])).status_code == 404
    running.refresh_from_db()
    assert running.status == Experiment.Status.RUNNING
    assert _client(alice).post(reverse("experiments:cancel", args=[running.pk])).status_code == 302
    running.refresh_from_db()
    assert running.status == Experiment.Status.CANCELLED


def test_a_clone_posted_with_another_teams_origin_is_refused(bob, experiment, celery_dispatch):
    response = _client(bob).post(reverse("experiments:create"), form_data(origin=str(experiment.pk)))

    assert response.status_code == 400
    assert "is not one you can see" in response.content.decode()
    assert "secret" not in response.content.decode()
    assert Experiment.objects.count() == 1


# ---------------------------------------------------------------- choosing the team of a write


def test_a_member_of_several_teams_chooses_one_and_only_one_of_theirs(red, blue, celery_dispatch):
    both = _member("dana", red, blue)
    client = _client(both)

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

    response = _client(loner).post(reverse("experiments:create"), form_data())

    assert "You are in no team" in response.content.decode()
    assert not Experiment.objects.exists()


def test_an_import_goes_to_the_team_named_and_is_refused_for_a_team_not_ones_own(red, blue):
    _member("dana", red, blue)
    bench = str(Path(__file__).resolve().parent / "fixtures" / "vllm_bench")

    with pytest.raises(CommandError, match="Choose a team: you are in blue, red"):
        call_command("import_bench", bench, owner="dana", name="unnamed")
    with pytest.raises(CommandError, match=f"You are not in the team “{teams.DEFAULT_TEAM}”"):
        call_command("import_bench", bench, owner="dana", name="foreign", team=teams.DEFAULT_TEAM)
    call_command("import_bench", bench, owner="dana", name="imported", team="blue")

    assert Experiment.objects.get().team == blue


# ---------------------------------------------------------------- prompt sets


def test_prompt_sets_are_seen_by_their_team_only(carol, bob, alice, red):
    uploaded = _prompt_set(alice)
    assert uploaded.team == red

    assert "red-traffic" in _client(carol).get(reverse("experiments:prompt_sets")).content.decode()
    assert "red-traffic" not in _client(bob).get(reverse("experiments:prompt_sets")).content.decode()
    assert _client(carol).get(reverse("experiments:prompt_set", args=[uploaded.pk])).status_code == 200
    assert _client(bob).get(reverse("experiments:prompt_set", args=[uploaded.pk])).status_code == 404


def test_each_team_versions_its_own_sets(alice, bob):
    assert (_prompt_set(alice, name="traffic").version, _prompt_set(bob, name="traffic").version) == (1, 1)


def test_the_form_names_the_team_of_each_set_for_a_member_of_two(red, blue, alice, bob):
    both = _member("dana", red, blue)
    red_set, blue_set = _prompt_set(alice, name="traffic"), _prompt_set(bob, name="traffic")

    page = _client(both).get(reverse("experiments:create")).content.decode()
    assert f'<option value="{red_set.pk}">traffic v1 (red)</option>' in page
    assert f'<option value="{blue_set.pk}">traffic v1 (blue)</option>' in page
    # One team's member has no two sets to tell apart.
    assert (
        f'<option value="{red_set.pk}">traffic v1</option>'
        in _client(alice).get(reverse("experiments:create")).content.decode()
    )


def test_the_upload_page_stores_in_the_uploaders_team(bob, blue):
    upload = SimpleUploadedFile("t.jsonl", _jsonl())

    response = _client(bob).post(reverse("experiments:prompt_sets"), {"name": "blue-set", "file": upload})

    assert response.status_code == 302
    assert UploadedPromptSet.objects.get().team == blue


def test_the_experiment_form_offers_the_teams_sets_only(alice, bob, celery_dispatch):
    uploaded = _prompt_set(alice)
    data = form_data(
        workload_kind="uploaded", uploaded_prompt_set=str(uploaded.pk), num_prompts="8", concurrency_levels="1"
    )

    option = f'<option value="{uploaded.pk}"'
    assert option in _client(alice).get(reverse("experiments:create")).content.decode()
    assert option not in _client(bob).get(reverse("experiments:create")).content.decode()
    refused = _client(bob).post(reverse("experiments:create"), data)
    assert "Select a valid choice" in refused.content.decode()
    assert not Experiment.objects.exists()
    assert _client(alice).post(reverse("experiments:create"), data).status_code == 302


def test_an_experiment_uses_a_set_of_its_own_team(red, blue, alice, celery_dispatch):
    both = _member("dana", red, blue)
    uploaded = _prompt_set(alice)
    data = form_data(
        workload_kind="uploaded", uploaded_prompt_set=str(uploaded.pk), num_prompts="8", concurrency_levels="1",
        team="blue",
    )  # fmt: skip

    response = _client(both).post(reverse("experiments:create"), data)

    assert "belongs to the team “red”, the experiment to “blue”" in response.content.decode()
    assert not Experiment.objects.exists()


# ---------------------------------------------------------------- decisions and notices


def test_decisions_are_seen_and_reviewed_by_their_team_only(alice, carol, bob, experiment):
    decision = _proposal(alice, experiment)
    assert decision.team == experiment.team

    assert "red-chat" in _client(carol).get(reverse("experiments:decisions")).content.decode()
    page = _client(carol).get(reverse("experiments:decision", args=[decision.pk])).content.decode()
    assert '<span id="decision-team">red</span>' in page
    assert "red-chat" not in _client(bob).get(reverse("experiments:decisions")).content.decode()
    assert _client(bob).get(reverse("experiments:decision", args=[decision.pk])).status_code == 404
    assert _client(bob).get(reverse("experiments:decision_edit", args=[decision.pk])).status_code == 404
    approve = reverse("experiments:decision_act", args=[decision.pk, "approve"])
    assert _client(bob).post(approve, {"version": 1}).status_code == 404
    decision.refresh_from_db()
    assert decision.state == Decision.State.PROPOSED

    assert _client(carol).post(approve, {"version": 1}).status_code == 302
    decision.refresh_from_db()
    assert decision.state == Decision.State.FINAL


def test_a_decision_cannot_cite_an_experiment_its_author_cannot_see(bob, experiment):
    client = _client(bob)
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
    both = _member("dana", red, blue)
    blue_experiment = seed_finished_experiment(owner=bob, team=blue)
    ids = [experiment.pk, blue_experiment.pk]
    data = {"service": "chat", "kind": "needs_more_data", "evidence": ids, "metric": "tpot", "rationale": "x"}

    response = _client(both).post(
        f"{reverse('experiments:decision_new')}?experiments={ids[0]}&experiments={ids[1]}", data
    )

    assert "Cite experiments of one team" in response.content.decode()
    assert not Decision.objects.exists()


def test_an_edit_cites_experiments_of_the_decisions_team_only(red, blue, experiment, bob):
    both = _member("dana", red, blue)
    decision = _proposal(both, experiment)
    blue_experiment = seed_finished_experiment(owner=bob, team=blue)
    edit = reverse("experiments:decision_edit", args=[decision.pk])
    data = {"service": "chat", "kind": "needs_more_data", "evidence": [blue_experiment.pk], "metric": "tpot",
            "rationale": "x", "version": 1}  # fmt: skip

    response = _client(both).post(f"{edit}?experiments={blue_experiment.pk}", data)

    assert response.status_code == 400
    assert list(decision.citations.values_list("experiment_id", flat=True)) == [experiment.pk]


def test_each_team_has_its_own_final_decision_for_a_service(alice, carol, bob, blue, experiment):
    dave = _member("dave", blue)
    blue_experiment = seed_finished_experiment(owner=bob, team=blue)
    for author, reviewer, cited in ((alice, carol, experiment), (bob, dave, blue_experiment)):
        decisions.decision_approve(decision=_proposal(author, cited), by=reviewer, version=1)

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
    _proposal(alice, experiment)

    assert "Waiting for your approval" in _client(carol).get(reverse("experiments:list")).content.decode()
    assert "Waiting for your approval" not in _client(bob).get(reverse("experiments:list")).content.decode()


# ---------------------------------------------------------------- the API


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
    both = _member("dana", red, blue)
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


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_over_http_an_outsiders_token_reads_nothing(live_server, red, blue):
    """The real stack short of a worker: an HTTP server thread, token authentication and PostgreSQL."""
    alice, bob = _member("alice", red), _member("bob", blue)
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


# ---------------------------------------------------------------- the admin


def _staff(username: str, *groups: Group):
    user = _member(username, *groups, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=["view_experiment", "view_decision", "view_run"]))
    return user


@pytest.mark.parametrize("model", ["experiment", "run"])
def test_the_admin_lists_a_staff_members_teams_only(blue, red, experiment, model):
    outsider, member = _staff("bea", blue), _staff("rob", red)
    changelist = reverse(f"admin:experiments_{model}_changelist")
    row = experiment if model == "experiment" else experiment.runs.first()

    assert f"/{row.pk}/change/" in _client(member).get(changelist).content.decode()
    assert f"/{row.pk}/change/" not in _client(outsider).get(changelist).content.decode()
    assert _client(outsider).get(reverse(f"admin:experiments_{model}_change", args=[row.pk])).status_code == 302


def test_the_admin_hides_another_teams_decisions_and_a_superuser_sees_all(alice, blue, experiment):
    decision = _proposal(alice, experiment)
    outsider = _staff("bea", blue)
    root = get_user_model().objects.create_superuser(username="root", email="", password="x")
    root.groups.clear()
    changelist = reverse("admin:experiments_decision_changelist")

    assert f"/{decision.pk}/change/" not in _client(outsider).get(changelist).content.decode()
    assert f"/{decision.pk}/change/" in _client(root).get(changelist).content.decode()
    assert _client(root).get(reverse("experiments:detail", args=[experiment.pk])).status_code == 200


def test_the_admin_does_not_name_an_origin_of_another_team(alice, blue, red, experiment):
    experiment.origin = ExperimentFactory(owner=alice, team=red, name="red secret origin")
    experiment.team = blue
    experiment.save()
    member_of_blue, member_of_both = _staff("bea", blue), _staff("max", blue, red)
    page = reverse("admin:experiments_experiment_change", args=[experiment.pk])

    hidden = _client(member_of_blue).get(page).content.decode()
    shown = _client(member_of_both).get(page).content.decode()

    assert "red secret origin" not in hidden
    assert "an experiment of another team" in hidden
    assert "red secret origin" in shown
