"""The rule for a speculative config from outside the form (an imported file, a deploy
decision's arm): a draft's own tensor parallel size is one of its keys, within vLLM's bounds."""

import pytest
from django.conf import settings

from experiments.definition.speculative_configs import config_problem

DRAFT = {"method": "draft_model", "num_speculative_tokens": 3, "model": str(settings.SPECDASH_MODELS_DIR / "draft")}
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}


def test_a_draft_config_may_carry_its_tensor_parallel_size():
    assert config_problem(DRAFT | {"draft_tensor_parallel_size": 1}) is None
    assert config_problem(DRAFT) is None


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (DRAFT | {"draft_tensor_parallel_size": 0}, "its draft_tensor_parallel_size must be from 1 to 8"),
        (DRAFT | {"draft_tensor_parallel_size": "1"}, "its draft_tensor_parallel_size must be a whole number"),
        (DRAFT | {"draft_tensor_parallel_size": True}, "its draft_tensor_parallel_size must be a whole number"),
        (NGRAM | {"draft_tensor_parallel_size": 1}, "specdash does not pass draft_tensor_parallel_size to vLLM"),
    ],
)
def test_a_draft_tensor_parallel_size_out_of_its_rule_is_refused(config, message):
    assert message in config_problem(config)


def test_an_imported_config_may_carry_a_batch_size_schedule_by_vllms_rules():
    config = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}

    assert config_problem(config | {"num_speculative_tokens_per_batch_size": [[1, 8, 4], [9, 64, 0]]}) is None
    assert config_problem(config | {"num_speculative_tokens_per_batch_size": [[1, 8, 6]]}) == (
        "its num_speculative_tokens_per_batch_size: the k of [1, 8, 6] exceeds the arm's k (4): vLLM would silently "
        "draft 4"
    )
