"""The inputs a careful tester found ending in HTTP 500, each through its real door (the
import page, the API, the prompt-set upload, the history's query string): each now answers
4xx with a message that names the problem, and stores nothing."""

import json
from html import unescape
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token

from experiments.form_kit import reject_controls
from experiments.models import Arm, Experiment, UploadedPromptSet
from experiments.rules import json_input

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vllm_bench"
DEEP = "[" * 100_000 + "]" * 100_000


def _real(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def _import(client, files: dict[str, str | bytes]):
    uploads = [
        SimpleUploadedFile(name, data.encode() if isinstance(data, str) else data, content_type="application/json")
        for name, data in files.items()
    ]
    return client.post(reverse("experiments:import"), {"name": "hostile import", "files": uploads})


def _speculative(**changes) -> str:
    return json.dumps(_real("ngram-k3-c1.json") | changes)


def _with_config(config: str) -> str:
    return _speculative(speculative_config=config)


BASELINE = json.dumps(_real("baseline-c1.json"))
IMPORT_CASES = [
    ("label over 100 characters", _speculative(label="n" * 101), "more than the 100 allowed"),
    ("lone surrogate in a label", _speculative(label="ngram \ud800"), "lone surrogate"),
    ("bidi override in a label", _speculative(label="ngram \u202egnp.exe"), "U+202E"),
    ("markup in a label", _speculative(label="<script>ngram</script>"), "< or >"),
    ("max_concurrency too large", _speculative(max_concurrency=3_000_000_000), "max_concurrency"),
    ("completed too large", _speculative(completed=3_000_000_000), "completed"),
    ("total_output_tokens as 1e20", _speculative(total_output_tokens=1e20), "total_output_tokens"),
    ("total_output_tokens beyond bigint", _speculative(total_output_tokens=10**20), "total_output_tokens"),
    ("spec_decode_num_drafts as 1e20", _speculative(spec_decode_num_drafts=1e20), "spec_decode_num_drafts"),
    ("an input length beyond its column", _speculative(input_lens=[3_000_000_000] * 16), "input_lens"),
    ("k of 100 in the config", _with_config('{"method": "ngram", "num_speculative_tokens": 100}'), "from 1 to 16"),
    ("k of -3 in the config", _with_config('{"method": "ngram", "num_speculative_tokens": -3}'), "from 1 to 16"),
    (
        "20 per-position rates",
        _speculative(spec_decode_per_position_acceptance_rates=[0.5] * 20, speculative_config=None),
        "at most 16 tokens a step",
    ),
    ("the baseline as the only config", _with_config('{"method": "baseline", "num_speculative_tokens": 3}'), "method"),
    ("Infinity as k", _with_config('{"method": "ngram", "num_speculative_tokens": Infinity}'), "Infinity"),
    ("NaN in the config", _with_config('{"method": "ngram", "num_speculative_tokens": 3, "x": NaN}'), "NaN"),
    ("NUL in the config", _with_config('{"method": "ngram", "num_speculative_tokens": 3, "x": "\\u0000"}'), "NUL"),
    ("deep brackets in the config", _with_config(DEEP), "nested deeper than 64"),
]


@pytest.mark.parametrize(("case", "content", "message"), IMPORT_CASES, ids=[case[0] for case in IMPORT_CASES])
def test_a_hostile_import_file_is_refused_by_name(logged_in_client, case, content, message):
    response = _import(logged_in_client, {"baseline.json": BASELINE, "hostile.json": content})
    assert response.status_code == 400, case
    assert message in unescape(response.text), case
    assert not Experiment.objects.exists()


def test_a_deeply_nested_import_file_is_refused_before_parsing(logged_in_client):
    response = _import(logged_in_client, {"deep.json": DEEP})
    assert response.status_code == 400
    assert "deep.json: not valid JSON at line 1, column 65: nested deeper than 64" in response.text
    assert not Experiment.objects.exists()


def test_nan_is_located_where_it_is(logged_in_client):
    content = _speculative().replace('"duration":', '"duration": NaN, "x":', 1)
    line = content[: content.index("NaN")].count("\n") + 1
    response = _import(logged_in_client, {"baseline.json": BASELINE, "nan.json": content})
    assert response.status_code == 400
    assert f"nan.json: not valid JSON at line {line}, column" in response.text
    assert "line 1, column 1:" not in response.text


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ('{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3, '
         '"trust_remote_code": true}', "does not pass trust_remote_code"),
        ('{"method": "draft_model", "num_speculative_tokens": 3, "model": "../../etc"}', "absolute path"),
        ('{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3, '
         '"x": {"y": [1, {"z": 2}]}}', "does not pass x"),
        ('{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5, "prompt_lookup_max": 3}',
         "exceeds prompt_lookup_max"),
    ],
)  # fmt: skip
def test_an_imported_config_carries_only_what_the_form_sets(logged_in_client, config, message):
    response = _import(logged_in_client, {"baseline.json": BASELINE, "config.json": _with_config(config)})
    assert response.status_code == 400
    assert message in unescape(response.text)
    assert not Arm.objects.exists()


# ---------------------------------------------------------------- the API and the upload


def _api(user) -> Client:
    token = Token.objects.create(user=user).key
    return Client(headers={"Authorization": f"Token {token}"})


@pytest.mark.parametrize("body", [DEEP, '{"name": "x", "description": ' + "[" * 5000 + "]" * 5000 + "}"])
def test_the_api_refuses_a_deep_body_with_a_json_400(user, body):
    response = _api(user).post(reverse("api:experiments"), body, content_type="application/json")
    assert response.status_code == 400
    assert "nested deeper than 64" in response.json()["detail"]
    assert not Experiment.objects.exists()


def test_the_api_refuses_a_lone_surrogate_in_a_name(user, celery_dispatch):
    body = '{"name": "ab\\ud800", "prompt_set": "chat", "arms": [{"method": "ngram"}]}'
    response = _api(user).post(reverse("api:experiments"), body, content_type="application/json")
    assert response.status_code == 400
    assert "lone surrogate" in response.json()["detail"]
    assert not Experiment.objects.exists()


def test_the_form_refuses_a_lone_surrogate_in_a_name():
    # A browser's form cannot send one (UTF-8 has no form for it); the API's JSON can, and the
    # API applies the form's rules.
    with pytest.raises(ValidationError, match="found U\\+D800 lone surrogate"):
        reject_controls("demo \ud800")


def _upload(client, name: str, content: str):
    upload = SimpleUploadedFile(name, content.encode("utf-8", "surrogatepass"), content_type="application/jsonl")
    return client.post(reverse("experiments:prompt_sets"), {"name": "hostile", "file": upload})


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (DEEP, "nested deeper than 64"),
        ('{"prompt": "hello \\ud800"}', "lone surrogate"),
        ('{"prompt": "hello", "category": "r\\u202etl"}', "U+202E"),
        ('{"prompt": "hello", "category": "<b>bold</b>"}', "< or >"),
    ],
)
def test_a_hostile_prompt_file_is_refused_by_line(logged_in_client, line, message):
    response = _upload(logged_in_client, "set.jsonl", '{"prompt": "first"}\n' + line + "\n")
    assert response.status_code == 400
    assert "set.jsonl, line 2" in response.text
    assert message in unescape(response.text)
    assert not UploadedPromptSet.objects.exists()


def test_the_history_refuses_the_last_date(logged_in_client):
    response = logged_in_client.get(reverse("experiments:list"), {"until": "9999-12-31"})
    assert response.status_code == 400
    assert "Give a date before 9999-12-31" in response.text


def test_the_json_reader_counts_depth_outside_strings_only():
    assert json_input.too_deep_at('["' + "[" * 100 + '"]') is None
    assert json_input.too_deep_at("[" * 64 + "]" * 64) is None
    assert json_input.too_deep_at("[" * 65 + "]" * 65) == 64
    assert json_input.problem({"a": ["b", {"c\x00": 1}]}) == "a NUL character (\\u0000)"
    assert json_input.problem(["ok", "\udfff"]) == "a lone surrogate (\\udfff, half of a UTF-16 pair)"
    assert json_input.problem({"fine": [1, 2.5, None, "text"]}) is None


# ---------------------------------------------------------------- messages that name the problem


def _decision(author):
    from experiments.decisions import services as decisions
    from experiments.decisions.services import DecisionSpec
    from experiments.models import Decision
    from tests.factories import seed_finished_experiment

    evidence = seed_finished_experiment(name="evidence")
    spec = DecisionSpec(
        service="chat", kind=Decision.Kind.NEEDS_MORE_DATA, arm=None, max_concurrency=None, metric="tpot",
        rationale="More blocks.", evidence=[evidence],
    )  # fmt: skip
    return decisions.decision_propose(by=author, spec=spec)


def test_an_action_with_a_broken_version_says_so(logged_in_client, user):
    from tests.factories import UserFactory

    decision = _decision(UserFactory(username="author"))
    approve = reverse("experiments:decision_act", args=[decision.pk, "approve"])
    response = logged_in_client.post(approve, {"version": "abc"}, follow=True)
    assert "sent no valid version" in response.text
    assert "Say why in the note" not in response.text
    decision.refresh_from_db()
    assert decision.state == "proposed"


def test_a_self_approval_is_a_403_page_with_the_reason(logged_in_client, user):
    decision = _decision(user)
    response = logged_in_client.post(reverse("experiments:decision_act", args=[decision.pk, "approve"]), {"version": 1})
    assert response.status_code == 403
    assert "its author cannot approve or reject it" in response.text


def test_a_tiny_request_rate_is_refused_in_a_readable_sentence(logged_in_client):
    from tests.factories import form_data

    response = logged_in_client.post(reverse("experiments:create"), form_data(request_rate="1e-300"))
    assert response.status_code == 400
    (error,) = response.context["form"].errors["request_rate"]
    assert "1e-300 req/s" in error
    assert "would take 2e+301 s just to arrive" in error
    assert len(error) < 300, error
    assert not Experiment.objects.exists()


@pytest.mark.parametrize("origin", ["abc", "999999"])
def test_a_clone_whose_origin_cannot_be_seen_is_refused_with_a_message(logged_in_client, origin):
    from tests.factories import form_data

    response = logged_in_client.post(reverse("experiments:create"), form_data() | {"origin": origin})
    assert response.status_code == 400
    assert 'id="origin-errors"' in response.text
    assert "is not one you can see" in response.text
    assert not Experiment.objects.exists()


def test_the_apis_oversized_body_and_server_errors_are_json(user, monkeypatch, settings):
    client = _api(user)
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    too_big = client.post(reverse("api:experiments"), {"name": "x" * 2000}, content_type="application/json")
    assert too_big.status_code == 413
    assert "larger than this site accepts" in too_big.json()["detail"]

    from experiments.api import views

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(views.ExperimentsView, "get", broken)
    client.raise_request_exception = False
    failed = client.get(reverse("api:experiments"))
    assert failed.status_code == 500
    assert failed.json() == {"detail": "The server failed on this request; the error was logged."}
    assert client.get("/api/v1/nothing-here/").json()["detail"] == "There is no such endpoint or object."


def test_the_token_page_is_never_cached(logged_in_client):
    response = logged_in_client.get(reverse("api:token"))
    assert "no-store" in response["Cache-Control"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"prompt_lookup_min": 2, "prompt_lookup_max": 4, "trust_remote_code": True},
            "does not pass trust_remote_code",
        ),
        ({}, "ngram needs prompt_lookup_min, prompt_lookup_max"),  # an import whose method came from its label
    ],
)
def test_a_deploy_decision_carries_only_a_config_that_passes_the_rule(logged_in_client, params, message):
    """An arm stored before the rule (an import kept any keys) or without settings (its method
    read from a label) cannot become the config a team copies into production."""
    from experiments.models import Decision
    from tests.factories import seed_finished_experiment

    evidence = seed_finished_experiment(name="evidence")
    arm = evidence.arms.get(label="n-gram k=4")
    Arm.objects.filter(pk=arm.pk).update(params=params)
    form = {
        "service": "chat", "kind": "deploy", "evidence": [evidence.pk], "arm": arm.pk, "max_concurrency": "4",
        "metric": "tpot", "rationale": "Faster.",
    }  # fmt: skip
    response = logged_in_client.post(f"{reverse('experiments:decision_new')}?experiments={evidence.pk}", form)
    assert response.status_code == 400
    (error,) = response.context["form"].errors["arm"]
    assert "cannot go to production" in error
    assert message in error
    assert not Decision.objects.exists()
