"""What a method asks of its target (experiments/rules/speculation_targets.py): MTP layers read
from config.json as vLLM 0.32's SpeculativeConfig.hf_config_override reads them, and the draft
tensor parallel sizes vLLM takes beside the target's."""

import json

import pytest

from experiments.rules import speculation_targets as targets

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 32}
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_nextn_predict_layers": 1}
QWEN3_NEXT = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "mtp_num_hidden_layers": 1}
QWEN3_5_VL = {"model_type": "qwen3_5", "text_config": {"model_type": "qwen3_5_text", "mtp_num_hidden_layers": 1}}
LONGCAT = {"architectures": ["LongcatFlashForCausalLM"], "model_type": "longcat_flash"}
MIMO_V2 = {"architectures": ["MiMoV2FlashForCausalLM"], "model_type": "mimo_v2_flash"}


@pytest.mark.parametrize(
    "config", [DEEPSEEK_V3, QWEN3_NEXT, QWEN3_5_VL, LONGCAT, MIMO_V2, {"model_type": "deepseek_mtp"}]
)
def test_targets_vllm_drafts_mtp_for_pass(config):
    assert targets.mtp_problem(config) is None


def test_a_target_without_mtp_layers_is_refused_with_vllms_words():
    problem = targets.mtp_problem(LLAMA)

    assert problem is not None
    assert "names no MTP layers" in problem
    assert "model type llama" in problem
    assert "Unsupported speculative method: 'mtp'" in problem


def test_a_target_with_zero_mtp_layers_is_refused():
    assert "sets num_nextn_predict_layers = 0" in str(
        targets.mtp_problem(DEEPSEEK_V3 | {"num_nextn_predict_layers": 0})
    )


def test_the_target_is_read_where_this_host_holds_it_and_left_alone_elsewhere(tmp_path):
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps(LLAMA))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{not json")

    assert "cannot run MTP" in str(targets.target_problem("mtp", str(tmp_path / "llama")))
    assert targets.target_problem("draft_model", str(tmp_path / "llama")) is None
    assert targets.target_problem("mtp", "deepseek-ai/DeepSeek-V3") is None
    assert targets.target_problem("mtp", str(tmp_path / "absent")) is None
    assert targets.target_problem("mtp", str(tmp_path / "broken")) is None


@pytest.mark.parametrize(
    ("method", "draft", "target", "words"),
    [
        ("draft_model", None, 4, None),
        ("draft_model", 4, 4, None),
        ("draft_model", 1, 1, None),
        ("draft_model", 1, 4, "must be the target's tensor parallel size (4) for a draft model"),
        ("eagle", 1, 4, None),
        ("eagle3", 2, 4, "must be 1 or the target's tensor parallel size (4): vLLM 0.32 refuses 2"),
        ("draft_model", 2, 4, "must be 1 or the target's tensor parallel size (4)"),
    ],
)
def test_draft_tensor_parallel_sizes_vllm_takes(method, draft, target, words):
    problem = targets.draft_tensor_parallel_problem(method, draft, target=target)

    assert (problem is None) if words is None else (words in str(problem))
