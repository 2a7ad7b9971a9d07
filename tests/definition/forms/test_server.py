"""The target's server settings on the experiment form (experiments/definition/forms/server.py):
tensor parallel size and the "Server settings" group, stored as given or left to vLLM."""

import pytest

from experiments.definition import services as definition
from experiments.definition.forms.experiment import protocol_is_valid
from tests.definition.forms.helpers import bind
from tests.factories import DRAFT_ARM_FORM, form_data

EAGLE_ARM_FORM = {**DRAFT_ARM_FORM, "method": "eagle"}

# The form reads the user's teams and prompt sets.
pytestmark = pytest.mark.django_db


def test_tensor_parallel_size_is_one_unless_asked_and_at_most_eight():
    form, _ = bind(form_data())
    assert form.is_valid(), form.errors
    assert form.experiment_fields()["tensor_parallel_size"] == 1
    form, _ = bind(form_data(tensor_parallel_size="4"))
    assert form.is_valid(), form.errors
    assert form.experiment_fields()["tensor_parallel_size"] == 4
    for wrong, message in (("0", "greater than or equal to 1"), ("9", "less than or equal to 8")):
        form, _ = bind(form_data(tensor_parallel_size=wrong))
        assert not form.is_valid()
        assert message in form.errors["tensor_parallel_size"][0]


def test_server_settings_are_stored_as_given_and_empty_ones_left_to_vllm():
    form, arms = bind(
        form_data(
            gpu_memory_utilization="0.85", max_num_seqs="64", kv_cache_dtype="fp8", tensor_parallel_size="2",
            arms=[{**EAGLE_ARM_FORM, "draft_tensor_parallel_size": "1"}, {**DRAFT_ARM_FORM, "label": "tp 2"}],
        )
    )  # fmt: skip

    assert protocol_is_valid(form, arms), (form.errors, arms.errors)
    fields = form.experiment_fields()
    assert (fields["gpu_memory_utilization"], fields["max_num_seqs"], fields["kv_cache_dtype"]) == (0.85, 64, "fp8")
    assert (fields["max_num_batched_tokens"], fields["quantization"]) == (None, "")
    # A draft model runs at the target's size (experiments/rules/speculation_targets.py); an EAGLE head may run at 1.
    head_tp1, draft = arms.arm_specs()
    assert head_tp1.params["draft_tensor_parallel_size"] == 1
    assert "draft_tensor_parallel_size" not in draft.params
    assert definition.arm_default_label(head_tp1) == "EAGLE k=4 draft TP 1"


def test_server_setting_errors_say_what_vllm_takes():
    form, arms = bind(
        form_data(
            gpu_memory_utilization="1.5", max_num_seqs="64", max_num_batched_tokens="32", tensor_parallel_size="4",
            arms=[{**DRAFT_ARM_FORM, "draft_tensor_parallel_size": "2"}],
        )
    )  # fmt: skip
    protocol_is_valid(form, arms)

    assert form.errors["gpu_memory_utilization"] == [
        "GPU memory utilization must be greater than 0 and at most 1 (got 1.5)."
    ]
    assert form.errors["max_num_batched_tokens"] == [
        "Max batched tokens per step must be at least max_num_seqs (64): vLLM refuses a token budget below the "
        "sequences per step."
    ]
    assert arms.forms[0].errors["draft_tensor_parallel_size"] == [
        "Draft tensor parallel size must be 1 or the target's tensor parallel size (4): vLLM 0.32 refuses 2."
    ]
