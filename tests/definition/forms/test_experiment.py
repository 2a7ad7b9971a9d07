"""The experiment form and the arm formset (experiments/definition/forms/experiment.py): every bad
input is refused on its own field and stores nothing; a good input becomes an experiment with
arms, runs and a dispatch."""

from unittest import mock

import pytest
from django.conf import settings
from django.urls import reverse

from experiments.definition import services as definition
from experiments.definition.forms.experiment import ExperimentForm, protocol_is_valid
from experiments.models import Arm, Experiment, Run
from experiments.prompts import catalog
from tests.definition.forms.helpers import bind
from tests.factories import DRAFT_ARM_FORM, NGRAM_ARM_FORM, UserFactory, form_data

# The form reads the user's teams and prompt sets.
pytestmark = pytest.mark.django_db


MODELS = settings.SPECDASH_MODELS_DIR


FIRST_K = ("arm", 0, "num_speculative_tokens")


# (form data, where the error must be): "field" of the experiment form, ("arm", index,
# field) of an arm ("__all__" for the arm as a whole), or "arms" for the formset.
BAD_INPUTS = {
    "no arms": (form_data(arms=[]), "arms"),
    "every arm removed": (form_data(arms=[{**NGRAM_ARM_FORM, "DELETE": "on"}]), "arms"),
    "duplicate arms": (form_data(arms=[NGRAM_ARM_FORM, {**NGRAM_ARM_FORM, "label": "again"}]), ("arm", 1, "__all__")),
    "duplicate labels": (
        form_data(arms=[{**NGRAM_ARM_FORM, "label": "fast"}, {**DRAFT_ARM_FORM, "label": "fast"}]),
        ("arm", 1, "label"),
    ),
    "label taken by the baseline": (form_data(arms=[{**NGRAM_ARM_FORM, "label": "baseline"}]), ("arm", 0, "label")),
    "k = 0": (form_data(arms=[{**NGRAM_ARM_FORM, "num_speculative_tokens": "0"}]), FIRST_K),
    "k = 17": (form_data(arms=[{**NGRAM_ARM_FORM, "num_speculative_tokens": "17"}]), FIRST_K),
    "k missing": (form_data(arms=[{**NGRAM_ARM_FORM, "num_speculative_tokens": ""}]), FIRST_K),
    "k malformed": (form_data(arms=[{**NGRAM_ARM_FORM, "num_speculative_tokens": "four"}]), FIRST_K),
    "concurrency 0": (form_data(concurrency_levels="0, 4"), "concurrency_levels"),
    "concurrency negative": (form_data(concurrency_levels="-1"), "concurrency_levels"),
    "concurrency absurd": (form_data(concurrency_levels="1, 2000"), "concurrency_levels"),
    "concurrency 13 levels": (
        form_data(concurrency_levels=" ".join(str(n) for n in range(1, 14))),
        "concurrency_levels",
    ),
    "concurrency duplicate": (form_data(concurrency_levels="1, 4, 4"), "concurrency_levels"),
    "concurrency malformed": (form_data(concurrency_levels="1, four"), "concurrency_levels"),
    "concurrency fraction": (form_data(concurrency_levels="1.5"), "concurrency_levels"),
    "concurrency empty": (form_data(concurrency_levels=" , "), "concurrency_levels"),
    "draft without path": (form_data(arms=[{**DRAFT_ARM_FORM, "model": ""}]), ("arm", 0, "model")),
    "EAGLE without path": (form_data(arms=[{"method": "eagle", "num_speculative_tokens": "3"}]), ("arm", 0, "model")),
    "EAGLE-3 without path": (
        form_data(arms=[{"method": "eagle3", "num_speculative_tokens": "3", "model": "  "}]),
        ("arm", 0, "model"),
    ),
    "draft path outside the models folder": (
        form_data(arms=[{**DRAFT_ARM_FORM, "model": "/etc/draft"}]),
        ("arm", 0, "model"),
    ),
    "draft path escaping with ..": (
        form_data(arms=[{**DRAFT_ARM_FORM, "model": f"{MODELS}/../../draft"}]),
        ("arm", 0, "model"),
    ),
    "unknown arm method": (form_data(arms=[{**NGRAM_ARM_FORM, "method": "baseline"}]), ("arm", 0, "method")),
    "max_tokens malformed": (form_data(max_tokens="lots"), "max_tokens"),
    "seed malformed": (form_data(seed="1e3x"), "seed"),
    "temperature malformed": (form_data(temperature="hot"), "temperature"),
    "temperature infinite": (form_data(temperature="inf"), "temperature"),
    "name with markup": (form_data(name="<script>alert(1)</script>"), "name"),
    "name missing": (form_data(name=""), "name"),
    "arm label with markup": (form_data(arms=[{**NGRAM_ARM_FORM, "label": "<b>fast</b>"}]), ("arm", 0, "label")),
    "temperature below 0": (form_data(temperature="-0.1"), "temperature"),
    "temperature above 2": (form_data(temperature="2.5"), "temperature"),
    "top_p 0": (form_data(top_p="0"), "top_p"),
    "top_p above 1": (form_data(top_p="1.01"), "top_p"),
    "lookup min above max": (
        form_data(arms=[{**NGRAM_ARM_FORM, "prompt_lookup_min": "5", "prompt_lookup_max": "3"}]),
        ("arm", 0, "prompt_lookup_min"),
    ),
    "lookup max missing": (
        form_data(arms=[{**NGRAM_ARM_FORM, "prompt_lookup_max": ""}]),
        ("arm", 0, "prompt_lookup_max"),
    ),
    "synthetic without input length": (form_data(workload_kind="synthetic"), "synthetic_input_len"),
    "builtin without prompt set": (form_data(prompt_set=""), "prompt_set"),
    "unknown prompt set": (form_data(prompt_set="nonsense"), "prompt_set"),
    "repetitions 0": (form_data(repetitions="0"), "repetitions"),
    "repetitions 21": (form_data(repetitions="21"), "repetitions"),
    "primary level not measured": (form_data(concurrency_levels="1, 4", primary_levels="8"), "primary_levels"),
    "primary metric unknown": (form_data(primary_metric="ttft_p99"), "primary_metric"),
    "worthwhile gain 0": (form_data(worthwhile_gain="0"), "worthwhile_gain"),
    "sequential, one server per arm": (form_data(sequential="on", server_per_block=None), "sequential"),
    "num_prompts 0": (form_data(num_prompts="0"), "num_prompts"),
    "num_prompts 10001": (form_data(num_prompts="10001"), "num_prompts"),
    "num_prompts below 4 × the highest level": (form_data(concurrency_levels="1, 8", num_prompts="31"), "num_prompts"),
    "prompt set smaller than warm-up + measured": (form_data(num_prompts="39", warmup_requests="2"), "num_prompts"),
    "more synthetic prompts than distinct ones": (
        form_data(workload_kind="synthetic", synthetic_input_len="1", num_prompts="300", concurrency_levels="1"),
        "synthetic_input_len",
    ),
    "margin 0": (form_data(equivalence_margin="0"), "equivalence_margin"),
    "margin negative": (form_data(equivalence_margin="-2"), "equivalence_margin"),
    "margin 50": (form_data(equivalence_margin="50"), "equivalence_margin"),
    "margin malformed": (form_data(equivalence_margin="2%"), "equivalence_margin"),
    "margin missing": (form_data(equivalence_margin=""), "equivalence_margin"),
    "synthetic input + output beyond max model length": (
        form_data(workload_kind="synthetic", synthetic_input_len="256", max_tokens="300"),
        "max_tokens",
    ),
    "output alone fills max model length": (form_data(max_tokens="512"), "max_tokens"),
    "target outside the models folder": (form_data(target_model="/etc/passwd"), "target_model"),
    "target escaping with ..": (form_data(target_model=f"{MODELS}/../secrets"), "target_model"),
    "target is the models folder itself": (form_data(target_model=str(MODELS)), "target_model"),
    "target relative path": (form_data(target_model="../target"), "target_model"),
    "target model id not allowed": (form_data(target_model="meta-llama/Llama-3.1-8B"), "target_model"),
    "worker queue not a slug": (form_data(worker_queue="gpu pool; rm"), "worker_queue"),
    "unknown dtype": (form_data(dtype="int4"), "dtype"),
    "request rate 0": (form_data(request_rate="0"), "request_rate"),
    "TTFT SLO negative": (form_data(slo_ttft_ms="-5"), "slo_ttft_ms"),
    "TPOT SLO 0": (form_data(slo_tpot_ms="0"), "slo_tpot_ms"),
    "E2E SLO malformed": (form_data(slo_e2e_ms="fast"), "slo_e2e_ms"),
    "draft cost asked with no draft-model arm": (form_data(draft_calibration="on"), "draft_calibration"),
    "draft cost asked, the draft-model arm removed": (
        form_data(arms=[NGRAM_ARM_FORM, {**DRAFT_ARM_FORM, "DELETE": "on"}], draft_calibration="on"),
        "draft_calibration",
    ),
    "GPU memory utilization 0": (form_data(gpu_memory_utilization="0"), "gpu_memory_utilization"),
    "GPU memory utilization above 1": (form_data(gpu_memory_utilization="1.2"), "gpu_memory_utilization"),
    "GPU memory utilization malformed": (form_data(gpu_memory_utilization="90%"), "gpu_memory_utilization"),
    "max_num_seqs 0": (form_data(max_num_seqs="0"), "max_num_seqs"),
    "max_num_seqs fraction": (form_data(max_num_seqs="2.5"), "max_num_seqs"),
    "max_num_batched_tokens 0": (form_data(max_num_batched_tokens="0"), "max_num_batched_tokens"),
    "max_num_batched_tokens below max_num_seqs": (
        form_data(max_num_seqs="64", max_num_batched_tokens="32"),
        "max_num_batched_tokens",
    ),
    "unknown KV cache dtype": (form_data(kv_cache_dtype="int4"), "kv_cache_dtype"),
    "unknown quantization": (form_data(quantization="--enforce-eager"), "quantization"),
    "draft tensor parallel size 0": (
        form_data(arms=[{**DRAFT_ARM_FORM, "draft_tensor_parallel_size": "0"}]),
        ("arm", 0, "draft_tensor_parallel_size"),
    ),
    "draft tensor parallel size neither 1 nor the target's": (
        form_data(arms=[{**DRAFT_ARM_FORM, "draft_tensor_parallel_size": "2"}], tensor_parallel_size="4"),
        ("arm", 0, "draft_tensor_parallel_size"),
    ),
    "too many arms": (
        form_data(arms=[{**NGRAM_ARM_FORM, "num_speculative_tokens": str(k)} for k in range(1, 10)]),
        "arms",
    ),
}


def _errors_at(form, arms, where) -> list[str]:
    if where == "arms":
        return list(arms.non_form_errors())
    if isinstance(where, tuple):
        _, index, field = where
        return list(arms.forms[index].errors.get(field, []))
    return list(form.errors.get(where, []))


@pytest.mark.parametrize(("data", "where"), BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_refused_on_its_field(data, where):
    form, arms = bind(data)

    assert not protocol_is_valid(form, arms)
    assert _errors_at(form, arms, where), (form.errors, arms.errors, arms.non_form_errors())


@pytest.mark.parametrize(("data", "where"), BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_stores_nothing(logged_in_client, celery_dispatch, data, where):
    response = logged_in_client.post(reverse("experiments:create"), data)

    assert response.status_code == 400
    assert "Nothing was saved" in response.text
    assert not Experiment.objects.exists()
    assert not Arm.objects.exists()
    celery_dispatch.assert_not_called()


def test_error_messages_say_what_is_wrong():
    form, arms = bind(
        form_data(
            arms=[{**DRAFT_ARM_FORM, "model": "/srv/elsewhere/draft"}],
            target_model="org/model",
            concurrency_levels="1, 4096",
        )
    )
    form.is_valid(), arms.is_valid()

    assert "SPECDASH_ALLOW_ANY_MODEL_PATH" in form.errors["target_model"][0]
    assert str(MODELS) in arms.forms[0].errors["model"][0]
    assert form.errors["concurrency_levels"] == ["Concurrency must be at most 1024 (got 4096)."]


def test_good_input_is_normalised():
    form, arms = bind(form_data(concurrency_levels=" 8,1  4", num_prompts="32", target_model=f"{MODELS}/sub/../target"))

    assert form.is_valid(), form.errors
    assert arms.is_valid(), arms.errors
    fields = form.experiment_fields()
    assert fields["concurrency_levels"] == [1, 4, 8]
    assert fields["target_model"] == str(MODELS / "target")
    assert fields["prompt_set_hash"] == catalog.prompt_set_hash("chat")
    assert fields["synthetic_input_len"] is None
    assert fields["request_rate"] is None


def test_the_forms_defaults_are_the_models_and_pass_the_forms_own_rules():
    unbound = ExperimentForm(user=UserFactory(username="alice"))
    initial = {name: unbound.get_initial_for_field(field, name) for name, field in unbound.fields.items()}

    assert initial["repetitions"] == Experiment._meta.get_field("repetitions").default == 10
    assert initial["sequential"] is True
    assert initial["primary_metric"] == "server_tpot"
    assert initial["worthwhile_gain"] == pytest.approx(7.0)
    assert initial["server_per_block"] is True
    assert initial["aa_replicate"] is False
    assert initial["equivalence_margin"] == pytest.approx(2.0)
    assert initial["warmup_requests"] == Experiment._meta.get_field("warmup_requests").default
    for prompt_set in catalog.builtin_prompt_sets():
        data = form_data(**{name: str(value) for name, value in initial.items() if value not in (None, False)})
        data.update(name="defaults", prompt_set=prompt_set, server_per_block="on")
        data.pop("aa_replicate", None)
        form, _ = bind(data)
        assert form.is_valid(), (prompt_set, form.errors)


def test_any_model_path_when_the_installation_allows_it(settings):
    settings.SPECDASH_ALLOW_ANY_MODEL_PATH = True
    form, arms = bind(
        form_data(target_model="meta-llama/Llama-3.1-8B", arms=[{**DRAFT_ARM_FORM, "model": "/srv/draft"}])
    )

    assert form.is_valid(), form.errors
    assert arms.is_valid(), arms.errors
    assert form.experiment_fields()["target_model"] == "meta-llama/Llama-3.1-8B"


def test_good_input_creates_experiment_arms_runs_and_dispatch(
    user, celery_dispatch, django_capture_on_commit_callbacks
):
    form, arms = bind(form_data(arms=[NGRAM_ARM_FORM, DRAFT_ARM_FORM], worker_queue="h100"))
    assert form.is_valid()
    assert arms.is_valid()

    with django_capture_on_commit_callbacks(execute=True):
        experiment = definition.experiment_create(owner=user, arms=arms.arm_specs(), **form.experiment_fields())

    assert [(arm.method, arm.num_speculative_tokens, arm.params) for arm in experiment.arms.all()] == [
        ("baseline", None, {}),
        ("ngram", 4, {"prompt_lookup_min": 2, "prompt_lookup_max": 4}),
        ("draft_model", 4, {"model": str(MODELS / "draft")}),
    ]
    assert Run.objects.filter(experiment=experiment).count() == 3 * 2 * 2  # arms × levels × repetitions
    assert experiment.prompt_set_hash == catalog.prompt_set_hash("chat")
    # One message per queued block (issue 38): each idle worker of the queue can claim one.
    assert celery_dispatch.call_args_list == [mock.call(args=[experiment.id], queue="h100")] * experiment.blocks.count()


def test_the_draft_cost_is_measured_when_a_draft_model_arm_is_posted():
    form, arms = bind(form_data(arms=[NGRAM_ARM_FORM, DRAFT_ARM_FORM], draft_calibration="on"))

    assert form.is_valid(), form.errors
    assert arms.is_valid()
    assert form.cleaned_data["draft_calibration"] is True
