"""The five cases a careful tester found on a running stack with two teams, replayed through
their real doors: a reused key never shows another team's experiment, a stored key never answers
500 or the URL map, a reused key with another body is refused, a path never breaks a shown
command, and the API's types, echoes and refusals are the documented ones."""

import json
import re
import shlex
from html import unescape

import pytest
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from experiments import submissions
from experiments.api.exceptions import NOT_FOUND
from experiments.models import Decision, Experiment, Submission, UploadedPromptSet
from experiments.rules.commands import SPECULATIVE_CONFIG_FLAG
from tests.api_helpers import SMALL_SPEC, token_client
from tests.factories import seed_finished_experiment
from tests.teams.helpers import client_of, jsonl, member

pytestmark = pytest.mark.django_db

KEY = re.compile(r'name="submission_key" value="([^"]+)"')
SPEC = SMALL_SPEC | {"name": "red sweep", "prompt_set": "code_edit"}


@pytest.fixture
def red():
    return Group.objects.create(name="red")


@pytest.fixture
def blue():
    return Group.objects.create(name="blue")


@pytest.fixture
def alice(red):
    return member("alice", red)


@pytest.fixture
def bob(blue):
    return member("bob", blue)


def _submit(user, spec: dict, key: str):
    return token_client(user).post(
        reverse("api:experiments"), spec, content_type="application/json", headers={"Idempotency-Key": key}
    )


# ---------------------------------------------------------------- 1. a key from another door


def test_a_form_key_sent_as_the_apis_key_creates_the_users_own_experiment(alice, bob, red, blue, celery_dispatch):
    """Alice sends the key of her prompt-set upload form to the API, after Bob's experiment was
    created through that very form key of his: she gets a new experiment of her own."""
    bobs = seed_finished_experiment(owner=bob, team=blue, name="blue secret")
    upload_page = client_of(alice).get(reverse("experiments:prompt_sets"))
    key = KEY.findall(upload_page.text)[0]
    client_of(alice).post(
        reverse("experiments:prompt_sets"),
        {"name": "red-set", "file": SimpleUploadedFile("r.jsonl", jsonl()), "submission_key": key},
    )
    assert UploadedPromptSet.objects.count() == 1
    Submission.objects.create(user=bob, kind=Submission.Kind.API, door="/api/v1/experiments/", key=key,
                              fingerprint="x", location=str(bobs.pk))  # fmt: skip

    response = _submit(alice, SPEC, key)

    assert response.status_code == 201, response.content
    assert response.json()["id"] != bobs.pk
    assert Experiment.objects.get(pk=response.json()["id"]).owner == alice
    assert "blue secret" not in response.text


def test_a_replay_is_authorised_again(alice, red, celery_dispatch):
    """The first submission's experiment moved to a team she has left: the replay is a 404."""
    first = _submit(alice, SPEC, "moved")
    assert first.status_code == 201
    Experiment.objects.filter(pk=first.json()["id"]).update(team=Group.objects.create(name="green"))

    again = _submit(alice, SPEC, "moved")

    assert again.status_code == 404
    assert again.json() == {"detail": NOT_FOUND}


# ---------------------------------------------------------------- 2. a stored answer that is not an experiment


@pytest.mark.parametrize("stored", ["/experiments/1/#comments", "", "/api/v1/experiments/x/", "1; DROP"])
def test_a_stored_answer_that_is_no_experiment_is_a_plain_json_404(alice, stored):
    Submission.objects.create(user=alice, kind=Submission.Kind.API, door="/api/v1/experiments/", key="odd",
                              fingerprint=submissions.body_fingerprint(SPEC), location=stored)  # fmt: skip

    response = _submit(alice, SPEC, "odd")

    assert response.status_code == 404
    assert set(response.json()) == {"detail"}
    for leak in ("tried", "urls.py", "URLPattern", "/work/", "DoesNotExist"):
        assert leak not in response.text


def test_an_unknown_api_path_is_a_json_404_naming_nothing(alice):
    response = token_client(alice).get("/api/v1/experiments/1/comments/")
    assert response.status_code == 404
    assert response.json() == {"detail": "There is no such endpoint or object."}


# ---------------------------------------------------------------- 3. the same key, another body


def test_the_same_key_with_another_body_is_a_422_that_creates_nothing(alice, celery_dispatch):
    first = _submit(alice, SPEC, "k-1")
    other = _submit(alice, SPEC | {"name": "another sweep"}, "k-1")
    same = _submit(alice, SPEC, "k-1")

    assert (first.status_code, other.status_code, same.status_code) == (201, 422, 200)
    assert "different request body" in other.json()["detail"]
    assert same.json()["id"] == first.json()["id"]
    assert Experiment.objects.count() == 1


# ---------------------------------------------------------------- 4. a path that breaks the shell

HOSTILE_PATHS = ["it's", "a`id`b", "a b", "a<b", "$(id)", "x;id", "-x", "a\nb", 'a"b', "a|b", "ü"]


@pytest.mark.parametrize("tail", HOSTILE_PATHS)
def test_the_form_and_the_api_refuse_a_model_path_that_a_shell_would_read_otherwise(alice, settings, tail):
    path = f"{settings.SPECDASH_MODELS_DIR}/{tail}"
    draft = {"method": "draft_model", "num_speculative_tokens": 2, "model": path}
    for spec in (SPEC | {"target_model": path}, SPEC | {"arms": [draft]}):
        response = token_client(alice).post(reverse("api:experiments"), spec, content_type="application/json")
        assert response.status_code == 400, (tail, response.content)
    assert not Experiment.objects.exists()


@pytest.mark.parametrize("tail", ["it's", "a b", "a<b", "$(id)"])
def test_an_imported_config_refuses_such_a_path(logged_in_client, settings, tail):
    from tests.test_hostile_input import BASELINE, _import, _with_config

    config = (
        f'{{"method": "draft_model", "num_speculative_tokens": 3, "model": "{settings.SPECDASH_MODELS_DIR}/{tail}"}}'
    )
    response = _import(logged_in_client, {"baseline.json": BASELINE, "config.json": _with_config(config)})
    assert response.status_code == 400
    assert "A model path may hold only" in unescape(response.text)
    assert not Experiment.objects.exists()


def test_a_deploy_decision_shows_its_config_as_one_shell_word(alice, red):
    """An arm stored before the rule, its model path holding quotes and a command: the decision
    page's --speculative-config splits back into the flag and the exact JSON."""
    from experiments.decisions import services as decisions
    from experiments.decisions.services import DecisionSpec

    evidence = seed_finished_experiment(owner=alice, team=red, name="evidence")
    arm = evidence.arms.get(label="n-gram k=4")
    arm.params = arm.params | {"note": "'; id; echo '`id`$(id)"}
    arm.save(update_fields=["params"])
    spec = DecisionSpec(
        service="chat", kind=Decision.Kind.DEPLOY, arm=arm, max_concurrency=4, metric="tpot",
        rationale="Faster.", evidence=[evidence],
    )  # fmt: skip
    decision = decisions.decision_propose(by=alice, spec=spec)

    page = client_of(alice).get(reverse("experiments:decision", args=[decision.pk]))
    shown = unescape(re.search(r"<code>(--speculative-config .*?)</code>", page.text, re.S).group(1))

    assert shlex.split(shown) == [SPECULATIVE_CONFIG_FLAG, json.dumps(decision.speculative_config, sort_keys=True)]


# ---------------------------------------------------------------- 5. the smaller ones


@pytest.mark.parametrize(
    ("field", "value"),
    [("temperature", "0.5"), ("max_tokens", "8"), ("concurrency_levels", ["1", "4"]), ("repetitions", True)],
)
def test_the_api_takes_numbers_as_numbers(alice, field, value):
    response = token_client(alice).post(
        reverse("api:experiments"), SPEC | {field: value}, content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["errors"][field][0].startswith("Must be")
    assert not Experiment.objects.exists()


@pytest.mark.parametrize("field", ["max_tokens", "temperature", "max_num_seqs", "seed", "concurrency_levels"])
def test_a_huge_number_is_refused_without_being_echoed(alice, field):
    huge = int("9" * 4000)
    response = token_client(alice).post(
        reverse("api:experiments"),
        SPEC | {field: [huge] if field == "concurrency_levels" else huge},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert "9" * 40 not in response.text
    assert len(response.content) < 4000


def test_nine_arms_are_refused_in_the_apis_words(alice):
    arms = [
        {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
        for k in range(1, 10)
    ]
    response = token_client(alice).post(
        reverse("api:experiments"), SPEC | {"arms": arms}, content_type="application/json"
    )
    assert response.status_code == 400
    assert "At most 8 speculative arms." in response.json()["messages"]
    assert "forms" not in response.text


def test_a_bidi_override_in_a_prompt_is_refused(logged_in_client):
    upload = SimpleUploadedFile("set.jsonl", '{"prompt": "first"}\n{"prompt": "evil \u202egnp.exe"}\n'.encode())
    response = logged_in_client.post(reverse("experiments:prompt_sets"), {"name": "bidi", "file": upload})
    assert response.status_code == 400
    assert "set.jsonl, line 2" in response.text
    assert "U+202E" in unescape(response.text)
    assert not UploadedPromptSet.objects.exists()


def test_joiners_and_right_to_left_text_stay_in_a_prompt(logged_in_client):
    text = "سلام\u200cدنیا 👩\u200d💻 \u200fשלום"
    upload = SimpleUploadedFile("set.jsonl", f'{{"prompt": "{text}"}}\n{{"prompt": "second"}}\n'.encode())
    response = logged_in_client.post(reverse("experiments:prompt_sets"), {"name": "rtl", "file": upload})
    assert response.status_code == 302, response.content[:500]


@pytest.mark.parametrize(("model_id", "message"), [("<b>llama</b>", "< or >"), ("llama\u202e", "U+202E")])
def test_an_imports_model_id_follows_the_rules_for_a_name(logged_in_client, model_id, message):
    from tests.test_hostile_input import BASELINE, _import, _speculative

    response = _import(logged_in_client, {"baseline.json": BASELINE, "spec.json": _speculative(model_id=model_id)})
    assert response.status_code == 400
    assert "spec.json: the model_id holds" in unescape(response.text)
    assert message in unescape(response.text)
    assert not Experiment.objects.exists()


def test_the_token_renewal_without_a_csrf_token_is_a_json_403(alice):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    response = client.post(reverse("api:token_rotate"))
    assert response.status_code == 403
    assert response["Content-Type"] == "application/json"
    assert "CSRF" in response.json()["detail"]
