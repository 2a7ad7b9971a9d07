"""Keys over every door that writes, two users of two teams, keys drawn from a small pool so
that they are reused across doors, users and bodies at random (experiments/submissions.py):
never a 500, never another team's object in an answer or behind a redirect, and a key reused
with another body stores nothing."""

import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from experiments.models import Comment, Decision, Experiment, ServiceProfile, UploadedPromptSet
from tests.api_helpers import SMALL_SPEC, token_client
from tests.factories import form_data, seed_finished_experiment
from tests.teams.helpers import client_of, jsonl, member
from tests.test_hostile_input import BASELINE

pytestmark = pytest.mark.django_db

KEYS = ["k0", "k1", "k2"]
SECRET = {"red": "red secret sweep", "blue": "blue secret sweep"}


@dataclass
class Member:
    team: Group
    page: Client
    api: Client
    experiment: Experiment  # the team's own, cited by decisions and commented on


def _experiment_form(who: Member, key: str, variant: int):
    data = form_data(name=f"sweep {variant}") | {"submission_key": key}
    return who.page.post(reverse("experiments:create"), data)


def _prompt_set(who: Member, key: str, variant: int):
    upload = SimpleUploadedFile("set.jsonl", jsonl(12 + variant))
    data = {"name": f"set-{who.team.name}", "file": upload, "submission_key": key}
    return who.page.post(reverse("experiments:prompt_sets"), data)


def _import(who: Member, key: str, variant: int):
    upload = SimpleUploadedFile("baseline.json", BASELINE.encode(), content_type="application/json")
    data = {"name": f"import {variant}", "files": [upload], "submission_key": key}
    return who.page.post(reverse("experiments:import"), data)


def _decision(who: Member, key: str, variant: int):
    data = {
        "service": "chat", "kind": "needs_more_data", "evidence": [who.experiment.pk], "metric": "tpot",
        "rationale": f"More blocks ({variant}).", "submission_key": key,
    }  # fmt: skip
    return who.page.post(f"{reverse('experiments:decision_new')}?experiments={who.experiment.pk}", data)


def _service_profile(who: Member, key: str, variant: int):
    data = {
        "service": f"svc-{variant}", "target_model": str(settings.SPECDASH_MODELS_DIR / "target"),
        "worker_queue": "cpu", "metric": "server_tpot", "concurrency_low": "1", "concurrency_high": "16",
        "daily_concurrency": "", "category_mix": "", "submission_key": key,
    }  # fmt: skip
    return who.page.post(reverse("experiments:service_profile_new"), data)


def _comment(who: Member, key: str, variant: int):
    url = reverse("experiments:comment", args=[who.experiment.pk])
    return who.page.post(url, {"body": f"seen it ({variant})", "submission_key": key})


def _api(who: Member, key: str, variant: int):
    spec = SMALL_SPEC | {"name": f"api sweep {variant}", "prompt_set": "code_edit"}
    return who.api.post(
        reverse("api:experiments"), spec, content_type="application/json", headers={"Idempotency-Key": key}
    )


DOORS: list[Callable] = [_experiment_form, _prompt_set, _import, _decision, _service_profile, _comment, _api]
STEPS = st.lists(
    st.tuples(st.sampled_from([0, 1]), st.sampled_from(range(len(DOORS))), st.sampled_from(KEYS), st.integers(0, 1)),
    min_size=1,
    max_size=8,
)


def _objects() -> int:
    models = (Experiment, UploadedPromptSet, Decision, ServiceProfile, Comment)
    return sum(model.objects.count() for model in models)


def _check_answer(who: Member, other: Member, response) -> None:
    assert response.status_code in (200, 201, 302, 400, 404, 409, 422), response.status_code
    if response.status_code in (200, 201) and response["Content-Type"] == "application/json":
        body = response.json()
        assert body["spec"]["team"] == who.team.name
        assert SECRET[other.team.name] not in json.dumps(body)
    if response.status_code == 302:
        page = who.page.get(response.url)
        assert page.status_code == 200, response.url
        assert SECRET[other.team.name] not in page.text


@pytest.fixture
def members(celery_dispatch) -> list[Member]:
    teams = [Group.objects.create(name=name) for name in ("red", "blue")]
    users = [member(f"{team.name}-user", team) for team in teams]
    return [
        Member(
            team,
            client_of(user),
            token_client(user),
            seed_finished_experiment(owner=user, team=team, name=SECRET[team.name]),
        )
        for team, user in zip(teams, users, strict=True)
    ]


@pytest.mark.slow(reason="generated: 40 sequences of submissions through every door")
@hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_keys_reused_at_random_never_cross_a_team_or_fail(members, steps):
    for user, door, key, variant in steps:
        who, other = members[user], members[1 - user]
        before = _objects()
        response = DOORS[door](who, key, variant)
        _check_answer(who, other, response)
        if response.status_code in (409, 422):
            assert _objects() == before, "a key reused with another body stored something"


@pytest.mark.parametrize("door", DOORS, ids=[door.__name__.strip("_") for door in DOORS])
def test_every_door_stores_once_replays_the_same_and_refuses_another_body(members, door):
    """What the property test draws from: each door writes with a fresh key, points a retry at
    the first answer, refuses the key with another body, and takes the key again at another door's
    or user's hands as a new one."""
    red, blue = members
    first = door(red, "fresh", 0)
    assert first.status_code in (201, 302), first.content[:800]
    written = _objects()
    again = door(red, "fresh", 0)
    other = door(red, "fresh", 1)
    assert (again.status_code, other.status_code) in ((200, 422), (302, 409))
    assert (again.json()["id"] if again.status_code == 200 else again.url) == (
        first.json()["id"] if first.status_code == 201 else first.url
    )
    assert _objects() == written
    assert door(blue, "fresh", 0).status_code in (201, 302)
    assert _objects() == written + 1
