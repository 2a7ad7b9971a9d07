"""What vLLM decided for one server, read from its log: the model runner (V1 or V2), async
scheduling, CUDA graphs and the size of the KV cache in tokens.

vLLM 0.32 settles these while it starts and says so in its log, some only when it turns a
feature off. Each rule below quotes the line it reads and where vLLM writes it; a decision no
line states stays None, and lines that contradict each other leave it None too. Plain module:
no Django.
"""

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

# The start-up lines come first; a server's log then grows with every request it serves.
LOG_HEAD_BYTES = 8 * 2**20

RUNNER_V1 = "V1"
RUNNER_V2 = "V2"
CUDA_GRAPHS_OFF = "off"
# Graphs were captured, but no line named the mode.
CUDA_GRAPHS_ON = "on"


@dataclass(frozen=True)
class EngineReport:
    """None where vLLM's log did not say. `evidence` holds, per field, the line it came from."""

    model_runner: str | None = None
    async_scheduling: bool | None = None
    cuda_graphs: str | None = None  # "off", the cudagraph mode (FULL_AND_PIECEWISE, ...) or "on"
    kv_cache_tokens: int | None = None
    evidence: dict[str, str] = field(default_factory=dict)

    def record(self) -> dict[str, object]:
        """The EnvironmentSnapshot fields (experiments/models/execution.py); "" where unknown."""
        return {
            "model_runner": self.model_runner or "",
            "async_scheduling": self.async_scheduling,
            "cuda_graphs": self.cuda_graphs or "",
            "kv_cache_tokens": self.kv_cache_tokens,
            "engine_log_lines": dict(self.evidence),
        }


@dataclass(frozen=True)
class _Rule:
    fact: str
    pattern: re.Pattern[str]
    value: Callable[[re.Match[str]], object]
    # Said before the quoted line where the line alone does not state the fact.
    note: str = ""


def _constant(value: object) -> Callable[[re.Match[str]], object]:
    return lambda _match: value


def _cudagraph_mode(match: re.Match[str]) -> str:
    mode = match.group(1)
    return CUDA_GRAPHS_OFF if mode == "NONE" else mode


_RULES = (
    # v1/worker/gpu_worker.py:518 and v1/worker/cpu_worker.py:162, where the worker builds V2.
    _Rule("model_runner", re.compile(r"Using V2 Model Runner"), _constant(RUNNER_V2)),
    # config/vllm.py:726 "Model Runner V2 requires Triton; using the V1 model runner instead."
    # and :731 "Model Runner V2 does not yet support %s; using the V1 model runner instead."
    _Rule("model_runner", re.compile(r"Model Runner V2 .*; using the V1 model runner instead"), _constant(RUNNER_V1)),
    # config/vllm.py:1597-1642, where vLLM turns async scheduling off by default: "Async scheduling
    # not supported with %s-based speculative decoding and will be disabled.", "... will be disabled
    # because it is not supported with the `%s` distributed executor backend.", "Async scheduling is
    # disabled because the V1 model runner does not support it with pipeline parallelism.", ...
    _Rule("async_scheduling", re.compile(r"Async scheduling .*(?:will be disabled|is disabled)"), _constant(False)),
    # v1/core/kv_cache_utils.py:2328 "%s KV cache size: %s tokens, Maximum concurrency for %s
    # tokens per request: %.2fx", the pool "GPU", "CPU" (the device type), "+ host" with HiSparse.
    _Rule("kv_cache_tokens", re.compile(r"\b\w+(?: \+ host)? KV cache size: ([\d,]+) tokens"), lambda m: _int(m[1])),
    # vLLM 0.32's CPU platform turns async scheduling off without a line (platforms/cpu.py:330-331,
    # "async scheduling is not required on CPU"); the KV cache line names the CPU pool.
    _Rule(
        "async_scheduling",
        re.compile(r"\bCPU KV cache size: "),
        _constant(False),
        note="vLLM's CPU platform turns it off without a line (platforms/cpu.py); this server's KV cache is on CPU: ",
    ),
    # v1/worker/gpu_model_runner.py:6582 and v1/worker/gpu/model_runner.py:1128, after a capture.
    _Rule("cuda_graph_capture", re.compile(r"Graph capturing finished in "), _constant(CUDA_GRAPHS_ON)),
    # v1/worker/gpu_model_runner.py:6484 "Skipping CUDA graph capture. ..." and
    # v1/worker/gpu/model_runner.py:1061 "Skipping encoder and decoder CUDA graph capture. ..."
    _Rule(
        "cuda_graph_capture",
        re.compile(r"Skipping (?:encoder and decoder )?CUDA graph capture"),
        _constant(CUDA_GRAPHS_OFF),
    ),
    # config/vllm.py:1703 (and :1697) "Enforce eager set, disabling torch.compile, CUDAGraphs, and
    # JIT kernel warmup. ...", :1929 "Cudagraph is disabled under eager mode".
    _Rule(
        "cuda_graph_capture",
        re.compile(
            r"Enforce eager set, disabling torch\.compile(?:,| and) CUDAGraphs|Cudagraph is disabled under eager"
        ),
        _constant(CUDA_GRAPHS_OFF),
    ),
    # v1/engine/core.py:134 "Initializing a V1 LLM engine (v%s) with config: %s": the config
    # (config/vllm.py:2703) holds compilation_config's repr, "'cudagraph_mode': <CUDAGraphMode.X: ...>".
    _Rule(
        "cudagraph_mode",
        re.compile(r"Initializing a V1 LLM engine .*'cudagraph_mode': <CUDAGraphMode\.(\w+)"),
        _cudagraph_mode,
    ),
)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


# A fact as the log stated it: its value and the line that said so.
Fact = tuple[object, str]


def parse_engine_report(lines: Iterable[str]) -> EngineReport:
    """The decisions the lines of one server's log state."""
    seen: dict[str, dict[object, str]] = {}
    for line in lines:
        for rule in _RULES:
            match = rule.pattern.search(line)
            if match:
                seen.setdefault(rule.fact, {}).setdefault(rule.value(match), rule.note + _quote(line, match))
    facts = {name: fact for name, values in seen.items() if (fact := _only(values))}
    graphs = _cuda_graphs(facts.get("cuda_graph_capture"), facts.get("cudagraph_mode"))
    if graphs:
        facts["cuda_graphs"] = graphs
    runner, scheduling, tokens = (facts[name][0] if name in facts else None for name in _REPORTED)
    return EngineReport(
        model_runner=runner if isinstance(runner, str) else None,
        async_scheduling=scheduling if isinstance(scheduling, bool) else None,
        cuda_graphs=graphs[0] if graphs else None,
        kv_cache_tokens=tokens if isinstance(tokens, int) else None,
        evidence={name: fact[1] for name, fact in facts.items() if name in (*_REPORTED, "cuda_graphs")},
    )


_REPORTED = ("model_runner", "async_scheduling", "kv_cache_tokens")
_QUOTE_CHARS = 240


def _quote(line: str, match: re.Match[str]) -> str:
    """The line from the matched text on (vLLM's prefix of process, pid, time and file dropped);
    of a long line such as the engine's config, the two ends of the matched text."""
    text = line[match.start() :].strip()
    if len(text) <= _QUOTE_CHARS:
        return text
    matched = match[0]
    return matched if len(matched) <= _QUOTE_CHARS else f"{matched[:100]} … {matched[-100:]}"


def _only(values: dict[object, str]) -> Fact | None:
    """The one value the lines gave, with its line; None when they disagree."""
    return next(iter(values.items())) if len(values) == 1 else None


def _cuda_graphs(capture: Fact | None, mode: Fact | None) -> tuple[str, str] | None:
    """Off where a capture was skipped (or eager mode said so); the configured mode where graphs
    were captured; off where the engine's config said NONE. A mode configured but never
    confirmed by a capture stays unknown."""
    if capture is not None and capture[0] == CUDA_GRAPHS_OFF:
        return CUDA_GRAPHS_OFF, capture[1]
    if capture is not None:
        named = mode is not None and mode[0] != CUDA_GRAPHS_OFF
        return (str(mode[0]) if mode is not None and named else CUDA_GRAPHS_ON), capture[1]
    if mode is not None and mode[0] == CUDA_GRAPHS_OFF:
        return CUDA_GRAPHS_OFF, mode[1]
    return None


def read_engine_report(log_path: Path, limit_bytes: int = LOG_HEAD_BYTES) -> EngineReport:
    """The report of the server whose log is at `log_path`, from its first `limit_bytes` (the
    start-up lines); all unknown when there is no log."""
    try:
        with log_path.open("rb") as log:
            head = log.read(limit_bytes)
    except OSError:
        return EngineReport()
    return parse_engine_report(head.decode("utf-8", errors="replace").splitlines())
