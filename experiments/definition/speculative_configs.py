"""The one rule for a speculative config specdash accepts from outside its own form: a file's
`speculative_config`, a line on the Import page, and the arm a deploy decision names (the
config a team copies into production). The keys are the ones the experiment form sets
(Arm.PARAM_KEYS, checked against the installed vLLM in tests/test_vllm_config_keys.py), with
the form's bounds; every other key, trust_remote_code among them, is refused."""

import json
from typing import cast

from experiments.measurement.deploy import batch_schedule
from experiments.measurement.planning.limits import MAX_LOOKUP, MAX_SPECULATIVE_TOKENS
from experiments.models import Arm
from experiments.rules import json_input, server_settings, speculation_targets, text_rules
from experiments.rules.model_paths import model_path_refusal

# Arm.Method members are str and hash as their values, so a method named in JSON finds its keys.
_PARAM_KEYS = cast(dict[str, tuple[str, ...]], Arm.PARAM_KEYS)
_OPTIONAL_KEYS = cast(dict[str, tuple[str, ...]], Arm.OPTIONAL_PARAM_KEYS)


def config_problem(config, *, target_model: str | None = None, tensor_parallel_size: int | None = None) -> str | None:
    """What makes a decoded speculative config one specdash does not run, or None. The keys
    are the ones the experiment form sets (Arm.PARAM_KEYS: every other vLLM key, such as
    trust_remote_code, is refused), with the form's bounds, and a path passes the installation's
    model rule (experiments/rules/model_paths.py) as one typed into the form does. Where the
    door knows the target, the method is checked beside it (experiments/rules/speculation_targets.py:
    MTP needs the target's own layers, a draft model's tensor parallel size the target's)."""
    if not isinstance(config, dict):
        return "it is not a JSON object"
    problem = json_input.problem(config)
    if problem:
        return f"it holds {problem}"
    method, k = config.get("method"), config.get("num_speculative_tokens")
    if method not in _PARAM_KEYS:
        return f"its method must be one of {', '.join(_PARAM_KEYS)}, not {json.dumps(method)[:40]}"
    if not is_k(k):
        return f"its num_speculative_tokens must be a whole number from 1 to {MAX_SPECULATIVE_TOKENS}"
    unknown = sorted(set(config_params(config)) - set(_PARAM_KEYS[method]) - set(_OPTIONAL_KEYS.get(method, ())))
    if unknown:
        return f"specdash does not pass {', '.join(unknown)} to vLLM for {method} (it sets {_keys(method)})"
    if batch_schedule.KEY in config:
        problem = batch_schedule.problem(config[batch_schedule.KEY], k=config["num_speculative_tokens"])
        if problem:
            return f"its {batch_schedule.KEY}: {problem}"
    return _params_problem(method, config_params(config)) or _target_problem(
        method, config_params(config), target_model, tensor_parallel_size
    )


def _target_problem(
    method: str, params: dict, target_model: str | None, tensor_parallel_size: int | None
) -> str | None:
    if target_model:
        problem = speculation_targets.target_problem(method, target_model)
        if problem:
            return problem
    draft = params.get("draft_tensor_parallel_size")
    if tensor_parallel_size is None or not isinstance(draft, int):
        return None
    problem = speculation_targets.draft_tensor_parallel_problem(method, draft, target=tensor_parallel_size)
    return f"its draft_tensor_parallel_size {problem}" if problem else None


def is_k(k) -> bool:
    return isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= MAX_SPECULATIVE_TOKENS


def config_params(config: dict) -> dict:
    return {key: value for key, value in config.items() if key not in ("method", "num_speculative_tokens")}


def _keys(method: str) -> str:
    return ", ".join(("method", "num_speculative_tokens", *_PARAM_KEYS[method], *_OPTIONAL_KEYS.get(method, ())))


def _arm_settings_problem(params: dict) -> str | None:
    """The per-arm server settings a config carries are within their rules (the target's tensor
    parallel size is not known here: the experiment form checks a draft's against it)."""
    for setting in server_settings.ARM_SETTINGS:
        problem = setting.problem(params[setting.engine_field]) if setting.engine_field in params else None
        if problem:
            return f"its {setting.engine_field} {problem}"
    return None


def _params_problem(method: str, params: dict) -> str | None:
    missing = [key for key in _PARAM_KEYS[method] if key not in params]
    if missing:
        return f"{method} needs {', '.join(missing)}"
    problem = _arm_settings_problem(params)
    if problem:
        return problem
    if method in Arm.NGRAM_METHODS:
        low, high = params["prompt_lookup_min"], params["prompt_lookup_max"]
        if not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_LOOKUP for v in (low, high)):
            return f"prompt_lookup_min and prompt_lookup_max must be whole numbers from 1 to {MAX_LOOKUP}"
        return f"prompt_lookup_min ({low}) exceeds prompt_lookup_max ({high})" if low > high else None
    if "model" in params:
        model = params["model"]
        if not isinstance(model, str) or not model.strip() or text_rules.control_char(model):
            return "its model must be a path without control characters"
        refusal = model_path_refusal(model)
        return f"its model {model[:80]!r}: {refusal}" if refusal else None
    return None
