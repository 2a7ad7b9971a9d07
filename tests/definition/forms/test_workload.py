"""The workload on the experiment form (experiments/definition/forms/workload.py): sampling rules,
enough prompts, and the fields of the other workload kinds ignored."""

import pytest

from experiments.prompts import catalog
from tests.definition.forms.helpers import bind
from tests.factories import form_data

# The form reads the user's teams and prompt sets.
pytestmark = pytest.mark.django_db


def test_clean_sample_rules_say_what_is_wrong():
    size = len(catalog.get_prompt_set("chat").prompts)
    form, _ = bind(form_data(num_prompts=str(size), warmup_requests="2", concurrency_levels="1, 16"))
    form.is_valid()

    errors = " ".join(form.errors["num_prompts"])
    assert f"The prompt set “chat” has {size} prompts" in errors
    assert f"{size + 2} distinct ones" in errors
    assert "At least 4 × the highest concurrency level (16) = 64 prompts" in errors


def test_exactly_enough_prompts_is_accepted():
    size = len(catalog.get_prompt_set("chat").prompts)
    form, _ = bind(form_data(num_prompts=str(size - 2), warmup_requests="2", concurrency_levels="1, 4"))

    assert form.is_valid(), form.errors
    form, _ = bind(form_data(num_prompts="16", concurrency_levels="1, 4"))
    assert form.is_valid(), form.errors


def test_synthetic_workload_drops_the_prompt_set():
    form, _ = bind(form_data(workload_kind="synthetic", synthetic_input_len="100", prompt_set="chat"))

    assert form.is_valid(), form.errors
    assert form.experiment_fields()["prompt_set"] == ""
    assert form.experiment_fields()["prompt_set_hash"] == ""
    assert form.experiment_fields()["synthetic_input_len"] == 100


def test_fields_of_the_other_workload_are_ignored():
    form, _ = bind(form_data(synthetic_input_len="many"))

    assert form.is_valid(), form.errors
