"""vLLM's speculative-decoding counters from its Prometheus /metrics page.

The counters are cumulative for the server's life and carry `engine` and `model_name`
labels (one series per engine); we sum over label sets and difference two snapshots
taken around a measured interval. A server without speculation has none of them, which
reads as zeros and an empty per-position list.
"""

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

NUM_DRAFTS = "vllm:spec_decode_num_drafts_total"
NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
NUM_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


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
