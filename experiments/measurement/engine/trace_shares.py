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
CUDA trace was read here. The scopes are the V1 model runner's (v1/worker/gpu_model_runner.py).
vLLM 0.32's V2 runner (v1/worker/gpu/), its default where Triton is present, names none of
its phases: the only scope left is the worker's step, which wraps the runner's execute_model
(input preparation and the target's forward) but not its sample_tokens (sampling, rejection
and the proposer), and its kernels name no phase either (the draft's forward runs the same
kernels as the target's). A trace with steps and none of the phase scopes, on any runner
and on CPU too, is summarised as "not split" (TraceSummary.split is false, its shares are
empty) rather than read as 100 % other.

Traces are read as a stream (trace_events): a GPU trace holds every kernel and CUDA call and
runs to hundreds of megabytes, and only the scopes are kept, so memory follows the number of
scopes (a few per step), not the size of the file. scripts/bench_trace_read.py measures it.

Django-free, so it can be checked on hand-made traces.
"""

import gzip
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

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
NOT_SPLIT = "not split on this model runner"
# Characters read from a trace at a time: the reader holds at most this plus one event.
CHUNK_CHARS = 1 << 20

_DECODER = json.JSONDecoder()
_NON_SPACE = re.compile(r"\S")


class TraceError(ValueError):
    """The trace holds no engine step: the profiler did not run while requests were served."""


@dataclass(frozen=True, slots=True)  # slots: a GPU trace keeps some ten scopes a step
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
    def split(self) -> bool:
        """Whether the traces hold any of the phase scopes within their steps."""
        return bool(self.scope_ms)

    @property
    def shares(self) -> dict[str, float]:
        """Each phase's fraction of the profiled time; they sum to one. Empty when not split:
        without a phase scope nothing says where the time went, and 100 % other would be a guess."""
        if not self.split:
            return {}
        return {phase: self.phase_ms[phase] / self.total_ms for phase in PHASES}

    @property
    def not_split_reason(self) -> str:
        """Why the shares are empty; "" when they are not."""
        if self.split:
            return ""
        return (
            f"{NOT_SPLIT}: the traces hold {self.steps} engine steps but none of the phase scopes vLLM's V1 model "
            "runner records (gpu_model_runner: forward, sample, draft). vLLM 0.32's V2 runner, its default on GPU "
            "hosts with Triton, records none; the V1 runner records them only with VLLM_CUSTOM_SCOPES_FOR_PROFILING=1"
        )

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


def scope_spans(events: Iterable[dict[str, Any]]) -> dict[str, list[Span]]:
    """The complete scopes of each timeline, in one pass over the events; every other event
    (operators, kernels, CUDA calls: most of a GPU trace) is dropped as it is read."""
    kept: dict[str, list[Span]] = {HOST_SCOPES: [], DEVICE_SCOPES: []}
    names: dict[str, str] = {}  # one string per name, however many scopes carry it
    for event in events:
        spans = kept.get(event.get("cat", ""))
        if spans is not None and event.get("ph") == "X":
            name = names.setdefault(event["name"], event["name"])
            start = float(event["ts"])
            spans.append(Span(name, start, start + float(event.get("dur", 0.0))))
    return kept


def timeline(scopes: dict[str, list[Span]]) -> list[Span]:
    """The scopes of the device's timeline when it has steps, else the host's."""
    if any(span.name.startswith(STEP_PREFIX) for span in scopes[DEVICE_SCOPES]):
        return scopes[DEVICE_SCOPES]
    return scopes[HOST_SCOPES]


def _claimed_us(spans: list[tuple[int, Span]], start: float, end: float) -> dict[int, float]:
    """Time of [start, end) covered by each rank's spans, a point going to the lowest rank
    covering it (a sweep over the spans' ends, clipped to the window)."""
    edges = sorted(
        (min(max(t, start), end), delta, rank)
        for rank, span in spans
        for t, delta in ((span.start_us, 1), (span.end_us, -1))
    )
    covering: Counter[int] = Counter()
    claimed: dict[int, float] = defaultdict(float)
    previous = start
    for time, delta, rank in edges:
        ranks = [r for r, count in covering.items() if count > 0]
        if ranks and time > previous:
            claimed[min(ranks)] += time - previous
        previous = time
        covering[rank] += delta
    return claimed


def summarise_spans(spans: list[Span]) -> TraceSummary:
    """The summary of one timeline's scopes."""
    steps = [span for span in spans if span.name.startswith(STEP_PREFIX)]
    if not steps:
        raise TraceError("the trace holds no engine step (no execute_context_ scope)")
    start = min(span.start_us for span in steps)
    end = max(span.end_us for span in spans if span.start_us >= start)
    ranks = {phase: rank for rank, (phase, _) in enumerate(PHASE_RULES)}
    classified = [
        (ranks[phase], span)
        for span in spans
        if (phase := phase_of(span.name)) and min(span.end_us, end) > max(span.start_us, start)
    ]
    claimed = _claimed_us(classified, start, end)
    summary = TraceSummary(steps=len(steps), total_ms=(end - start) / 1000.0)
    for phase, rank in ranks.items():
        summary.phase_ms[phase] = claimed.get(rank, 0.0) / 1000.0
    summary.phase_ms["other"] = summary.total_ms - sum(summary.phase_ms[p] for p in ranks)
    for _, span in classified:
        summary.scope_ms[span.name] += (min(span.end_us, end) - max(span.start_us, start)) / 1000.0
    return summary


def summarise_events(events: Iterable[dict[str, Any]]) -> TraceSummary:
    """The summary of one trace's events, read once."""
    return summarise_spans(timeline(scope_spans(events)))


class _Stream:
    """A text file read CHUNK_CHARS at a time and decoded one JSON value at a time by the
    standard library's decoder (its C scanner): the speed of json.load, the memory of a chunk."""

    def __init__(self, file: IO[str]) -> None:
        self.file = file
        self.buffer = ""
        self.pos = 0
        self.eof = False

    def _fill(self) -> None:
        chunk = self.file.read(CHUNK_CHARS)
        self.eof = not chunk
        self.buffer = self.buffer[self.pos :] + chunk
        self.pos = 0

    def peek(self) -> str:
        """The next character that is not white space ("" at the end), left unread."""
        while not (match := _NON_SPACE.search(self.buffer, self.pos)):
            self.pos = len(self.buffer)
            if self.eof:
                return ""
            self._fill()
        self.pos = match.start()
        return match.group()

    def skip(self, char: str) -> bool:
        """Read `char` if it comes next."""
        if self.peek() != char:
            return False
        self.pos += 1
        return True

    def expect(self, char: str) -> None:
        """Read `char`, which must come next: a trace that is not JSON fails, never reads on."""
        if not self.skip(char):
            raise TraceError(f"the trace is not JSON: {char!r} expected, {self.peek()!r} found")

    def value(self) -> Any:
        """The next JSON value. One that ends where the buffer does may go on in the next
        chunk (a number cut in two), so it is taken only once more text or the end follows."""
        self.peek()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buffer, self.pos)
                if end < len(self.buffer) or self.eof:
                    self.pos = end
                    return value
            except json.JSONDecodeError:
                if self.eof:
                    raise
            self._fill()


def _array(stream: _Stream) -> Iterator[Any]:
    stream.expect("[")
    if stream.skip("]"):
        return
    while True:
        yield stream.value()
        if stream.skip("]"):
            return
        stream.expect(",")


def _trace_events(stream: _Stream) -> Iterator[Any]:
    """The elements of "traceEvents" in a trace object, or of a bare event list; the object's
    other keys (device properties, versions, the trace's name) are read and dropped."""
    if stream.peek() == "[":
        yield from _array(stream)
        return
    stream.expect("{")
    if stream.skip("}"):
        return
    while True:
        key = stream.value()
        stream.expect(":")
        if key == "traceEvents":
            yield from _array(stream)
        else:
            stream.value()
        if stream.skip("}"):
            return
        stream.expect(",")


def trace_events(path: Path) -> Iterator[dict[str, Any]]:
    """The events of a trace file, gzipped (vLLM's default, .pt.trace.json.gz) or not, read
    as a stream: one event in memory at a time."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as trace:
        yield from _trace_events(_Stream(trace))


def summarise_files(paths: Iterable[Path]) -> TraceSummary:
    """One summary of the traces of one profiling session (one per engine worker); not split
    (summary.split false) when none of them holds a phase scope."""
    total = TraceSummary()
    for path in paths:
        total.add(summarise_events(trace_events(path)))
    return total
