"""Property-based tests of every way input comes in through the pages and uploads (hypothesis): whatever
is posted, the answer is a page with a message or a redirect to what was stored, never a
server error, and a refused submission writes nothing. Markup in stored text stays text."""

import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils.html import escape
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from experiments.definition.forms.arms import ARM_FORMSET_PREFIX
from experiments.models import Arm, Comment, Decision, Experiment, Run, UploadedPromptSet
from tests.factories import NGRAM_ARM_FORM, ExperimentFactory, UserFactory, form_data
from tests.phases import examples

pytestmark = [pytest.mark.django_db, pytest.mark.slow(reason="generated: 60 examples a property")]

PROPERTY_SETTINGS = settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Text a user (or an attacker) might type: any Unicode, markup, numbers past every limit,
# and strings that other parsers choke on.
NASTY = st.sampled_from(
    [
        "", " ", "0", "-1", "1e309", "nan", "inf", "-0", "9" * 5000, "1" * 30, "1.5", "1,2,,3", "\x00", "\u202e",
        "<script>alert(1)</script>", "'; DROP TABLE experiments_experiment; --", "%s%n", "../../etc/passwd",
        "/" * 600, "１２", "٣", "\ufeff1", "=HYPERLINK(\"x\")", "x" * 20_000,
    ]
)  # fmt: skip
TEXT = st.one_of(NASTY, st.text(max_size=300))

EXPERIMENT_FIELDS = [
    "name", "description", "target_model", "worker_queue", "dtype", "requested_vllm_version", "max_model_len",
    "workload_kind", "prompt_set", "synthetic_input_len", "max_tokens", "num_prompts", "temperature", "top_p",
    "seed", "concurrency_levels", "repetitions", "equivalence_margin", "warmup_requests", "request_rate",
    "slo_ttft_ms", "slo_tpot_ms", "slo_e2e_ms",
]  # fmt: skip
ARM_FIELDS = ["method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max", "model", "label"]
FORMSET_FIELDS = ["TOTAL_FORMS", "INITIAL_FORMS", "MIN_NUM_FORMS", "MAX_NUM_FORMS"]


def _rows() -> tuple[int, int, int]:
    return Experiment.objects.count(), Arm.objects.count(), Run.objects.count()


@pytest.fixture
def client_as_alice(db):
    client = Client(raise_request_exception=False)
    client.force_login(UserFactory(username="alice"))
    return client


def _overrides(fields: list[str], prefix: str = "") -> st.SearchStrategy[dict]:
    return st.dictionaries(st.sampled_from([prefix + name for name in fields]), TEXT, max_size=4)


@PROPERTY_SETTINGS
@given(experiment=_overrides(EXPERIMENT_FIELDS), arm=_overrides(ARM_FIELDS, f"{ARM_FORMSET_PREFIX}-0-"))
@example(experiment={"concurrency_levels": "9" * 5000}, arm={})
@example(experiment={"request_rate": "1e-9"}, arm={})
@example(experiment={}, arm={f"{ARM_FORMSET_PREFIX}-0-label": " Baseline "})
def test_the_experiment_form_answers_anything_with_a_message_or_a_stored_experiment(
    client_as_alice, celery_dispatch, experiment, arm
):
    before = _rows()

    response = client_as_alice.post(reverse("experiments:create"), form_data(**experiment, **arm))

    assert response.status_code in (400, 302, 413), response.status_code
    if response.status_code == 302:
        created = Experiment.objects.latest("id")
        assert _rows() == (before[0] + 1, before[1] + created.arms.count(), before[2] + created.runs.count())
        assert created.runs.count() == created.arms.count() * len(created.concurrency_levels) * created.repetitions
    else:
        assert _rows() == before
        assert response.status_code == 413 or 'class="errors' in response.text or "errorlist" in response.text


@PROPERTY_SETTINGS
@given(management=st.dictionaries(st.sampled_from(FORMSET_FIELDS), TEXT, max_size=4))
@example(management={"TOTAL_FORMS": "100000"})
@example(management={"TOTAL_FORMS": "-1"})
def test_the_arm_formsets_management_form_never_breaks_the_page(client_as_alice, celery_dispatch, management):
    before = _rows()
    data = form_data(arms=(NGRAM_ARM_FORM,), **{f"{ARM_FORMSET_PREFIX}-{k}": v for k, v in management.items()})

    response = client_as_alice.post(reverse("experiments:create"), data)

    assert response.status_code in (400, 302)
    assert len(response.content) < 500_000
    if response.status_code == 400:
        assert _rows() == before


HISTORY_PARAMS = ["q", "status", "method", "since", "until", "decision", "decision_kind", "sort", "metric", "per_page"]


@PROPERTY_SETTINGS
@given(params=st.dictionaries(st.sampled_from([*HISTORY_PARAMS, "page", "model", "queue", "owner"]), TEXT, max_size=5))
def test_the_history_filters_answer_anything_with_a_list_or_a_named_error(client_as_alice, params):
    response = client_as_alice.get(reverse("experiments:list"), params)

    assert response.status_code in (200, 400)


@PROPERTY_SETTINGS
@given(experiments=st.lists(TEXT, max_size=4), arms=st.lists(TEXT, max_size=4))
@example(experiments=["9" * 5000, "1"], arms=[])
@example(experiments=["²", "99999999999999999999"], arms=[])
def test_the_comparison_answers_anything_with_a_page_or_a_named_error(client_as_alice, experiments, arms):
    response = client_as_alice.get(reverse("experiments:compare"), {"experiments": experiments, "arms": arms})

    assert response.status_code in (200, 400)


@PROPERTY_SETTINGS
@given(body=TEXT)
@example(body="<img src=x onerror=alert(1)>")
def test_a_comment_is_stored_as_typed_and_shown_inert_or_refused_with_a_message(client_as_alice, body):
    experiment = ExperimentFactory()
    before = Comment.objects.count()

    response = client_as_alice.post(reverse("experiments:comment", args=[experiment.pk]), {"body": body})

    assert response.status_code in (302, 413)
    page = client_as_alice.get(reverse("experiments:detail", args=[experiment.pk]))
    if Comment.objects.count() > before:
        assert "<img src=x" not in page.text
        assert "<script>alert" not in page.text
    else:
        assert response.status_code == 413 or "The comment was not saved" in page.text


@PROPERTY_SETTINGS
@given(fields=st.dictionaries(st.sampled_from(["service", "kind", "evidence", "arm", "max_concurrency", "rationale"]),
                              TEXT, max_size=6))  # fmt: skip
def test_a_decision_proposal_answers_anything_with_a_message_or_a_stored_proposal(client_as_alice, fields):
    before = Decision.objects.count()

    response = client_as_alice.post(reverse("experiments:decision_new"), fields)

    assert response.status_code in (200, 302, 400, 413)
    if response.status_code != 302:
        assert Decision.objects.count() == before


@pytest.mark.parametrize(
    "payload", ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", '"><svg onload=alert(1)>']
)
def test_markup_in_a_description_is_shown_as_text(client_as_alice, payload):
    experiment = ExperimentFactory(description=payload)

    page = client_as_alice.get(reverse("experiments:detail", args=[experiment.pk])).text

    assert payload not in page
    assert payload.replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;") in page


# A line of an upload: JSON of a prompt or of chat messages, or anything else at all.
UPLOAD_LINE = st.one_of(
    st.builds(lambda p, c: json.dumps({"prompt": p, "category": c}), TEXT, st.one_of(st.none(), TEXT)),
    st.builds(lambda m: json.dumps({"messages": [{"role": "user", "content": m}]}), TEXT),
    TEXT,
)


@PROPERTY_SETTINGS
@given(
    name=st.one_of(st.just("my-set"), TEXT),
    content=st.one_of(st.lists(UPLOAD_LINE, max_size=12).map("\n".join).map(str.encode), st.binary(max_size=2000)),
)
@example(name="my-set", content=b"\xff\xfe not utf-8")
@example(name="my-set", content=b'{"prompt": "<script>alert(1)</script>"}\n{"prompt": "two"}')
@example(name="my-set", content=b'{"prompt": "one"}\n' + b"[" * 100_000 + b"]" * 100_000)
@example(name="my-set", content=b'{"prompt": "lone \\ud800"}\n{"prompt": "two"}')
@example(name="my-set", content=b'{"prompt": "one", "category": "r\\u202etl"}\n{"prompt": "two", "category": "x"}')
def test_a_prompt_set_upload_is_stored_whole_or_refused_with_a_message(client_as_alice, name, content):
    before = UploadedPromptSet.objects.count()
    upload = SimpleUploadedFile("prompts.jsonl", content, content_type="application/jsonl")

    response = client_as_alice.post(reverse("experiments:prompt_sets"), {"name": name, "file": upload})

    assert response.status_code in (302, 400, 413)
    if response.status_code == 302:
        stored = UploadedPromptSet.objects.latest("id")
        page = client_as_alice.get(response.url).text
        assert "<script>alert" not in page
        assert stored.prompt_count == len(stored.items)
    else:
        assert UploadedPromptSet.objects.count() == before
        if response.status_code == 400:
            errors = [str(e) for field_errors in response.context["form"].errors.values() for e in field_errors]
            assert errors
            assert all(escape(error) in response.text for error in errors)


# ---------------------------------------------------------------- the import door

BENCH_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_bench"
BASELINE_FILE = (BENCH_FIXTURES / "baseline-c1.json").read_bytes()
ARM_FILE = json.loads((BENCH_FIXTURES / "ngram-k3-c1.json").read_text())
# JSON values past every column and rule: huge and negative numbers, floats where counts go,
# text with controls, nesting, and the constants JSON does not have (written raw below).
NASTY_JSON = st.one_of(
    st.sampled_from([3_000_000_000, 10**20, 1e20, -3, True, None, "8", [], {}, "\u202e", "x" * 200, 0.5]),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=50),
    st.lists(st.integers(min_value=-(2**40), max_value=2**40), max_size=3),
)
RAW_VALUES = ["NaN", "Infinity", "-Infinity", "[" * 100 + "]" * 100, '"\\ud800"', '"\\u0000"']


def _arm_file(changes: dict, raw: dict) -> bytes:
    text = json.dumps(ARM_FILE | changes)
    for key, value in raw.items():
        text = text[:-1] + f', "{key}": {value}}}'
    return text.encode()


@PROPERTY_SETTINGS
@given(
    changes=st.dictionaries(st.sampled_from([*ARM_FILE, "speculative_config", "label"]), NASTY_JSON, max_size=3),
    raw=st.dictionaries(
        st.sampled_from(["failed", "num_prompts", "label", "x"]), st.sampled_from(RAW_VALUES), max_size=1
    ),
)
@example(changes={"max_concurrency": 3_000_000_000}, raw={})
@example(changes={"speculative_config": '{"method": "ngram", "num_speculative_tokens": Infinity}'}, raw={})
@example(changes={"speculative_config": '{"method": "baseline", "num_speculative_tokens": 2}'}, raw={})
@example(changes={"label": "ngram \u202egnp.exe"}, raw={})
@example(changes={"spec_decode_per_position_acceptance_rates": [0.5] * 20, "speculative_config": None}, raw={})
def test_an_import_is_stored_whole_or_refused_with_a_message(client_as_alice, changes, raw):
    before = Experiment.objects.count()
    uploads = [
        SimpleUploadedFile("baseline.json", BASELINE_FILE, content_type="application/json"),
        SimpleUploadedFile("arm.json", _arm_file(changes, raw), content_type="application/json"),
    ]
    response = client_as_alice.post(reverse("experiments:import"), {"name": "import", "files": uploads})

    assert response.status_code in (302, 400)
    if response.status_code == 400:
        assert Experiment.objects.count() == before
        assert response.context["form"].errors
