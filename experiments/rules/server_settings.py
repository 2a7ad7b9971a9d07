"""The vLLM server settings a serving engineer may set in an experiment's protocol: one typed
list that the experiment form (and through it the API's spec and the CLI), the protocol card,
the comparison page and the server command (workers/server/command.py) all read. Each
setting is a field of vLLM 0.32's EngineArgs with its command-line flag, or a key of its
SpeculativeConfig; tests/test_vllm_config_keys.py checks every name, flag and choice against the
installed vLLM, so an upgrade that renames one fails there. Never free-form flags.

A setting left empty is not passed: vLLM's own default applies. The experiment-wide ones are
the same for the baseline and every arm (they are the experiment's, not an arm's), so the
comparison stays like for like. Free of Django.
"""

from collections.abc import Mapping
from dataclasses import dataclass

# The most GPUs one server may span: a node of eight.
MAX_TENSOR_PARALLEL_SIZE = 8

Value = int | float | str


@dataclass(frozen=True)
class ServerSetting:
    """One setting: `name` is the Experiment column and the form's and spec's field."""

    name: str
    label: str
    help_text: str
    kind: type[int] | type[float] | type[str]
    # vLLM's command-line flag and the EngineArgs field it sets (for an arm's setting, flag is
    # empty and `engine_field` is the key of --speculative-config, a SpeculativeConfig field).
    flag: str
    engine_field: str
    lowest: int | float = 1
    lowest_included: bool = True
    highest: int | float = 2**31 - 1
    # The values offered, each one vLLM's own type for the field accepts.
    choices: tuple[str, ...] = ()

    def problem(self, value: object) -> str | None:
        """Why vLLM would refuse the value (or specdash does not pass it), or None."""
        if self.choices:
            return None if value in self.choices else f"must be one of {', '.join(self.choices)}"
        whole = self.kind is int
        if isinstance(value, bool) or not isinstance(value, int if whole else int | float):
            return "must be a whole number" if whole else "must be a number"
        below = value <= self.lowest if not self.lowest_included else value < self.lowest
        if below or value > self.highest:
            return f"must be {self.range_text()}"
        return None

    def range_text(self) -> str:
        low, high = shown(self.lowest), shown(self.highest)
        return f"greater than {low} and at most {high}" if not self.lowest_included else f"from {low} to {high}"

    def args(self, value: Value) -> list[str]:
        return [self.flag, str(value)]


# vLLM 0.32's CacheDType: the general-purpose values (the *_ds_mla and per-token-head ones are
# for particular models or kernels, fp8_inc for Intel Gaudi).
KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2")
# vLLM 0.32's QuantizationMethods: a checkpoint's own quantization_config is detected without
# the flag; these are the methods a checkpoint or an online quantization is commonly named by.
QUANTIZATION_METHODS = (
    "fp8", "fp8_per_tensor", "fp8_per_block", "fp8_per_channel", "awq", "awq_marlin", "gptq", "gptq_marlin",
    "compressed-tensors", "modelopt", "modelopt_fp4", "mxfp4",
)  # fmt: skip

SERVER_SETTINGS: tuple[ServerSetting, ...] = (
    ServerSetting(
        name="gpu_memory_utilization",
        label="GPU memory utilization",
        help_text="Share of each GPU's memory the server takes for weights, activations and the KV cache "
        "(--gpu-memory-utilization). vLLM refuses to start when less than this share is free. Empty: vLLM's "
        "default (0.92). CPU workers give the KV cache its size (SPECDASH_CPU_KVCACHE_GIB), and vLLM then "
        "ignores this.",
        kind=float,
        flag="--gpu-memory-utilization",
        engine_field="gpu_memory_utilization",
        lowest=0,
        lowest_included=False,
        highest=1,
    ),
    ServerSetting(
        name="kv_cache_memory_bytes",
        label="KV cache size (bytes)",
        help_text="The KV cache's size per server, in bytes (--kv-cache-memory-bytes), in place of what "
        "--gpu-memory-utilization (GPU) or SPECDASH_CPU_KVCACHE_GIB (CPU) would give it. A draft model's KV "
        "cache comes out of the same size, so a small one shows where a draft arm's requests start to queue. "
        "Empty: the worker's default.",
        kind=int,
        flag="--kv-cache-memory-bytes",
        engine_field="kv_cache_memory_bytes",
        lowest=2**20,
        highest=2**44,
    ),
    ServerSetting(
        name="max_num_seqs",
        label="Max sequences per step",
        help_text="Most requests the scheduler runs in one step (--max-num-seqs). Empty: vLLM's default for "
        "the hardware.",
        kind=int,
        flag="--max-num-seqs",
        engine_field="max_num_seqs",
        highest=1_048_576,
    ),
    ServerSetting(
        name="max_num_batched_tokens",
        label="Max batched tokens per step",
        help_text="Token budget of one scheduler step (--max-num-batched-tokens). Each speculating request "
        "spends k + 1 of it per step, so a small budget starves speculation. Empty: vLLM's default.",
        kind=int,
        flag="--max-num-batched-tokens",
        engine_field="max_num_batched_tokens",
        highest=16_777_216,
    ),
    ServerSetting(
        name="kv_cache_dtype",
        label="KV cache dtype",
        help_text="Data type of the KV cache (--kv-cache-dtype); fp8 halves it and changes outputs. Empty: "
        "vLLM's default (auto, the model's dtype).",
        kind=str,
        flag="--kv-cache-dtype",
        engine_field="kv_cache_dtype",
        choices=KV_CACHE_DTYPES,
    ),
    ServerSetting(
        name="quantization",
        label="Quantization",
        help_text="Weight quantization method (--quantization), for an online quantization such as fp8 or a "
        "checkpoint that does not name its own. Empty: what the checkpoint's config says, if anything.",
        kind=str,
        flag="--quantization",
        engine_field="quantization",
        choices=QUANTIZATION_METHODS,
    ),
)

BY_NAME = {setting.name: setting for setting in SERVER_SETTINGS}

# Per speculative arm, a key of --speculative-config. vLLM 0.32 (SpeculativeConfig.
# _verify_and_get_draft_tp) takes 1 or the target's tensor parallel size, and the target's
# when it is not set.
DRAFT_TENSOR_PARALLEL_SIZE = ServerSetting(
    name="draft_tensor_parallel_size",
    label="Draft tensor parallel size",
    help_text="GPUs the draft model or head spans: 1, or the target's tensor parallel size. Empty: the target's.",
    kind=int,
    flag="",
    engine_field="draft_tensor_parallel_size",
    highest=MAX_TENSOR_PARALLEL_SIZE,
)
ARM_SETTINGS: tuple[ServerSetting, ...] = (DRAFT_TENSOR_PARALLEL_SIZE,)
# The methods whose proposer is a model of its own, which vLLM gives a tensor parallel size.
DRAFT_TP_METHODS = ("draft_model", "eagle", "eagle3")


def batch_problem(values: Mapping[str, Value | None]) -> str | None:
    """Why vLLM would refuse the settings together, or None: its scheduler refuses a token
    budget smaller than the sequences per step (SchedulerConfig.verify_max_model_len). A budget
    below the max model length is not refused while chunked prefill is on, vLLM's default."""
    seqs, tokens = values.get("max_num_seqs"), values.get("max_num_batched_tokens")
    if isinstance(seqs, int) and isinstance(tokens, int) and tokens < seqs:
        return f"must be at least max_num_seqs ({seqs}): vLLM refuses a token budget below the sequences per step"
    return None


def set_values(values: Mapping[str, Value | None]) -> list[tuple[ServerSetting, Value]]:
    """The experiment-wide settings that are set, in list order: empty ones leave vLLM's default."""
    return [(s, value) for s in SERVER_SETTINGS if (value := values.get(s.name)) is not None and value != ""]


def command_args(values: Mapping[str, Value | None]) -> list[str]:
    """The server flags for the settings that are set, and only those."""
    return [arg for setting, value in set_values(values) for arg in setting.args(value)]


def shown(value: Value) -> str:
    """A value as the pages show it: 0.9, 1048576, fp8."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def describe(values: Mapping[str, Value | None]) -> str:
    """The settings as the pages show them: "max_num_seqs 4 · kv_cache_dtype fp8", or vLLM's defaults."""
    return " · ".join(f"{s.name} {shown(value)}" for s, value in set_values(values)) or "vLLM's defaults"
