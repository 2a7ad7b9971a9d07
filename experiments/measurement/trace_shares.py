"""Where an engine step's time goes, read from a torch profiler trace that vLLM wrote during
a profiled interval (workers/server/profiling.py).

The trace is Chrome trace JSON ({"traceEvents": [...]}); complete events ("ph": "X") carry
a name, a start `ts` and a duration `dur` in microseconds. vLLM's model runner names its
phases with torch.profiler.record_function scopes when VLLM_CUSTOM_SCOPES_FOR_PROFILING is
set, and the worker names each engine step "execute_context_N(t)_generation_M(u)" while
the profiler runs. The scopes are classified by name (PHASE_RULES), never by the operators
inside them, so the rules do not depend on CPU kernel names:

- proposing: "gpu_model_runner: draft" (the proposer: n-gram lookup, draft model, EAGLE
  head) and vLLM's GPU n-gram kernel scope;
- verifying: "gpu_model_runner: forward" (the target's forward pass over the scheduled
  tokens: with speculation, the proposed ones too) and "gpu_model_runner: postprocess"
  (its logits);
- sampling: "gpu_model_runner: sample" (the sampler, and the rejection sampler that
  checks the proposals);
- other: the rest of the profiled time: preparing inputs, bookkeeping, and the gaps between
  the worker's phases, in which the engine core schedules the next step and the outputs
  travel between processes.

The profiled time runs from the start of the first step to the end of the last event after
the last step's start, on the timeline the scopes were recorded on: the GPU's
("gpu_user_annotation") when the trace has one, else the host's ("user_annotation"). The
four shares are fractions of it and sum to one. Where scopes overlap, the higher phase in
PHASE_RULES takes the time.

Checked on vLLM 0.32's CPU build with the demo pair (n-gram, draft model and plain
decoding). The GPU timeline's names are vLLM's documented mirror of the host scopes; no
CUDA trace was read here. The scopes are the V1 model runner's (v1/worker/gpu_model_runner.py);
vLLM 0.32's V2 runner (v1/worker/gpu/), its default where Triton is present, records none, so
a trace with steps and no phase scope is refused as "not split on this model runner" rather
than read as 100 % other.

Django-free, so it can be checked on hand-made traces.
"""

import gzip
import itertools
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PHASES = ("proposing", "verifying", "sampling", "other")

# (phase, name prefixes), in priority order.
PHASE_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("proposing", ("gpu_model_runner: draft", "ngram_proposer_gpu: kernel")),
    ("sampling", ("gpu_model_runner: sample",)),
    ("verifying", ("gpu_model_runner: forward", "gpu_model_runner: postprocess")),
)
STEP_PREFIX = "execute_context_"
HOST_SCOPES = "user_annotation"
DEVICE_SCOPES = "gpu_user_annotation"
TOP_EVENTS = 8


class TraceError(ValueError):
    """The trace holds no engine step: the profiler did not run while requests were served."""


@dataclass(frozen=True)
class Span:
    name: str
    start_us: float
    end_us: float


@dataclass
class TraceSummary:
    """Totals of one or more traces: steps, profiled time and each phase's time, in ms."""

    steps: int = 0
    total_ms: float = 0.0
    phase_ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    scope_ms: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    @property
    def shares(self) -> dict[str, float]:
        """Each phase's fraction of the profiled time; they sum to one."""
        return {phase: self.phase_ms[phase] / self.total_ms for phase in PHASES}

    @property
    def top_events(self) -> list[list[float | str]]:
        """[share, name] of the heaviest scope names, heaviest first."""
        heaviest = sorted(self.scope_ms.items(), key=lambda item: -item[1])[:TOP_EVENTS]
        return [[ms / self.total_ms, name] for name, ms in heaviest]

    def add(self, other: "TraceSummary") -> None:
        self.steps += other.steps
        self.total_ms += other.total_ms
        for phase in PHASES:
            self.phase_ms[phase] += other.phase_ms[phase]
        for name, ms in other.scope_ms.items():
            self.scope_ms[name] += ms


def phase_of(name: str) -> str | None:
    """The phase a scope's name belongs to; None for names the rules do not know."""
    for phase, prefixes in PHASE_RULES:
        if name.startswith(prefixes):
            return phase
    return None


def scope_spans(events: Iterable[dict[str, Any]], category: str) -> list[Span]:
    return [
        Span(event["name"], float(event["ts"]), float(event["ts"]) + float(event.get("dur", 0.0)))
        for event in events
        if event.get("ph") == "X" and event.get("cat") == category
    ]


def timeline(events: Sequence[dict[str, Any]]) -> list[Span]:
    """The scopes of the device's timeline when it has steps, else the host's."""
    device = scope_spans(events, DEVICE_SCOPES)
    if any(span.name.startswith(STEP_PREFIX) for span in device):
        return device
    return scope_spans(events, HOST_SCOPES)


def _claimed_us(spans: list[tuple[int, Span]], start: float, end: float) -> dict[int, float]:
    """Time of [start, end) covered by each rank's spans, a point going to the lowest rank
    covering it (a sweep over the spans' ends)."""
    edges = sorted({start, end, *(min(max(t, start), end) for _, s in spans for t in (s.start_us, s.end_us))})
    claimed: dict[int, float] = defaultdict(float)
    for left, right in itertools.pairwise(edges):
        ranks = [rank for rank, span in spans if span.start_us <= left and span.end_us >= right]
        if ranks:
            claimed[min(ranks)] += right - left
    return claimed


def summarise_events(events: Sequence[dict[str, Any]]) -> TraceSummary:
    spans = timeline(events)
    steps = [span for span in spans if span.name.startswith(STEP_PREFIX)]
    if not steps:
        raise TraceError("the trace holds no engine step (no execute_context_ scope)")
    start = min(span.start_us for span in steps)
    end = max(span.end_us for span in spans if span.start_us >= start or span in steps)
    ranks = {phase: rank for rank, (phase, _) in enumerate(PHASE_RULES)}
    classified = [(ranks[phase], span) for span in spans if (phase := phase_of(span.name))]
    claimed = _claimed_us(classified, start, end)
    summary = TraceSummary(steps=len(steps), total_ms=(end - start) / 1000.0)
    for phase, rank in ranks.items():
        summary.phase_ms[phase] = claimed.get(rank, 0.0) / 1000.0
    summary.phase_ms["other"] = summary.total_ms - sum(summary.phase_ms[p] for p in ranks)
    for _, span in classified:
        summary.scope_ms[span.name] += (min(span.end_us, end) - max(span.start_us, start)) / 1000.0
    return summary


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The events of a trace file, gzipped or not."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as trace:
        data = json.load(trace)
    events: list[dict[str, Any]] = data["traceEvents"] if isinstance(data, dict) else data
    return events


def summarise_files(paths: Iterable[Path]) -> TraceSummary:
    """One summary of the traces of one profiling session (one per engine worker)."""
    total = TraceSummary()
    for path in paths:
        total.add(summarise_events(read_trace(path)))
    if not total.scope_ms:
        # Not "100 % other": the runner named no phase, so nothing says where the time went.
        raise TraceError(
            f"not split on this model runner: the traces hold {total.steps} engine steps but none of the phase "
            "scopes vLLM's V1 model runner records (gpu_model_runner: forward, sample, draft); vLLM 0.32's V2 runner, "
            "its default on GPU hosts with Triton, records none"
        )
    return total
