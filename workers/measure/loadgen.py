"""Streaming load generator for vLLM's OpenAI-compatible /v1/completions and
/v1/chat/completions endpoints: a prompt given as text goes to the first, a prompt given as
chat messages to the second, measured the same way (chat chunks carry `token_ids` beside
their `delta`, and the last event the usage and the speculative metrics alike).

Each request streams (`stream: true`) and asks for:
- `return_token_ids: true`, so that every chunk names the token ids it carries. Under
  speculation one chunk can carry several tokens; counting `token_ids` is exact, while
  the chunk's `text` is empty for tokens that do not yet complete a character.
- `stream_options.include_usage: true`, so that the last data event carries `usage`
  (prompt and completion token counts) and, when the server runs with
  `--per-request-spec-decode-metrics`, `metrics.speculative_decoding` (mean acceptance
  length; per-step accepted/drafted arrays at the `detailed` level) and, with
  `--enable-per-request-metrics`, `metrics.generation_time_ms`: the engine's own time from
  the first output token to the last (`server_decode_ms`), which the step accounting uses.

Timing follows the metric definitions in docs/metrics.md: TTFT is send → first chunk carrying
tokens, E2E is send → last chunk carrying tokens, TPOT is (E2E − TTFT) / (tokens − 1).
Under a Poisson request rate, `queue_ms` is the time a request waited in the client
between its scheduled arrival and its send (for a free concurrency slot).
The output's token ids are kept, so that outputs can be compared between arms.
While the measured requests run, /metrics is read every CAPACITY_POLL_S for the server's
capacity figures (KV-cache use, running and waiting requests), on a connection of its own.
Plain module: no Django, no vLLM.
"""

import asyncio
import json
import random
import time
from array import array
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp

from experiments.measurement.encoding.packed import FLOAT64, UINT16, UINT32
from experiments.measurement.engine import stream_fidelity
from experiments.measurement.engine.host_load import HostState
from experiments.measurement.engine.prom import (
    CapacityFigures,
    CapacitySample,
    SpecCounters,
    diff,
    parse_capacity,
    parse_spec_counters,
    summarise_capacity,
)
from experiments.measurement.stats import acceptance, latency
from workers.host.host_load import HostWatch

ProgressCallback = Callable[[int, int], None]
# A request's input: the text of a completion, or the messages of a chat.
Prompt = str | list[dict[str, Any]]
COMPLETIONS_PATH = "/v1/completions"
CHAT_PATH = "/v1/chat/completions"
# One small GET this often beside the load: often enough to catch a peak of the KV cache on
# runs of a few seconds, rarely enough that the server's time to render the page (a few
# milliseconds) stays well under 1 % of a core.
CAPACITY_POLL_S = 0.5
_Parsed = TypeVar("_Parsed")


@dataclass
class RequestResult:
    prompt_index: int
    input_tokens: int = 0
    output_tokens: int = 0
    sent_at_s: float = 0.0
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    tpot_ms: float | None = None
    # Recorded into array.array of the stored element types (experiments/measurement/encoding/packed.py), so that
    # storing a request copies its buffers instead of reading every number. The annotations are
    # quoted: array.array takes a subscript at run time from Python 3.12 only.
    chunk_times_ms: "array[float]" = field(default_factory=FLOAT64.new)
    chunk_tokens: "array[int]" = field(default_factory=UINT32.new)
    output_token_ids: "array[int]" = field(default_factory=UINT32.new)
    queue_ms: float | None = None
    # vLLM's own decode time (first output token to last, engine timestamps): with
    # --enable-per-request-metrics it rides on the final usage chunk.
    server_decode_ms: float | None = None
    # vLLM's time from scheduling to the first token, and its time in the engine's queue before
    # that: client TTFT − both is the wait the engine does not account for.
    server_ttft_ms: float | None = None
    server_queue_ms: float | None = None
    # Derived in finalise(): TPOT as the engine timed it, and how the stream the client saw
    # compares with the engine's timing (experiments/measurement/engine/stream_fidelity.py).
    server_tpot_ms: float | None = None
    stream: stream_fidelity.StreamCheck = field(default_factory=stream_fidelity.StreamCheck)
    finish_reason: str = ""
    error: str = ""
    spec_acceptance_length: float | None = None
    spec_accepted_per_step: "array[int] | None" = None
    spec_proposed_per_step: "array[int] | None" = None


@dataclass
class LoadResult:
    requests: list[RequestResult]
    duration_s: float
    started_at: datetime
    finished_at: datetime
    # vLLM's speculative-decoding counters over the measured interval: zeros for a
    # baseline, None when /metrics could not be read.
    spec_counters: SpecCounters | None = None
    # KV-cache use, running and waiting requests sampled during the measured requests, and
    # the preemptions among them; None when not measured.
    capacity: CapacityFigures | None = None
    # How busy the host was over the run (workers/host/host_load.py); None when not read.
    host: HostState | None = None


def poisson_offsets(count: int, rate: float | None, seed: int) -> list[float]:
    """Send times in seconds from the start: all at once without a rate, else Poisson arrivals."""
    if not rate:
        return [0.0] * count
    rng = random.Random(seed)
    offsets, now = [], 0.0
    for _ in range(count):
        offsets.append(now)
        now += rng.expovariate(rate)
    return offsets


def request_body(
    *, model: str, prompt: Prompt, max_tokens: int, temperature: float, top_p: float, seed: int, ignore_eos: bool
) -> dict[str, Any]:
    return {
        "model": model,
        **({"messages": prompt} if isinstance(prompt, list) else {"prompt": prompt}),
        "max_tokens": max_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "seed": seed,
        "ignore_eos": ignore_eos,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_token_ids": True,
    }


def sse_data(line: bytes) -> bytes | None:
    """The payload of an SSE `data:` line; None for blank lines, comments and other fields."""
    line = line.strip()
    if not line.startswith(b"data:"):
        return None
    return line[5:].strip()


def apply_event(result: RequestResult, event: dict[str, Any], at_ms: float) -> None:
    """Fold one streamed JSON event, received `at_ms` after the send, into `result`."""
    if "error" in event:
        error = event["error"]
        result.error = error.get("message", str(error)) if isinstance(error, dict) else str(error)
    for choice in event.get("choices") or []:
        token_ids = choice.get("token_ids") or ()
        if token_ids:
            result.chunk_times_ms.append(at_ms)
            result.chunk_tokens.append(len(token_ids))
            result.output_token_ids.extend(token_ids)
        if choice.get("prompt_token_ids"):
            result.input_tokens = len(choice["prompt_token_ids"])
        if choice.get("finish_reason"):
            result.finish_reason = choice["finish_reason"]
    if usage := event.get("usage"):
        result.input_tokens = usage.get("prompt_tokens", result.input_tokens)
        result.output_tokens = usage.get("completion_tokens", 0)
    metrics = event.get("metrics") or {}
    if metrics.get("generation_time_ms") is not None:
        result.server_decode_ms = float(metrics["generation_time_ms"])
    if metrics.get("time_to_first_token_ms") is not None:
        result.server_ttft_ms = float(metrics["time_to_first_token_ms"])
    if metrics.get("queue_time_ms") is not None:
        result.server_queue_ms = float(metrics["queue_time_ms"])
    if spec := metrics.get("speculative_decoding"):
        _apply_spec_metrics(result, spec)


def _apply_spec_metrics(result: RequestResult, spec: dict[str, Any]) -> None:
    # With no verify step (e.g. a one-token output) vLLM still reports a length of 1.0.
    if spec.get("num_spec_steps"):
        result.spec_acceptance_length = spec["mean_acceptance_length"]
    # Converted here, once per request, as part of the measured run (not of storing it).
    result.spec_accepted_per_step = _per_step(spec.get("per_step_accepted"))
    result.spec_proposed_per_step = _per_step(spec.get("per_step_drafted"))


def _per_step(counts: list[int] | None) -> "array[int] | None":
    return None if counts is None else UINT16.new(counts)


def finalise(result: RequestResult) -> None:
    """Check the stream was complete and derive the timings; sets `error` when it was not."""
    streamed = sum(result.chunk_tokens)
    if not result.error and not streamed:
        result.error = "no output tokens received"
    elif not result.error and result.output_tokens != streamed:
        result.error = f"usage reports {result.output_tokens} output tokens, chunks carried {streamed}"
    if result.error:
        result.output_tokens = streamed
        return
    result.ttft_ms = result.chunk_times_ms[0]
    result.e2e_ms = result.chunk_times_ms[-1]
    result.tpot_ms = latency.tpot_ms(result.ttft_ms, result.e2e_ms, result.output_tokens)
    result.server_tpot_ms = stream_fidelity.server_tpot_ms(result.server_decode_ms, result.output_tokens)
    result.stream = stream_fidelity.request_check(stream_timing(result))


def stream_timing(result: RequestResult) -> stream_fidelity.RequestTiming:
    """A succeeded request as the stream check reads it. Its decode steps: vLLM's per-step
    counts where the server speculated (a speculative server reports them for every request,
    an empty list when nothing was drafted), else a token a step."""
    return stream_fidelity.RequestTiming(
        chunk_times_ms=result.chunk_times_ms,
        output_tokens=result.output_tokens,
        decode_steps=acceptance.decode_steps(result.output_tokens, result.spec_accepted_per_step),
        server_decode_ms=result.server_decode_ms,
        server_queue_ms=result.server_queue_ms,
        server_ttft_ms=result.server_ttft_ms,
    )


async def _read_stream(response: aiohttp.ClientResponse, sent: float, result: RequestResult) -> None:
    buffer, finished = b"", False
    async for data in response.content.iter_any():
        at_ms = (time.perf_counter() - sent) * 1000.0
        lines = (buffer + data).split(b"\n")
        buffer = lines.pop()
        for payload in filter(None, map(sse_data, lines)):
            if payload == b"[DONE]":
                finished = True
            else:
                apply_event(result, json.loads(payload), at_ms)
    if not finished and not result.error:
        result.error = "stream ended before [DONE]"


async def fetch_metrics(session: aiohttp.ClientSession, base_url: str) -> str | None:
    try:
        async with session.get(f"{base_url}/metrics") as response:
            response.raise_for_status()
            return await response.text()
    except (TimeoutError, aiohttp.ClientError, ValueError):
        return None


def _parsed(text: str | None, parse: Callable[[str], _Parsed]) -> _Parsed | None:
    """`parse(text)`, or None when the page was not read or lacks what `parse` needs."""
    try:
        return None if text is None else parse(text)
    except ValueError:
        return None


@dataclass
class CapacitySampler:
    """Reads the capacity metrics every `interval_s` until cancelled, on its own session so
    that it never waits for (or takes) one of the load's connections."""

    base_url: str
    interval_s: float = CAPACITY_POLL_S
    samples: list[CapacitySample] = field(default_factory=list)

    async def run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=max(self.interval_s * 4, 2.0))
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            while True:
                sample = _parsed(await fetch_metrics(session, self.base_url), parse_capacity)
                if sample is not None:
                    self.samples.append(sample)
                await asyncio.sleep(self.interval_s)


async def send_request(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], *, prompt_index: int, origin: float
) -> tuple[RequestResult, float]:
    """One streamed request, never raising for HTTP or connection failures.

    Returns the result and the time the response ended, both in seconds from `origin`
    (a perf_counter reading).
    """
    result = RequestResult(prompt_index=prompt_index)
    sent = time.perf_counter()
    result.sent_at_s = sent - origin
    try:
        async with session.post(url, json=body) as response:
            if response.status != 200:
                result.error = f"HTTP {response.status}: {(await response.text())[:500]}"
            else:
                await _read_stream(response, sent, result)
    except TimeoutError:
        result.error = f"timed out after {session.timeout.total} s"
    except (aiohttp.ClientError, ValueError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    ended_s = time.perf_counter() - origin
    finalise(result)
    return result, ended_s


@dataclass
class _Phase:
    """Requests sent under one concurrency limit; counts completions for the progress callback.

    With `paced`, requests arrive at their offsets (a Poisson schedule) and each records
    how long it then queued in the client for a free slot."""

    session: aiohttp.ClientSession
    url: str
    bodies: dict[int, dict[str, Any]]
    semaphore: asyncio.Semaphore
    on_request_done: ProgressCallback | None = None
    executor: ThreadPoolExecutor | None = None
    paced: bool = False
    done: int = 0

    async def run(self, offsets: list[float]) -> list[tuple[RequestResult, float]]:
        origin = time.perf_counter()
        async with asyncio.TaskGroup() as group:
            tasks = []
            for (index, body), offset in zip(self.bodies.items(), offsets, strict=True):
                await asyncio.sleep(max(0.0, origin + offset - time.perf_counter()))
                tasks.append(group.create_task(self._one(index, body, origin, offset)))
        return [task.result() for task in tasks]

    async def _one(self, index: int, body: dict[str, Any], origin: float, offset: float) -> tuple[RequestResult, float]:
        async with self.semaphore:
            outcome = await send_request(self.session, self.url, body, prompt_index=index, origin=origin)
        if self.paced:
            outcome[0].queue_ms = max(0.0, outcome[0].sent_at_s - offset) * 1000.0
        self.done += 1
        if self.on_request_done is not None:
            # In a thread: the callback may touch the database, which must not block the
            # event loop (it would delay other streams' chunks) and which Django refuses
            # to do from inside a running loop.
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self.executor, self.on_request_done, self.done, len(self.bodies))
        return outcome


async def run_load(
    *,
    base_url: str,
    model: str,
    prompts: list[Prompt],
    max_tokens: int,
    temperature: float,
    top_p: float,
    seed: int,
    ignore_eos: bool,
    concurrency: int,
    request_rate: float | None = None,
    warmup: int = 0,
    on_request_done: ProgressCallback | None = None,
    timeout_s: float = 600.0,
    capacity_poll_s: float = CAPACITY_POLL_S,
) -> LoadResult:
    """Send `prompts[:warmup]` (not measured), then `prompts[warmup:]` (measured).

    vLLM's /metrics counters are read just before and just after the measured requests,
    so warm-up requests do not count towards `spec_counters` or the preemptions of
    `capacity`; its gauges are sampled while the measured requests run. The host's state is
    read around the measured requests too (`host`: workers/host/host_load.py). HTTP and
    connection failures are recorded, never raised.

    `prompt_index` of a result is the prompt's position in `prompts`. Every request has
    the same `seed`, so an arm and its baseline sample alike. `on_request_done(done,
    total)` runs in a worker thread after each measured request; if it raises, the load
    is cancelled and the exception propagates.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    if not 0 <= warmup < len(prompts):
        raise ValueError("need at least one measured prompt after the warm-up prompts")
    bodies = {
        index: request_body(
            model=model, prompt=prompt, max_tokens=max_tokens, temperature=temperature,
            top_p=top_p, seed=seed, ignore_eos=ignore_eos,
        )
        for index, prompt in enumerate(prompts)
    }  # fmt: skip
    base_url = base_url.rstrip("/")
    url = base_url + (CHAT_PATH if isinstance(prompts[0], list) else COMPLETIONS_PATH)
    semaphore = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        warm = {i: bodies[i] for i in range(warmup)}
        await _Phase(session, url, warm, semaphore).run(poisson_offsets(warmup, None, seed))
        measured = {i: bodies[i] for i in range(warmup, len(prompts))}
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="loadgen-progress") as executor:
            phase = _Phase(session, url, measured, semaphore, on_request_done, executor, paced=bool(request_rate))
            offsets = poisson_offsets(len(measured), request_rate, seed)
            return await _measure(phase, CapacitySampler(base_url, capacity_poll_s), offsets)


async def _measure(phase: _Phase, sampler: CapacitySampler, offsets: list[float]) -> LoadResult:
    base_url = sampler.base_url
    text_before = await fetch_metrics(phase.session, base_url)
    started_at = datetime.now(UTC)
    sampling = asyncio.create_task(sampler.run())
    watch = HostWatch()
    try:
        with watch:
            outcomes = await phase.run(offsets)
    except BaseExceptionGroup as group:
        raise group.exceptions[0] from group
    finally:
        sampling.cancel()
        await asyncio.wait([sampling])  # its session closed; a cancellation of ours still propagates
    finished_at = datetime.now(UTC)
    text_after = await fetch_metrics(phase.session, base_url)
    counters_before = _parsed(text_before, parse_spec_counters)
    counters_after = _parsed(text_after, parse_spec_counters)
    requests = [result for result, _ in outcomes]
    first_sent = min(result.sent_at_s for result in requests)
    last_ended = max(ended_s for _, ended_s in outcomes)
    return LoadResult(
        requests=requests,
        duration_s=last_ended - first_sent,
        started_at=started_at,
        finished_at=finished_at,
        spec_counters=(
            None if counters_before is None or counters_after is None else diff(counters_before, counters_after)
        ),
        capacity=summarise_capacity(
            _parsed(text_before, parse_capacity), sampler.samples, _parsed(text_after, parse_capacity)
        ),
        host=watch.state,
    )


def run_load_sync(*, time_limit_s: float | None = None, **kwargs: Any) -> LoadResult:
    """run_load in an event loop of its own; TimeoutError past `time_limit_s` (the run's
    limit), after the requests under way are cancelled."""
    return asyncio.run(asyncio.wait_for(run_load(**kwargs), timeout=time_limit_s))
