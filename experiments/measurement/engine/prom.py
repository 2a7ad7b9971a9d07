"""vLLM's speculative-decoding counters and its capacity figures from its Prometheus
/metrics page: the one parser the worker measures with (workers/measure/loadgen.py) and the
guardrail check reads a live server with (experiments/measurement/deploy/alert_rules.window).

The counters are cumulative for the server's life and carry `engine` and `model_name`
labels (one series per engine); we sum over label sets and difference two snapshots
taken around a measured interval. A server without speculation has none of them, which
reads as zeros and an empty per-position list.

The capacity figures (KV-cache usage, running and waiting requests: gauges; preemptions: a
counter) are read many times during a measured interval, so `parse_capacity` looks at the
few lines it needs instead of parsing the whole page.
"""

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from experiments.measurement.engine.capacity import CapacityFigures
from experiments.measurement.engine.vllm_metrics import (
    ACCEPTED_PER_POS,
    KV_CACHE_USAGE,
    NUM_ACCEPTED_TOKENS,
    NUM_DRAFT_TOKENS,
    NUM_DRAFTS,
    PREEMPTIONS,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
)

CAPACITY_METRICS = (KV_CACHE_USAGE, REQUESTS_RUNNING, REQUESTS_WAITING, PREEMPTIONS)


class CounterReset(ValueError):
    """A counter went down between two snapshots: the server restarted in between."""


@dataclass(frozen=True)
class SpecCounters:
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)


def parse_spec_counters(text: str) -> SpecCounters:
    totals = {NUM_DRAFTS: 0, NUM_DRAFT_TOKENS: 0, NUM_ACCEPTED_TOKENS: 0}
    per_pos: dict[int, int] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += round(sample.value)
            elif sample.name == ACCEPTED_PER_POS:
                position = int(sample.labels["position"])
                per_pos[position] = per_pos.get(position, 0) + round(sample.value)
    return SpecCounters(
        num_drafts=totals[NUM_DRAFTS],
        num_draft_tokens=totals[NUM_DRAFT_TOKENS],
        num_accepted_tokens=totals[NUM_ACCEPTED_TOKENS],
        accepted_per_pos=[per_pos.get(i, 0) for i in range(max(per_pos, default=-1) + 1)],
    )


def diff(before: SpecCounters, after: SpecCounters) -> SpecCounters:
    """What the interval between two snapshots added; raises CounterReset if any counter fell."""
    length = max(len(before.accepted_per_pos), len(after.accepted_per_pos))
    per_pos = [_at(after.accepted_per_pos, i) - _at(before.accepted_per_pos, i) for i in range(length)]
    result = SpecCounters(
        num_drafts=after.num_drafts - before.num_drafts,
        num_draft_tokens=after.num_draft_tokens - before.num_draft_tokens,
        num_accepted_tokens=after.num_accepted_tokens - before.num_accepted_tokens,
        accepted_per_pos=per_pos,
    )
    if min(result.num_drafts, result.num_draft_tokens, result.num_accepted_tokens, *per_pos, 0) < 0:
        raise CounterReset(f"speculative-decoding counters went down: {before} -> {after}")
    return result


def _at(values: list[int], index: int) -> int:
    return values[index] if index < len(values) else 0


@dataclass(frozen=True)
class CapacitySample:
    """One reading of the capacity metrics; `preemptions` is cumulative for the server's life."""

    kv_cache_usage: float
    running: int
    waiting: int
    preemptions: int


def parse_capacity(text: str) -> CapacitySample:
    """The capacity metrics of a /metrics page: the fullest engine's KV cache, the other
    figures summed over engines. ValueError when one of them is missing."""
    values: dict[str, list[float]] = {name: [] for name in CAPACITY_METRICS}
    for line in text.splitlines():
        name = _metric_name(line)
        if name in values:
            values[name].append(float(line[line.rfind("}") + 1 :].split()[0]))
    missing = [name for name, found in values.items() if not found]
    if missing:
        raise ValueError(f"/metrics has no {', '.join(missing)}")
    return CapacitySample(
        kv_cache_usage=max(values[KV_CACHE_USAGE]),
        running=round(sum(values[REQUESTS_RUNNING])),
        waiting=round(sum(values[REQUESTS_WAITING])),
        preemptions=round(sum(values[PREEMPTIONS])),
    )


def _metric_name(line: str) -> str:
    """The metric name a sample line starts with ('' for comments)."""
    end = len(line)
    for stop in ("{", " "):
        found = line.find(stop)
        if found != -1:
            end = min(end, found)
    return "" if line.startswith("#") else line[:end]


def summarise_capacity(
    before: CapacitySample | None, samples: Sequence[CapacitySample], after: CapacitySample | None
) -> CapacityFigures:
    """Peak and mean KV-cache use and the most running and waiting requests over the samples
    taken during the interval; preemptions as the difference of the readings around it
    (None when either is missing or the counter went down: the server restarted)."""
    preempted = None
    if before is not None and after is not None and after.preemptions >= before.preemptions:
        preempted = after.preemptions - before.preemptions
    if not samples:
        return CapacityFigures(samples=0, preemptions=preempted)
    usage = [s.kv_cache_usage for s in samples]
    return CapacityFigures(
        samples=len(samples),
        kv_cache_peak=max(usage),
        kv_cache_mean=statistics.fmean(usage),
        running_max=max(s.running for s in samples),
        waiting_max=max(s.waiting for s in samples),
        preemptions=preempted,
    )
