import hashlib
import json

import pytest

from experiments.models import Experiment
from experiments.prompts import catalog as workloads
from experiments.prompts.catalog import (
    PromptSet,
    builtin_prompt_sets,
    experiment_prompts,
    prompt_set_choices,
    prompt_set_hash,
    prompt_set_shortfall,
    synthetic_prompts,
)

SHIPPED_SETS = {"code_edit", "summarise", "chat"}


def _experiment(**fields) -> Experiment:
    defaults = {
        "workload_kind": Experiment.WorkloadKind.BUILTIN, "prompt_set": "chat", "num_prompts": 5, "seed": 0,
        "warmup_requests": 0,
    }  # fmt: skip
    return Experiment(**(defaults | fields))


def test_ships_the_three_sets_with_dozens_of_distinct_prompts():
    sets = builtin_prompt_sets()

    assert set(sets) >= SHIPPED_SETS
    for name in SHIPPED_SETS:
        prompt_set = sets[name]
        assert isinstance(prompt_set, PromptSet)
        assert prompt_set.name == name
        assert prompt_set.title
        assert prompt_set.description
        assert len(prompt_set.prompts) >= 32
        assert len(set(prompt_set.prompts)) == len(prompt_set.prompts)


def test_summarise_passages_are_150_to_300_words():
    for prompt in builtin_prompt_sets()["summarise"].prompts:
        _instruction, passage = prompt.split("\n\n", 1)
        assert 150 <= len(passage.split()) <= 300


def test_code_edit_prompts_carry_a_python_snippet():
    for prompt in builtin_prompt_sets()["code_edit"].prompts:
        assert "```python\n" in prompt


def test_returned_dict_is_a_copy():
    builtin_prompt_sets().clear()

    assert set(builtin_prompt_sets()) >= SHIPPED_SETS


def test_choices_pair_names_with_titles():
    choices = prompt_set_choices()

    assert dict(choices)["summarise"] == builtin_prompt_sets()["summarise"].title
    assert [name for name, _ in choices] == sorted(name for name, _ in choices)


def test_hash_is_sha256_of_the_canonical_prompt_list():
    prompts = list(builtin_prompt_sets()["code_edit"].prompts)
    expected = hashlib.sha256(json.dumps(prompts, ensure_ascii=False, separators=(",", ":")).encode()).hexdigest()

    assert prompt_set_hash("code_edit") == expected
    assert len({prompt_set_hash(name) for name in SHIPPED_SETS}) == 3


def test_unknown_set_is_a_clear_error():
    with pytest.raises(ValueError, match=r"Unknown prompt set 'nope'.*chat"):
        prompt_set_hash("nope")


def test_synthetic_prompts_are_deterministic_random_words():
    first = synthetic_prompts(count=4, input_len=20, seed=7)

    assert first == synthetic_prompts(count=4, input_len=20, seed=7)
    assert first != synthetic_prompts(count=4, input_len=20, seed=8)
    assert synthetic_prompts(count=2, input_len=20, seed=7) == first[:2]
    assert all(len(prompt.split()) == 20 for prompt in first)
    assert all(set(prompt.split()) <= set(workloads.SYNTHETIC_VOCABULARY) for prompt in first)


def test_synthetic_prompts_are_distinct_even_when_draws_repeat():
    vocabulary = len(workloads.SYNTHETIC_VOCABULARY)
    prompts = synthetic_prompts(count=vocabulary, input_len=1, seed=0)

    assert sorted(prompts) == sorted(workloads.SYNTHETIC_VOCABULARY)
    assert synthetic_prompts(count=10, input_len=1, seed=0) == prompts[:10]
    with pytest.raises(ValueError, match=f"Only {vocabulary} distinct synthetic prompts of 1 word"):
        synthetic_prompts(count=vocabulary + 1, input_len=1, seed=0)


def test_synthetic_capacity_is_exact_for_short_prompts_and_capped_for_long_ones():
    vocabulary = len(workloads.SYNTHETIC_VOCABULARY)
    assert workloads.synthetic_capacity(2) == vocabulary**2
    assert workloads.synthetic_capacity(1_000_000) == workloads.SYNTHETIC_CAPACITY_CAP


def test_synthetic_prompts_reject_a_zero_length():
    with pytest.raises(ValueError, match="input_len"):
        synthetic_prompts(count=1, input_len=0, seed=0)


def test_workload_kinds_match_the_model():
    assert {workloads.BUILTIN, workloads.UPLOADED, workloads.SYNTHETIC} == set(Experiment.WorkloadKind.values)


def test_builtin_experiment_takes_prompts_in_order():
    prompts = builtin_prompt_sets()["chat"].prompts

    assert experiment_prompts(_experiment(num_prompts=3)) == list(prompts[:3])


def test_warmup_prompts_come_first_and_are_not_measured_again():
    prompts = builtin_prompt_sets()["chat"].prompts

    result = experiment_prompts(_experiment(warmup_requests=2, num_prompts=5))

    # run_load(warmup=2) sends result[:2] unmeasured, then measures result[2:], so a
    # measured prompt's index in this list is its index in the set, in every run.
    assert result == list(prompts[:7])
    assert len(set(result)) == 7


def test_builtin_experiment_refuses_a_set_too_small_instead_of_repeating_prompts():
    size = len(builtin_prompt_sets()["chat"].prompts)

    assert len(experiment_prompts(_experiment(warmup_requests=2, num_prompts=size - 2))) == size
    with pytest.raises(ValueError, match=f"“chat” has {size} prompts.*2 warm-up and {size - 1} measured"):
        experiment_prompts(_experiment(warmup_requests=2, num_prompts=size - 1))


def test_prompt_set_shortfall_names_the_set_and_its_size():
    size = len(builtin_prompt_sets()["code_edit"].prompts)

    assert prompt_set_shortfall("code_edit", warmup=1, measured=size - 1) is None
    message = prompt_set_shortfall("code_edit", warmup=3, measured=size)
    assert f"“code_edit” has {size} prompts" in message
    assert f"need {size + 3} distinct ones" in message


def test_builtin_experiment_with_unknown_set_fails():
    with pytest.raises(ValueError, match="Unknown prompt set"):
        experiment_prompts(_experiment(prompt_set="missing"))


def test_synthetic_experiment_uses_its_length_and_seed():
    experiment = _experiment(
        workload_kind=Experiment.WorkloadKind.SYNTHETIC, prompt_set="", synthetic_input_len=12, num_prompts=6, seed=3,
        warmup_requests=2,
    )  # fmt: skip

    assert experiment_prompts(experiment) == synthetic_prompts(count=8, input_len=12, seed=3)


def test_synthetic_experiment_without_length_fails():
    experiment = _experiment(workload_kind=Experiment.WorkloadKind.SYNTHETIC, synthetic_input_len=None)

    with pytest.raises(ValueError, match="synthetic_input_len"):
        experiment_prompts(experiment)


def test_unknown_workload_kind_fails():
    with pytest.raises(ValueError, match="Unknown workload kind 'replay'"):
        experiment_prompts(_experiment(workload_kind="replay"))
