"""What vLLM decided for one server, read from its log: the model runner (V1 or V2), async
scheduling, CUDA graphs, the size of the KV cache in tokens, and FlashInfer turned off or
without its precompiled kernels.

vLLM 0.32 settles these while it starts and says so in its log, some only when it turns a
feature off. Each rule below quotes the line it reads and where vLLM writes it; a decision no
line states stays None, and lines that contradict each other leave it None too. The CUDA-graph
mode is the exception: vLLM writes its config line before the model runner resolves the mode
against the attention backends, and the runner then downgrades it (for speculation among
others: "… not supported with spec-decode …; setting cudagraph_mode=PIECEWISE"), so the last
override line wins over the config line. Plain module: no Django.
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
FLASHINFER_DISABLED = "disabled"
FLASHINFER_KERNELS_MISSING = "kernels missing"


@dataclass(frozen=True)
class EngineReport:
    """None where vLLM's log did not say. `evidence` holds, per field, the line it came from."""

    model_runner: str | None = None
    async_scheduling: bool | None = None
    cuda_graphs: str | None = None  # "off", the cudagraph mode (FULL_AND_PIECEWISE, ...) or "on"
    kv_cache_tokens: int | None = None
    # FLASHINFER_DISABLED, FLASHINFER_KERNELS_MISSING, or None where vLLM said neither; recorded
    # with its line in the snapshot's engine_log_lines.
    flashinfer: str | None = None
    evidence: dict[str, str] = field(default_factory=dict)

    def record(self) -> dict[str, object]:
        """The EnvironmentSnapshot fields (experiments/models/execution.py); "" where unknown. FlashInfer's
        state has no column: its line is kept in engine_log_lines["flashinfer"]."""
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
    # utils/flashinfer.py:100 "FlashInfer kernels are disabled: flashinfer-cubin is not installed and nvcc
    # ... or ninja (PATH) is missing. ..., or run `vllm download-kernels`."
    _Rule("flashinfer", re.compile(r"FlashInfer kernels are disabled"), _constant(FLASHINFER_DISABLED)),
    # utils/flashinfer.py:143 "FlashInfer's precompiled kernels are missing or do not match flashinfer-python %s
    # (%s). FlashInfer then downloads and compiles kernels at startup, ..."
    _Rule(
        "flashinfer",
        re.compile(r"FlashInfer's precompiled kernels are missing or do not match flashinfer-python \S+ \([^)]*\)"),
        _constant(FLASHINFER_KERNELS_MISSING),
    ),
)

# Where vLLM changes the CUDA-graph mode after (or besides) its config line; each names the mode it
# sets, and a later one applies to the mode an earlier one left.
_MODE_OVERRIDES = (
    # config/compilation.py:1386-1458, resolve_cudagraph_mode_and_sizes (the model runner, once its
    # attention backends are known): "CUDAGraphMode.%s is not supported with spec-decode for attention
    # backend %s (support: %s); setting cudagraph_mode=PIECEWISE", "...; setting cudagraph_mode=NONE", ...
    re.compile(r"; setting cudagraph_mode=(\w+)"),
    # config/vllm.py:1051 "Overriding cudagraph_mode from %s to PIECEWISE for reliability", :1883 and :1893
    # "Overriding cudagraph_mode to PIECEWISE.", :1921, :3180 "Overriding cudagraph_mode %s to NONE."
    re.compile(r"Overriding cudagraph_mode (?:from )?(?:\w+ )?to (\w+)"),
    # config/compilation.py:1466 "Cudagraph mode %s requires piecewise capture, but ... Overriding to %s."
    re.compile(r"Cudagraph mode \w+ requires piecewise capture.*Overriding to (\w+)"),
    # config/compilation.py:1221-1230 "... Setting cudagraph_mode to NONE. ..." / "... to FULL."
    re.compile(r"Setting cudagraph_mode to (\w+)"),
)


def _int(text: str) -> int:
    return int(text.replace(",", ""))


# A fact as the log stated it: its value and the line that said so.
Fact = tuple[object, str]


def parse_engine_report(lines: Iterable[str]) -> EngineReport:
    """The decisions the lines of one server's log state."""
    seen: dict[str, dict[object, str]] = {}
    override: Fact | None = None
    for line in lines:
        for rule in _RULES:
            match = rule.pattern.search(line)
            if match:
                seen.setdefault(rule.fact, {}).setdefault(rule.value(match), rule.note + _quote(line, match))
        override = _mode_override(line) or override
    facts = {name: fact for name, values in seen.items() if (fact := _only(values))}
    graphs = _cuda_graphs(facts.get("cuda_graph_capture"), facts.get("cudagraph_mode"), override)
    if graphs:
        facts["cuda_graphs"] = graphs
    runner, scheduling, tokens, flashinfer = (facts[name][0] if name in facts else None for name in _REPORTED)
    return EngineReport(
        model_runner=runner if isinstance(runner, str) else None,
        async_scheduling=scheduling if isinstance(scheduling, bool) else None,
        cuda_graphs=graphs[0] if graphs else None,
        kv_cache_tokens=tokens if isinstance(tokens, int) else None,
        flashinfer=flashinfer if isinstance(flashinfer, str) else None,
        evidence={name: fact[1] for name, fact in facts.items() if name in (*_REPORTED, "cuda_graphs")},
    )


def _mode_override(line: str) -> Fact | None:
    """The CUDA-graph mode a line of vLLM's sets, with the line; None for any other line."""
    for pattern in _MODE_OVERRIDES:
        match = pattern.search(line)
        if match:
            return _cudagraph_mode(match), _quote(line, match)
    return None


_REPORTED = ("model_runner", "async_scheduling", "kv_cache_tokens", "flashinfer")
_QUOTE_CHARS = 240


# vLLM's prefix of a log line (vllm/logger.py): "(EngineCore pid=4188) INFO 12-02 16:40:06 [core.py:133] ".
_PREFIX = re.compile(r"^(?:\(\w+ pid=\d+\) )?\w+ [\d-]+ [\d:.]+ \[[^\]]+\] ")


def _quote(line: str, match: re.Match[str]) -> str:
    """The message (vLLM's prefix of process, pid, time and file dropped) from its start, or from
    the matched text where no prefix is found; of a long line such as the engine's config, the
    two ends of the matched text."""
    prefix = _PREFIX.match(line)
    start = prefix.end() if prefix and prefix.end() <= match.start() else match.start()
    text = line[start:].strip()
    if len(text) <= _QUOTE_CHARS:
        return text
    matched = match[0]
    return matched if len(matched) <= _QUOTE_CHARS else f"{matched[:100]} … {matched[-100:]}"


def _only(values: dict[object, str]) -> Fact | None:
    """The one value the lines gave, with its line; None when they disagree."""
    return next(iter(values.items())) if len(values) == 1 else None


def _cuda_graphs(capture: Fact | None, configured: Fact | None, override: Fact | None) -> tuple[str, str] | None:
    """Off where a capture was skipped (or eager mode said so); the mode in force (the last
    override's, else the config line's) where graphs were captured; off where that mode is NONE.
    A mode never confirmed by a capture stays unknown. The line quoted is the override's where
    one set the mode, else the capture's."""
    mode = override or configured
    if capture is not None and capture[0] == CUDA_GRAPHS_OFF:
        return CUDA_GRAPHS_OFF, capture[1]
    if capture is not None:
        if mode is not None and mode[0] == CUDA_GRAPHS_OFF and override is not None:
            return CUDA_GRAPHS_OFF, override[1]
        named = mode is not None and mode[0] != CUDA_GRAPHS_OFF
        return (str(mode[0]) if mode is not None and named else CUDA_GRAPHS_ON), (override or capture)[1]
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
