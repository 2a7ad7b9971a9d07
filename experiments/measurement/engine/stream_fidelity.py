"""Did the client see the stream as the engine made it? A check per request and per run.

The client's TTFT and TPOT are only as good as the stream: when vLLM's front end or the
client falls behind, chunks queue up and arrive late and together, so a request's first
chunk swells its TTFT and a burst at the end shrinks its TPOT to nothing, though the engine
decoded at an even pace (docs/metrics.md, "Stream fidelity"). vLLM times each request where
its steps run (`generation_time_ms`, `queue_time_ms`, `time_to_first_token_ms`), so the two
clocks can be compared request by request:

- decode span ratio: the client's decode span (last chunk − first chunk) over the engine's
  decode time. 1 when the stream kept pace; near 0 when the decode arrived in one burst;
- first-token lag: the part of the client's TTFT the engine does not account for, client
  TTFT − (engine queue time + engine time to first token): the front end's work on the
  request and its first chunk, and any stall before it;
- longest wait: the longest time the client waited, for its first token beyond the engine's
  account or between two chunks, counted in the request's own engine steps (engine decode
  time / decode steps).

A request is *distorted* when its decode span ratio is off 1 by more than SPAN_TOLERANCE
plus one engine step (so a short output is not flagged for a step's jitter): chunks the
front end or the client held back arrived together, so its TPOT is bent, and when the first
chunk was among them its TTFT swelled too (the chunks behind it then caught up, which is what
shortens the span). Two waits are counted and shown but do not make a request distorted: a
*stall* between two chunks (over STALL_STEPS engine steps) bends the inter-chunk latency, not
the TPOT, whose span still ends at the last token; a *late first token* (a first-token lag
over STALL_STEPS steps) with the rest of the stream on time is the front end's time to take
the request in (HTTP, tokenising) before the engine saw it, which vLLM's timings cannot tell
from a held first chunk and which a user of that server waits for too. A run whose share of
distorted requests exceeds DISTORTED_RUN_SHARE gets no verdict on the client's TTFT and TPOT
(experiments/measurement/stats/inference.py); E2E and throughput end at the last token either way and keep
theirs, and the engine-timed TPOT is the engine's own clock.

Plain module: no Django; the worker applies it when it stores a run (workers/storage/ingest.py).
"""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from experiments.measurement.stats import latency

SPAN_TOLERANCE = 0.10
STALL_STEPS = 5.0
DISTORTED_RUN_SHARE = 0.05
# "Burst": the client's decode span under a fifth of the engine's decode time.
BURST_SPAN_RATIO = 0.2


@dataclass(frozen=True)
class RequestTiming:
    """What one succeeded request recorded, as the check reads it (times in ms from the send)."""

    chunk_times_ms: Sequence[float]
    output_tokens: int
    decode_steps: int
    server_decode_ms: float | None
    server_queue_ms: float | None = None
    server_ttft_ms: float | None = None


@dataclass(frozen=True)
class StreamCheck:
    """The comparison of one request's stream with the engine's timing; every figure None
    where the request cannot be checked (no decode step, no engine timing).

    `steps`: the request's decode steps, so that one engine step of slack is 1 / steps of
    the decode span; `first_token_lag_steps` is None without the engine's queue and
    first-token times."""

    span_ratio: float | None = None
    longest_wait_steps: float | None = None
    first_token_lag_ms: float | None = None
    first_token_lag_steps: float | None = None
    steps: int = 0

    @property
    def checked(self) -> bool:
        return self.span_ratio is not None

    @property
    def stalled(self) -> bool:
        return self.longest_wait_steps is not None and self.longest_wait_steps > STALL_STEPS

    @property
    def burst(self) -> bool:
        return self.span_ratio is not None and self.span_ratio < BURST_SPAN_RATIO

    @property
    def span_off(self) -> bool:
        return self.span_ratio is not None and abs(self.span_ratio - 1) > SPAN_TOLERANCE + 1 / self.steps

    @property
    def late_first_token(self) -> bool:
        return self.first_token_lag_steps is not None and self.first_token_lag_steps > STALL_STEPS

    @property
    def distorted(self) -> bool:
        return self.span_off


def first_token_lag_ms(timing: RequestTiming) -> float | None:
    """Client TTFT − (engine queue time + engine time to first token); None without the
    engine's two times."""
    if timing.server_queue_ms is None or timing.server_ttft_ms is None or not timing.chunk_times_ms:
        return None
    return timing.chunk_times_ms[0] - timing.server_queue_ms - timing.server_ttft_ms


def request_check(timing: RequestTiming) -> StreamCheck:
    """The stream check of one request (module docstring)."""
    times = timing.chunk_times_ms
    decode_ms = timing.server_decode_ms
    if timing.output_tokens <= 1 or timing.decode_steps < 1 or not decode_ms or decode_ms <= 0 or len(times) < 1:
        return StreamCheck()
    step_ms = decode_ms / timing.decode_steps
    lag = first_token_lag_ms(timing)
    waits = [later - earlier for earlier, later in pairwise(times)]
    waits += [lag] if lag is not None else []
    return StreamCheck(
        span_ratio=(times[-1] - times[0]) / decode_ms,
        longest_wait_steps=max(waits, default=0.0) / step_ms,
        first_token_lag_ms=lag,
        first_token_lag_steps=None if lag is None else lag / step_ms,
        steps=timing.decode_steps,
    )


@dataclass(frozen=True)
class RunStream:
    """The stream checks of one run's requests, as RunSummary stores them."""

    checked: int
    distorted: int
    stalled: int
    bursts: int
    late_first_tokens: int
    span_ratio_p50: float | None
    span_ratio_p05: float | None

    @property
    def distorted_share(self) -> float | None:
        return self.distorted / self.checked if self.checked else None

    @property
    def flagged(self) -> bool:
        return run_flagged(self.checked, self.distorted)


def run_flagged(checked: int | None, distorted: int | None) -> bool:
    """Whether a run's stream is too distorted for the client's TTFT and TPOT to be called:
    more than DISTORTED_RUN_SHARE of its checked requests distorted. A run none of whose
    requests could be checked (recorded before the engine's times were) is not flagged."""
    if not checked:
        return False
    assert distorted is not None  # stored with `checked`, both from one RunStream (workers/storage/ingest.py)
    return distorted / checked > DISTORTED_RUN_SHARE


def run_stream(checks: Iterable[StreamCheck]) -> RunStream:
    checked = [check for check in checks if check.checked]
    ratios = [check.span_ratio for check in checked if check.span_ratio is not None]  # every checked one has it
    return RunStream(
        checked=len(checked),
        distorted=sum(check.distorted for check in checked),
        stalled=sum(check.stalled for check in checked),
        bursts=sum(check.burst for check in checked),
        late_first_tokens=sum(check.late_first_token for check in checked),
        span_ratio_p50=latency.percentile(ratios, 50),
        span_ratio_p05=latency.percentile(ratios, 5),
    )


def server_tpot_ms(server_decode_ms: float | None, output_tokens: int) -> float | None:
    """The engine-timed TPOT: vLLM's decode time / (output tokens − 1); None for one token
    or without the engine's time. What speculation changes, whatever the stream did."""
    if server_decode_ms is None or output_tokens <= 1 or not math.isfinite(server_decode_ms):
        return None
    return server_decode_ms / (output_tokens - 1)
