"""The speculative arms (experiments/definition/forms/arms.py): each method's settings mapped to
its --speculative-config and the others ignored, n-gram on the GPU, removed and duplicate arms,
and a batch-size schedule of k."""

import pytest
from django.conf import settings
from django.urls import reverse

from experiments.definition import services as definition
from experiments.definition.forms.experiment import protocol_is_valid
from tests.definition.forms.helpers import bind
from tests.factories import DRAFT_ARM_FORM, NGRAM_ARM_FORM, form_data

# The form reads the user's teams and prompt sets.
pytestmark = pytest.mark.django_db

MODELS = settings.SPECDASH_MODELS_DIR


def test_an_ngram_arm_ignores_a_draft_tensor_parallel_size():
    form, arms = bind(form_data(arms=[{**NGRAM_ARM_FORM, "draft_tensor_parallel_size": "3"}], tensor_parallel_size="4"))

    assert protocol_is_valid(form, arms), arms.errors
    assert "draft_tensor_parallel_size" not in arms.arm_specs()[0].params


NGRAM_GPU_ARM_FORM = {**NGRAM_ARM_FORM, "method": "ngram_gpu"}


def test_an_ngram_gpu_arm_takes_the_lookup_lengths():
    form, arms = bind(form_data(arms=[{**NGRAM_GPU_ARM_FORM, "prompt_lookup_min": "1", "prompt_lookup_max": "3"}]))

    assert protocol_is_valid(form, arms), arms.errors
    (spec,) = arms.arm_specs()
    assert (spec.method, spec.num_speculative_tokens) == ("ngram_gpu", 4)
    assert spec.params == {"prompt_lookup_min": 1, "prompt_lookup_max": 3}


@pytest.mark.parametrize(
    ("lookup", "field", "message"),
    [
        ({"prompt_lookup_min": "5", "prompt_lookup_max": "3"}, "prompt_lookup_min", "Lookup min (5) must not exceed"),
        ({"prompt_lookup_max": ""}, "prompt_lookup_max", "n-gram arms need this."),
        ({"prompt_lookup_min": "0"}, "prompt_lookup_min", "greater than or equal to 1"),
    ],
)
def test_an_ngram_gpu_arm_is_held_to_the_ngram_rules(lookup, field, message):
    form, arms = bind(form_data(arms=[{**NGRAM_GPU_ARM_FORM, **lookup}]))

    assert not protocol_is_valid(form, arms)
    assert message in " ".join(arms.forms[0].errors[field])


def test_ngram_and_ngram_gpu_with_the_same_settings_are_two_arms():
    form, arms = bind(form_data(arms=[NGRAM_ARM_FORM, NGRAM_GPU_ARM_FORM]))

    assert protocol_is_valid(form, arms), arms.errors
    assert [spec.method for spec in arms.arm_specs()] == ["ngram", "ngram_gpu"]


def test_the_page_shows_the_lookup_lengths_for_both_ngram_methods(logged_in_client):
    html = logged_in_client.get(reverse("experiments:create")).text

    assert html.count('data-methods="ngram ngram_gpu"') == 4  # two fields, in the first arm and the template


def test_the_method_help_says_when_to_pick_which():
    _, arms = bind(form_data())

    help_text = str(arms.forms[0].fields["method"].help_text)
    assert "async scheduling off for ngram and keeps it for ngram_gpu" in help_text
    assert "CPU workers refuse ngram_gpu" in help_text
    assert "Model Runner V2 does not support it" in help_text
    assert "arctic-inference" in help_text


ARM_PARAMS = [
    (NGRAM_ARM_FORM, {"prompt_lookup_min": 2, "prompt_lookup_max": 4}),
    (DRAFT_ARM_FORM, {"model": str(MODELS / "draft")}),
    ({"method": "eagle", "num_speculative_tokens": "3", "model": f"{MODELS}/eagle"}, {"model": f"{MODELS}/eagle"}),
    ({"method": "eagle3", "num_speculative_tokens": "3", "model": f"{MODELS}/e3"}, {"model": f"{MODELS}/e3"}),
    ({"method": "mtp", "num_speculative_tokens": "1"}, {}),
    ({"method": "suffix", "num_speculative_tokens": "16"}, {}),
]


@pytest.mark.parametrize(("arm", "params"), ARM_PARAMS, ids=[arm["method"] for arm, _ in ARM_PARAMS])
def test_arm_params_map_to_the_speculative_config(arm, params):
    _, arms = bind(form_data(arms=[arm]))

    assert arms.is_valid(), arms.errors
    [spec] = arms.arm_specs()
    assert spec.method == arm["method"]
    assert spec.params == params


def test_fields_another_method_uses_are_ignored():
    mtp = {"method": "mtp", "num_speculative_tokens": "2", "prompt_lookup_min": "nine", "model": "/etc/x"}

    _, arms = bind(form_data(arms=[mtp]))

    assert arms.is_valid(), arms.errors
    assert arms.arm_specs()[0].params == {}


def test_removed_arms_are_ignored():
    removed = {**DRAFT_ARM_FORM, "model": "", "DELETE": "on"}

    _, arms = bind(form_data(arms=[removed, NGRAM_ARM_FORM]))

    assert arms.is_valid(), arms.errors
    assert [spec.method for spec in arms.arm_specs()] == ["ngram"]


def test_same_method_and_k_with_other_params_is_not_a_duplicate():
    other = {**NGRAM_ARM_FORM, "prompt_lookup_min": "1", "label": "n-gram 1-4"}

    _, arms = bind(form_data(arms=[NGRAM_ARM_FORM, other]))

    assert arms.is_valid(), arms.errors


def test_a_batch_size_schedule_is_stored_sorted_in_the_arms_params_and_label():
    schedule = "[[9, 64, 0], [1, 8, 4]]"
    form, arms = bind(form_data(arms=[{**NGRAM_ARM_FORM, "num_speculative_tokens_per_batch_size": schedule}]))

    assert protocol_is_valid(form, arms), arms.errors
    (spec,) = arms.arm_specs()
    assert spec.params["num_speculative_tokens_per_batch_size"] == [[1, 8, 4], [9, 64, 0]]
    assert definition.arm_default_label(spec) == "n-gram lookup k=4 by batch size"


def test_an_arm_without_a_schedule_stores_none():
    form, arms = bind(form_data(arms=[{**DRAFT_ARM_FORM, "num_speculative_tokens_per_batch_size": "  "}]))

    assert protocol_is_valid(form, arms), arms.errors
    assert "num_speculative_tokens_per_batch_size" not in arms.arm_specs()[0].params


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("1-8:4", "it must be a non-empty list of [range_start, range_end, k] bands"),
        ("[]", "it must be a non-empty list of [range_start, range_end, k] bands"),
        ("[[1, 8]]", "each entry must be [range_start, range_end, k] of whole numbers, not [1, 8]"),
        ("[[0, 8, 4]]", "the batch sizes of [0, 8, 4] must be positive (vLLM refuses them)"),
        ("[[1, 8, 4], [12, 9, 2]]", "[12, 9, 2] starts after it ends (vLLM refuses it)"),
        ("[[1, 8, -1]]", "the k of [1, 8, -1] must be 0 (no speculation) or more (vLLM refuses it)"),
        ("[[1, 8, 5]]", "the k of [1, 8, 5] exceeds the arm's k (4): vLLM would silently draft 4"),
        ("[[2, 8, 4]]", "the first band must start at batch size 1, not 2 (vLLM refuses it)"),
        ("[[1, 8, 4], [8, 16, 2]]", "the bands overlap at batch size 8 (vLLM refuses overlapping bands)"),
        ("[[1, 8, 4], [12, 16, 2]]", "batch sizes 9-11 are in no band: vLLM would run them at k=4, write that band"),
    ],
)
def test_a_schedule_vllm_would_refuse_or_change_is_refused_with_the_reason(schedule, message):
    form, arms = bind(form_data(arms=[{**NGRAM_ARM_FORM, "num_speculative_tokens_per_batch_size": schedule}]))

    assert not protocol_is_valid(form, arms)
    assert arms.forms[0].errors["num_speculative_tokens_per_batch_size"] == [f"k by batch size: {message}."]


def test_two_arms_differing_only_in_the_schedule_are_two_arms():
    arm = {**NGRAM_ARM_FORM, "num_speculative_tokens_per_batch_size": "[[1, 8, 4], [9, 64, 0]]"}
    form, arms = bind(form_data(arms=[NGRAM_ARM_FORM, arm]))
    assert protocol_is_valid(form, arms), arms.errors

    form, arms = bind(form_data(arms=[arm, {**arm, "label": "again"}]))
    assert not protocol_is_valid(form, arms)
    assert arms.forms[1].errors["__all__"] == ["Another arm has the same method, k and parameters."]
