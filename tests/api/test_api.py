"""The REST API: its schema, token authentication, submission with the form's rules and
messages, progress, cancel, and results whose numbers are the experiment page's."""

import json
import re
from html import unescape
from pathlib import Path

import pytest
import yaml
from django.test import Client
from django.urls import reverse
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiYamlRenderer
from rest_framework.authtoken.models import Token

from experiments.api import serializers
from experiments.api.submission import spec_from_experiment
from experiments.definition.forms.arms import ArmForm
from experiments.definition.forms.experiment import ExperimentForm
from experiments.models import Arm, Experiment, RequestRecord, Run
from tests.factories import (
    DRAFT_ARM_FORM,
    NGRAM_ARM_FORM,
    ExperimentFactory,
    UserFactory,
    form_data,
    seed_finished_experiment,
)

pytestmark = pytest.mark.django_db

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}


@pytest.fixture
def api(user):
    """A client that sends alice's token, as the CLI does."""
    token = Token.objects.create(user=user)
    return Client(headers={"Authorization": f"Token {token.key}"})


def _spec(**overrides) -> dict:
    spec = {
        "name": "api sweep", "prompt_set": "chat", "dtype": "float32", "max_tokens": 64, "num_prompts": 20,
        "concurrency_levels": [1, 4], "repetitions": 2, "arms": [NGRAM],
    }  # fmt: skip
    return {name: value for name, value in (spec | overrides).items() if value is not None}


def _post(api, spec) -> "Client.response":
    return api.post(reverse("api:experiments"), spec, content_type="application/json")


# ---------------------------------------------------------------- schema


def test_the_committed_schema_is_the_generated_one():
    generated = OpenApiYamlRenderer().render(SchemaGenerator().get_schema(request=None, public=True)).decode()
    assert generated == SCHEMA_FILE.read_text(), (
        "The API changed: regenerate the committed schema with "
        "./dev manage spectacular --validate --file docs/openapi.yaml"
    )


def test_the_schema_is_served_without_a_login(client):
    response = client.get(reverse("api:schema"), {"format": "json"})

    assert response.status_code == 200
    schema = json.loads(response.content)
    assert "/api/v1/experiments/" in schema["paths"]
    assert schema["paths"]["/api/v1/experiments/"]["post"]["operationId"] == "experiments_submit"


def test_the_spec_schema_lists_every_form_field():
    schema = yaml.safe_load(SCHEMA_FILE.read_text())
    spec = schema["components"]["schemas"]["ExperimentSpec"]["properties"]
    assert set(spec) == {*ExperimentForm.base_fields, "arms"}
    assert set(schema["components"]["schemas"]["ArmSpec"]["properties"]) == set(ArmForm.base_fields)


# ---------------------------------------------------------------- tokens


@pytest.mark.parametrize("header", [None, "Token 0123456789abcdef0123456789abcdef01234567", "Bearer x"])
def test_the_api_needs_a_valid_token(client, header):
    headers = {"Authorization": header} if header else {}

    response = client.get(reverse("api:experiments"), headers=headers)

    assert response.status_code == 401


def test_the_token_page_makes_and_replaces_a_token(logged_in_client, user):
    assert "no token yet" in logged_in_client.get(reverse("api:token")).content.decode()

    logged_in_client.post(reverse("api:token_rotate"))
    first = Token.objects.get(user=user).key
    logged_in_client.post(reverse("api:token_rotate"))
    second = Token.objects.get(user=user).key

    assert first != second
    assert second in logged_in_client.get(reverse("api:token")).content.decode()
    old = Client(headers={"Authorization": f"Token {first}"})
    assert old.get(reverse("api:experiments")).status_code == 401


# ---------------------------------------------------------------- submission


def test_submit_creates_the_experiment_as_the_form_would(api, user, logged_in_client, celery_dispatch):
    response = _post(api, _spec(arms=[NGRAM, {"method": "draft_model", "model": DRAFT_ARM_FORM["model"]}]))

    assert response.status_code == 201, response.content
    body = response.json()
    by_api = Experiment.objects.get(pk=body["id"])
    assert by_api.owner == user
    assert [arm["label"] for arm in body["arms"]] == ["baseline", "n-gram lookup k=4", "Draft model k=4"]
    assert body["links"]["progress"] == reverse("api:experiment-progress", args=[by_api.pk])
    logged_in_client.post(
        reverse("experiments:create"),
        form_data(arms=(NGRAM_ARM_FORM, DRAFT_ARM_FORM), name="api sweep", objective="interactive"),
    )
    by_form = Experiment.objects.exclude(pk=by_api.pk).get()
    assert spec_from_experiment(by_api) == spec_from_experiment(by_form)


def test_fields_left_out_take_the_forms_initial_values(api, celery_dispatch):
    response = _post(api, {"name": "defaults", "prompt_set": "chat", "concurrency_levels": [1], "arms": [{}]})

    assert response.status_code == 201, response.content
    experiment = Experiment.objects.get(pk=response.json()["id"])
    assert experiment.server_per_block is True
    assert (experiment.repetitions, experiment.sequential, experiment.primary_metric) == (10, True, "server_tpot")
    assert experiment.primary_levels == []
    # Blocks added until settled: the first three are queued, the rest only if a primary cell is open.
    assert sorted(set(experiment.runs.values_list("repetition", flat=True))) == [1, 2, 3]
    assert experiment.equivalence_margin == pytest.approx(0.02)
    assert experiment.max_tokens == 128
    assert experiment.arms.get(position=1).params == {"prompt_lookup_min": 2, "prompt_lookup_max": 4}


def _form_messages(client, field: str, **overrides) -> list[str]:
    """The messages the experiment page's form gives the same protocol for `field`."""
    response = client.post(reverse("experiments:create"), form_data(**overrides))
    return response.context["form"].errors[field]


@pytest.mark.parametrize(
    ("spec", "form", "field"),
    [
        ({"concurrency_levels": [1, 5000]}, {"concurrency_levels": "1, 5000"}, "concurrency_levels"),
        ({"num_prompts": 5}, {"num_prompts": "5"}, "num_prompts"),
        ({"max_tokens": 600}, {"max_tokens": "600"}, "max_tokens"),
        ({"equivalence_margin": 60}, {"equivalence_margin": "60"}, "equivalence_margin"),
        ({"name": "<b>x</b>"}, {"name": "<b>x</b>"}, "name"),
        ({"draft_calibration": True}, {"draft_calibration": "on"}, "draft_calibration"),  # no draft-model arm
        ({"gpu_memory_utilization": 0}, {"gpu_memory_utilization": "0"}, "gpu_memory_utilization"),
        ({"kv_cache_dtype": "int3"}, {"kv_cache_dtype": "int3"}, "kv_cache_dtype"),
        (
            {"max_num_seqs": 64, "max_num_batched_tokens": 16},
            {"max_num_seqs": "64", "max_num_batched_tokens": "16"},
            "max_num_batched_tokens",
        ),
    ],
)
def test_a_refused_spec_gets_the_forms_message(api, logged_in_client, spec, form, field):
    response = _post(api, _spec(**spec))

    assert response.status_code == 400
    messages = response.json()["errors"][field]
    assert messages == _form_messages(logged_in_client, field, **form)
    assert not Experiment.objects.exists()


def test_arm_errors_are_given_per_arm_with_the_forms_messages(api):
    spec = _spec(arms=[NGRAM, {"method": "ngram", "prompt_lookup_min": 5, "prompt_lookup_max": 3}, {"method": "eagle"}])

    body = _post(api, spec).json()

    assert body["errors"]["arms"][0] == {}
    assert body["errors"]["arms"][1] == {"prompt_lookup_min": ["Lookup min (5) must not exceed lookup max (3)."]}
    assert body["errors"]["arms"][2] == {"model": ["Give the path of the EAGLE head."]}
    assert "arm 3, Draft / head path: Give the path of the EAGLE head." in body["messages"]


def test_an_ngram_gpu_arm_is_submitted_with_its_lookup_lengths(api, celery_dispatch):
    arm = {"method": "ngram_gpu", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 2}

    response = _post(api, _spec(arms=[arm]))

    assert response.status_code == 201, response.content
    stored = Experiment.objects.get().arms.get(method="ngram_gpu")
    assert stored.speculative_config() == arm


def test_an_ngram_gpu_arm_with_bad_lookup_lengths_is_refused(api):
    spec = _spec(arms=[{"method": "ngram_gpu", "prompt_lookup_min": 5, "prompt_lookup_max": 3}, {"method": "ngram_gpu",
                 "prompt_lookup_min": None}])  # fmt: skip

    body = _post(api, spec).json()

    assert body["errors"]["arms"][0] == {"prompt_lookup_min": ["Lookup min (5) must not exceed lookup max (3)."]}
    assert body["errors"]["arms"][1] == {"prompt_lookup_min": ["n-gram arms need this."]}
    assert not Experiment.objects.exists()


def test_the_schema_offers_ngram_gpu():
    schema = yaml.safe_load(SCHEMA_FILE.read_text())

    assert "ngram_gpu" in schema["components"]["schemas"]["MethodEnum"]["enum"]


def test_two_identical_arms_are_refused_as_by_the_form(api):
    body = _post(api, _spec(arms=[NGRAM, NGRAM])).json()

    assert body["errors"]["arms"][1] == {"non_field_errors": ["Another arm has the same method, k and parameters."]}


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"concurency_levels": [1]}, "concurency_levels", "Unknown field “concurency_levels”"),
        ({"aa_replicate": "yes"}, "aa_replicate", "Must be true or false."),
        ({"max_tokens": [64]}, "max_tokens", "Must be a number, not a list."),
        ({"max_tokens": "64"}, "max_tokens", "Must be a number, not text."),
        ({"name": 7}, "name", "Must be text, not a number."),
        ({"arms": {"method": "ngram"}}, "arms", "A list of speculative arms"),
    ],
)
def test_a_spec_of_the_wrong_shape_is_refused_by_field(api, spec, field, message):
    body = _post(api, _spec(**spec)).json()

    assert any(message in text for text in body["errors"][field])


def test_no_arms_is_the_formsets_message(api):
    body = _post(api, _spec(arms=[])).json()

    assert (
        body["errors"]["arms_non_field_errors"]
        == body["messages"]
        == ["Add at least one speculative arm; the baseline is added for you."]
    )


def test_a_body_that_is_not_json_is_a_400(api):
    response = api.post(reverse("api:experiments"), "{not json", content_type="application/json")

    assert response.status_code == 400
    assert "The body is not valid JSON: Expecting property name" in response.json()["detail"]


def test_a_body_that_is_not_an_object_is_refused(api):
    assert _post(api, [1, 2]).json()["messages"] == ["The spec must be a JSON object."]


# ---------------------------------------------------------------- progress and cancel


def test_progress_counts_runs_in_schedule_order(api, celery_dispatch):
    experiment_id = _post(api, _spec()).json()["id"]

    progress = api.get(reverse("api:experiment-progress", args=[experiment_id])).json()

    assert progress["status"] == "queued"
    assert progress["total"] == progress["queued"] == 2 * 2 * 2
    assert progress["done"] == 0
    assert [(r["repetition"], r["block_position"]) for r in progress["runs"]] == sorted(
        (r["repetition"], r["block_position"]) for r in progress["runs"]
    )


def test_a_sweeps_runs_are_labelled_in_the_progress_and_its_lengths_on_the_arm(api, celery_dispatch):
    body = _post(api, _spec(arms=[NGRAM | {"synthetic_sweep": [2.5, 1.5]}], repetitions=1)).json()

    progress = api.get(reverse("api:experiment-progress", args=[body["id"]])).json()

    assert body["arms"][1]["synthetic_sweep"] == [1.5, 2.5]
    assert body["arms"][0]["synthetic_sweep"] == []
    lengths = sorted((r["synthetic_acceptance_length"] or 0, r["concurrency"]) for r in progress["runs"])
    assert lengths == [(0, 1), (0, 1), (0, 4), (0, 4), (1.5, 1), (1.5, 4), (2.5, 1), (2.5, 4)]


def test_the_owner_cancels_and_a_second_cancel_is_a_conflict(api, celery_dispatch):
    experiment_id = _post(api, _spec()).json()["id"]
    url = reverse("api:experiment-cancel", args=[experiment_id])

    first, second = api.post(url), api.post(url)

    assert first.status_code == 200
    assert first.json()["cancelled"] == first.json()["total"]
    assert Experiment.objects.get(pk=experiment_id).status == Experiment.Status.CANCELLED
    assert second.status_code == 409
    assert second.json()["detail"] == "The experiment is cancelled: nothing to cancel."


def test_someone_else_cannot_cancel(api, celery_dispatch):
    other = ExperimentFactory(owner=UserFactory(username="bob"))

    response = api.post(reverse("api:experiment-cancel", args=[other.pk]))

    assert response.status_code == 403
    assert Experiment.objects.get(pk=other.pk).status == Experiment.Status.QUEUED


def test_a_missing_experiment_is_a_404(api):
    assert api.get(reverse("api:experiment-results", args=[999999])).status_code == 404


# ---------------------------------------------------------------- results: the page's numbers


@pytest.fixture
def finished():
    return seed_finished_experiment()


def _page_chart_data(client, experiment) -> dict:
    html = client.get(reverse("experiments:detail", args=[experiment.pk])).content.decode()
    found = re.search(r'<script id="results-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(found.group(1)), html


def test_results_numbers_equal_the_pages(api, logged_in_client, finished):
    chart, html = _page_chart_data(logged_in_client, finished)

    body = api.get(reverse("api:experiment-results", args=[finished.pk])).json()

    assert body["analysed"] is True
    cells = {(c["arm_id"], c["level"]): c for c in body["summaries"]}
    assert len(cells) == len(chart["cells"])
    for page_cell in chart["cells"]:
        cell = cells[(page_cell["arm"], page_cell["level"])]
        for column, spread in cell["metrics"].items():
            assert [spread["mean"], spread["min"], spread["max"]] == page_cell[column]
    speedups = {(s["arm_id"], s["level"], s["metric"]): s for s in body["speedups"]}
    for point in chart["speedups"]:
        mine = speedups[(point["arm"], point["level"], point["metric"])]
        assert (mine["point"], mine["ci_low"], mine["ci_high"], mine["outcome"]) == (
            point["point"], point["lo"], point["hi"], point["outcome"],
        )  # fmt: skip
    assert {s["metric"] for s in body["speedups"]} == {
        "server_tpot", "tpot", "e2e", "e2e_p95", "ttft", "output_throughput", "request_throughput",
    }  # fmt: skip
    acceptance = {a["arm_id"]: a for a in body["acceptance_by_position"]}
    for page_arm in chart["acceptance"]:
        assert acceptance[page_arm["arm"]]["unconditional"] == page_arm["unconditional"]
        assert acceptance[page_arm["arm"]]["conditional"] == page_arm["conditional"]
    for verdict in body["verdicts"]:
        assert unescape(verdict["text"]) in unescape(html)
    for name in ("tpot_cdf", "acceptance_length_cdf", "along_output", "predicted"):
        assert body["series"][name] == chart[name]
    assert [v["break_even"] | {"arm": v["arm_id"], "metric": v["metric"]} for v in body["verdicts"]] == chart[
        "break_even"
    ]


def test_results_before_any_run_are_empty(api, celery_dispatch):
    experiment_id = _post(api, _spec()).json()["id"]

    body = api.get(reverse("api:experiment-results", args=[experiment_id])).json()

    assert body["analysed"] is False
    assert body["summaries"] == body["speedups"] == body["verdicts"] == []


def test_request_rows_page_through_every_row_as_the_download_gives_them(api, logged_in_client, finished):
    download = json.loads(
        b"".join(logged_in_client.get(reverse("experiments:requests_json", args=[finished.pk])).streaming_content)
    )
    rows, url = [], reverse("api:experiment-requests", args=[finished.pk]) + "?page_size=100"
    while url:
        page = api.get(url).json()
        rows += page["results"]
        url = page["next"]

    assert len(rows) == RequestRecord.objects.filter(run__experiment=finished).count() == len(download)
    assert rows == download
    assert set(rows[0]) == set(serializers.RequestRowSerializer().fields)


def test_summary_rows_are_the_downloads(api, logged_in_client, finished):
    download = json.loads(
        b"".join(logged_in_client.get(reverse("experiments:summaries_json", args=[finished.pk])).streaming_content)
    )

    page = api.get(reverse("api:experiment-summaries", args=[finished.pk]) + "?page_size=1000").json()

    assert page["count"] == Run.objects.filter(experiment=finished).count()
    assert page["results"] == download
    assert set(page["results"][0]) == set(serializers.SummaryRowSerializer().fields)


def test_the_experiment_reads_back_as_a_spec_that_submits_again(api, celery_dispatch):
    first = _post(api, _spec(aa_replicate=True, slo_tpot_ms=50)).json()

    again = _post(api, first["spec"])

    assert again.status_code == 201, again.content
    assert again.json()["spec"] == first["spec"]


def test_server_settings_by_the_forms_names_are_stored_and_read_back(api, celery_dispatch):
    draft = {"method": "draft_model", "model": DRAFT_ARM_FORM["model"], "draft_tensor_parallel_size": 1}
    settings = {
        "gpu_memory_utilization": 0.8,
        "max_num_seqs": 16,
        "max_num_batched_tokens": 4096,
        "quantization": "fp8",
    }
    first = _post(api, _spec(arms=[NGRAM, draft], **settings)).json()

    experiment = Experiment.objects.get(pk=first["id"])
    assert {name: getattr(experiment, name) for name in settings} == settings
    assert experiment.kv_cache_dtype == ""
    assert first["spec"] | settings == first["spec"]
    assert first["spec"]["kv_cache_dtype"] is None
    assert first["spec"]["arms"][1]["draft_tensor_parallel_size"] == 1
    assert "draft_tensor_parallel_size" not in first["spec"]["arms"][0]
    assert experiment.arms.get(method=Arm.Method.DRAFT_MODEL).speculative_config()["draft_tensor_parallel_size"] == 1


def test_the_list_is_paginated_newest_first(api, celery_dispatch):
    ids = [_post(api, _spec(name=f"e{i}")).json()["id"] for i in range(3)]

    page = api.get(reverse("api:experiments") + "?page_size=2").json()

    assert page["count"] == 3
    assert [row["id"] for row in page["results"]] == ids[::-1][:2]
    assert page["results"][0]["runs_total"] == 8


def test_an_unknown_status_filter_is_a_400_that_names_the_statuses(api):
    for wanted in ("bogus", "finished\x00"):
        response = api.get(reverse("api:experiments"), {"status": wanted})
        assert response.status_code == 400
        assert "finished" in response.json()["detail"]
    assert api.get(reverse("api:experiments"), {"status": "finished"}).status_code == 200


def test_a_batch_size_schedule_is_passed_in_the_speculative_config_and_read_back(api, celery_dispatch):
    arm = NGRAM | {"num_speculative_tokens_per_batch_size": [[9, 64, 0], [1, 8, 4]]}

    first = _post(api, _spec(arms=[arm]))

    assert first.status_code == 201, first.content
    stored = Experiment.objects.get().arms.get(method="ngram")
    assert stored.speculative_config() == NGRAM | {"num_speculative_tokens_per_batch_size": [[1, 8, 4], [9, 64, 0]]}
    (read_back,) = first.json()["spec"]["arms"]
    assert read_back["num_speculative_tokens_per_batch_size"] == [[1, 8, 4], [9, 64, 0]]
    again = _post(api, first.json()["spec"])
    assert again.status_code == 201, again.content


def test_a_batch_size_schedule_vllm_refuses_is_refused_by_the_api(api):
    body = _post(api, _spec(arms=[NGRAM | {"num_speculative_tokens_per_batch_size": [[2, 8, 4]]}])).json()

    assert body["errors"]["arms"][0] == {
        "num_speculative_tokens_per_batch_size": [
            "k by batch size: the first band must start at batch size 1, not 2 (vLLM refuses it)."
        ]
    }
