"""What makes two or more experiments unlike: the rules of the comparison page, free of Django.

Speculation's gain depends on the model, the runtime, the hardware, the sampling settings
and the prompts, and a verdict depends on the design that measured it. Comparing arms from
experiments that differ in any of these compares the difference too, so the page names
every one. `differences` takes one Protocol per experiment and returns each field whose
values are not all the same, with what that difference does to the comparison.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

NOT_RECORDED = "not recorded"


@dataclass(frozen=True)
class Protocol:
    """What one experiment was measured under. The runtime fields (versions, hardware,
    hosts, binding) are what its runs recorded; empty before any run recorded them."""

    label: str
    target_model: str
    dtype: str
    max_model_len: int
    tensor_parallel_size: int
    server_settings: str  # the vLLM settings set, "vLLM's defaults" without (experiments/rules/server_settings.py)
    worker_queue: str
    requested_vllm_version: str
    vllm_versions: tuple[str, ...]
    runtime: tuple[str, ...]  # torch, Python, GPU driver and CUDA, e.g. "torch 2.13.0 · CUDA 12.4"
    hardware: tuple[str, ...]
    hosts: tuple[str, ...]
    cpu_binding: tuple[str, ...]
    workload: str  # "prompt set chat" or "synthetic prompts of 64 words"
    prompt_set_hash: str
    num_prompts: int
    warmup_requests: int
    max_tokens: int
    ignore_eos: bool
    temperature: float
    top_p: float
    seed: int
    request_rate: float | None
    concurrency_levels: tuple[int, ...]
    repetitions: int
    server_per_block: bool
    aa_replicate: bool
    draft_calibration: bool
    equivalence_margin: float
    slos: tuple[str, ...]


@dataclass(frozen=True)
class Difference:
    key: str
    label: str
    values: tuple[str, ...]  # one per experiment, in the order given
    consequence: str


def hardware_label(*, gpu_name: str, gpu_count: int, cpu_model: str) -> str:
    """The accelerator a run used, as the pages list it: "1 × NVIDIA H100" or "CPU: <model>"."""
    if gpu_count:
        return f"{gpu_count} × {gpu_name or 'unknown GPU'}"
    return f"CPU: {cpu_model or 'unknown'}"


def _listed(values: tuple[str, ...]) -> str:
    return ", ".join(str(v) for v in values) if values else NOT_RECORDED


def _sampling(p: Protocol) -> str:
    mode = "greedy" if p.temperature == 0 else "sampled"
    return f"{mode}: temperature {p.temperature:g}, top-p {p.top_p:g}"


def _flag(on: bool, yes: str, no: str) -> str:
    return yes if on else no


# key: (label, value of a protocol as shown, what the difference does to the comparison)
RULES: dict[str, tuple[str, Callable[[Protocol], str], str]] = {
    "target_model": (
        "Target model",
        lambda p: p.target_model,
        "Different models: speedups and latencies belong to different models.",
    ),
    "dtype": ("dtype", lambda p: p.dtype, "Different numeric precision changes step cost and outputs."),
    "max_model_len": (
        "Max model length",
        lambda p: str(p.max_model_len),
        "A different context limit changes the KV cache and the batch the server can hold.",
    ),
    "tensor_parallel_size": (
        "Tensor parallel size",
        lambda p: str(p.tensor_parallel_size),
        "A server across a different number of GPUs has a different step cost, memory and batch.",
    ),
    "server_settings": (
        "Server settings",
        lambda p: p.server_settings,
        "Different memory shares, batch limits, KV cache dtype or quantization change the batch the server "
        "holds, its step cost and, for speculation, the token budget a draft may use.",
    ),
    "requested_vllm_version": (
        "vLLM version asked for",
        lambda p: p.requested_vllm_version or "none (whatever the queue's workers have)",
        "The experiments asked for different runtimes; what each actually ran is the recorded vLLM version.",
    ),
    "vllm_versions": (
        "vLLM version",
        lambda p: _listed(p.vllm_versions),
        "Different runtimes: the speculative implementation and the scheduler may have changed.",
    ),
    "runtime": (
        "Runtime libraries",
        lambda p: _listed(p.runtime),
        "Different torch, driver or CUDA versions can change kernel speed.",
    ),
    "worker_queue": (
        "Worker queue",
        lambda p: p.worker_queue,
        "Different worker pools: the hardware may differ.",
    ),
    "hardware": (
        "Hardware",
        lambda p: _listed(p.hardware),
        "Different hardware: absolute latencies are not comparable, and speedups can differ too.",
    ),
    "hosts": (
        "Worker host",
        lambda p: _listed(p.hosts),
        "Different machines: absolute latencies are labelled as such; compare speedups, each measured "
        "against its own baseline on one host.",
    ),
    "cpu_binding": (
        "CPU binding",
        lambda p: _listed(p.cpu_binding),
        "A different split of cores between the engine and the load generator changes CPU-host results.",
    ),
    "workload": (
        "Prompt set",
        lambda p: p.workload,
        "Different prompts: acceptance, and so the speedup, depends on the text.",
    ),
    "prompt_set_hash": (
        "Prompt set content (hash)",
        lambda p: p.prompt_set_hash or NOT_RECORDED,
        "The prompt set's content changed between the experiments, even if its name did not.",
    ),
    "num_prompts": (
        "Prompts per level",
        lambda p: str(p.num_prompts),
        "A different number of measured prompts changes what the percentiles rest on.",
    ),
    "warmup_requests": (
        "Warm-up requests",
        lambda p: str(p.warmup_requests),
        "A different warm-up can leave caches and graphs in a different state.",
    ),
    "max_tokens": (
        "Output length (max_tokens)",
        lambda p: str(p.max_tokens),
        "Different output lengths change TPOT, E2E and acceptance along the output.",
    ),
    "ignore_eos": (
        "ignore_eos",
        lambda p: _flag(p.ignore_eos, "on", "off"),
        "Outputs forced past their natural end distort acceptance.",
    ),
    "sampling": (
        "Sampling",
        _sampling,
        "Temperature changes acceptance: greedy and sampled results are not comparable.",
    ),
    "seed": ("Seed", lambda p: str(p.seed), "A different seed samples and orders differently."),
    "request_rate": (
        "Request rate",
        lambda p: f"Poisson, {p.request_rate:g} req/s" if p.request_rate else "as fast as concurrency allows",
        "Under a fixed arrival rate throughput measures the rate, not the server.",
    ),
    "concurrency_levels": (
        "Concurrency levels",
        lambda p: ", ".join(map(str, p.concurrency_levels)),
        "Only the levels both measured can be compared level by level.",
    ),
    "repetitions": (
        "Repetitions (blocks)",
        lambda p: str(p.repetitions),
        "A different number of blocks gives intervals of different width; below 3 there are no verdicts.",
    ),
    "server_per_block": (
        "Server per block",
        lambda p: _flag(p.server_per_block, "fresh server per arm and block", "one server per arm"),
        "With one server per arm the intervals leave out the variance between server starts.",
    ),
    "aa_replicate": (
        "A/A replicate",
        lambda p: _flag(p.aa_replicate, "yes", "no"),
        "Only an experiment with the replicate measured its own noise floor.",
    ),
    "draft_calibration": (
        "Draft model's cost measured",
        lambda p: _flag(p.draft_calibration, "yes", "no"),
        "Only an experiment that served its draft model alone predicts the speedup from a measured cost.",
    ),
    "equivalence_margin": (
        "Equivalence margin",
        lambda p: f"{p.equivalence_margin:.1%}",
        "The verdict words use different margins: “equivalent” does not mean the same in each.",
    ),
    "slos": (
        "SLOs",
        lambda p: " · ".join(p.slos) or "none",
        "Goodput counts requests against different SLOs.",
    ),
}


def differences(protocols: Sequence[Protocol]) -> list[Difference]:
    """Every rule whose value is not the same for all the protocols, in RULES order."""
    found = []
    for key, (label, value, consequence) in RULES.items():
        values = tuple(value(protocol) for protocol in protocols)
        if len(set(values)) > 1:
            found.append(Difference(key, label, values, consequence))
    return found


def alike(protocols: Sequence[Protocol]) -> list[str]:
    """The labels of the rules on which every protocol agrees."""
    differing = {difference.key for difference in differences(protocols)}
    return [label for key, (label, _, _) in RULES.items() if key not in differing]


def shared_levels(protocols: Sequence[Protocol]) -> list[int]:
    """The concurrency levels every experiment measured."""
    levels = set(protocols[0].concurrency_levels) if protocols else set()
    for protocol in protocols[1:]:
        levels &= set(protocol.concurrency_levels)
    return sorted(levels)
