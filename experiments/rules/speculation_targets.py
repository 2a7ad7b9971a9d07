"""What a speculative method asks of the target it runs beside, judged before any server starts:
by every door (the experiment form and the API through it, an import, a deploy decision's arm)
and again by the worker before it starts the arm's server (workers/server/launch.py), each on
its own disk.

- mtp drafts with the target's own multi-token-prediction layers. vLLM 0.32 maps a target's
  config onto its MTP model (config/speculative.py, SpeculativeConfig.hf_config_override, which
  reads the layer count from `num_nextn_predict_layers` or `mtp_num_hidden_layers`, at the top
  of config.json or in its text_config or mtp_config); a target without them starts a server
  that dies with "NotImplementedError: Unsupported speculative method: 'mtp'". The rule refuses
  only a config.json it can read that names no such layers (or zero of them), and passes the
  model types and architectures vLLM gives MTP layers without a count. A model id, or a path
  this host does not hold, is left to the host that does.
- A draft model's tensor parallel size: vLLM takes 1 or the target's (config/speculative.py,
  _verify_and_get_draft_tp), and for a separate draft model (method draft_model) its V1
  proposer takes only the target's (v1/spec_decode/draft_model.py, _raise_if_draft_tp_mismatch:
  at TP 1 under a larger target the ranks overwrite one torch.compile cache). Its V2 runner
  does not check, so which runner vLLM picks is no reason to allow it: a draft model runs at the
  target's size. EAGLE heads keep 1 or the target's.

Plain module: no Django.
"""

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MTP = "mtp"
DRAFT_MODEL = "draft_model"
# The config.json keys vLLM 0.32 reads an MTP layer count from (config/speculative.py).
MTP_LAYER_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers")
# Model types and architectures whose MTP layers vLLM 0.32 assumes without a count (a default of
# 1, or the number its model file fixes).
MTP_WITHOUT_COUNT = frozenset({
    "longcat_flash", "step3p5", "step3p7", "dots3_note", "gemma4_assistant", "gemma4_unified_assistant",
})  # fmt: skip
MTP_ARCHITECTURES_WITHOUT_COUNT = frozenset({"MiMoV2ForCausalLM", "MiMoV2OmniForCausalLM", "MiMoV2FlashForCausalLM"})
MAX_CONFIG_BYTES = 4 * 2**20


def mtp_layer_count(config: Mapping[str, Any]) -> tuple[str, int] | None:
    """The first MTP layer count the config names, with its key; None when it names none."""
    sections = [config, *(config.get(name) for name in ("text_config", "mtp_config"))]
    for section in sections:
        if not isinstance(section, Mapping):
            continue
        for key in MTP_LAYER_KEYS:
            value = section.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                return key, value
    return None


def mtp_problem(config: Mapping[str, Any]) -> str | None:
    """Why vLLM 0.32 cannot draft with this target's MTP layers, or None."""
    model_type = str(config.get("model_type") or "")
    architectures = config.get("architectures") or []
    if model_type.endswith("_mtp") or model_type in MTP_WITHOUT_COUNT:
        return None
    if isinstance(architectures, list) and MTP_ARCHITECTURES_WITHOUT_COUNT & set(map(str, architectures)):
        return None
    count = mtp_layer_count(config)
    if count is None:
        return (
            f"its config.json names no MTP layers (no {' or '.join(MTP_LAYER_KEYS)}; model type "
            f"{model_type or 'not given'}), so vLLM 0.32 would stop its server with “Unsupported speculative method: "
            "'mtp'”. MTP needs a target trained with them (DeepSeek-V3, Qwen3-Next, GLM-4.5, MiMo …): choose "
            "another method for this target"
        )
    if count[1] < 1:
        return f"its config.json sets {count[0]} = {count[1]}: it has no MTP layer to draft with"
    return None


def local_config(model: str) -> dict[str, Any] | None:
    """The config.json of a model folder this host holds; None for a model id, a path not here,
    or a config that cannot be read (the server's own start then says)."""
    if not model.startswith("/"):
        return None
    path = Path(model) / "config.json"
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            return None
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def target_problem(method: str, target_model: str) -> str | None:
    """Why `method` cannot run beside this target, read from the target's config.json where
    this host holds it; None when it can or this host cannot tell."""
    if method != MTP:
        return None
    config = local_config(target_model)
    problem = mtp_problem(config) if config is not None else None
    return f"the target {target_model} cannot run MTP: {problem}" if problem else None


def draft_tensor_parallel_problem(method: str, draft: int | None, *, target: int) -> str | None:
    """Why vLLM would refuse this draft tensor parallel size beside the target's, or None
    (None: vLLM's default, the target's own)."""
    if draft is None or draft == target:
        return None
    if draft != 1:
        return f"must be 1 or the target's tensor parallel size ({target}): vLLM 0.32 refuses {draft}"
    if method == DRAFT_MODEL:
        return (
            f"must be the target's tensor parallel size ({target}) for a draft model: vLLM 0.32's V1 proposer refuses "
            f"a draft at 1 under a target at {target} (its ranks would share one torch.compile cache), and its V2 "
            "runner does not check it. EAGLE heads may run at 1"
        )
    return None
