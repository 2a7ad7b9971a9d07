"""Streamed requests as the load generator records them, simulated: speculative decoding
with k draft tokens a step, each accepted with a chance while the ones before it were. The
benches store them (workers/bench/storage/, workers/bench/pages/) and the tests' factories
seed finished experiments with them (tests/factories.py)."""

import random
from array import array
from typing import TypedDict

from experiments.measurement.encoding.packed import FLOAT64, UINT16, UINT32
from experiments.measurement.engine.prom import SpecCounters
from workers.measure.loadgen import RequestResult

OUTPUT_TOKENS = 128


class Decoding(TypedDict, total=False):
    """The RequestResult fields that depend on speculation, as lists."""

    chunk_tokens: list[int]
    spec_acceptance_length: float
    spec_accepted_per_step: list[int]
    spec_proposed_per_step: list[int]


class Recorded(TypedDict, total=False):
    """The same fields as the load generator records them (array.array of the stored types)."""

    chunk_tokens: "array[int]"
    spec_acceptance_length: float
    spec_accepted_per_step: "array[int]"
    spec_proposed_per_step: "array[int]"


def _accepted_per_step(rng: random.Random, k: int, accept: float, output_tokens: int) -> list[int]:
    """Accepted draft tokens per verify step until the output is covered (prefill gives token 0)."""
    accepted, index = [], 1
    while index < output_tokens:
        n = 0
        while n < k and rng.random() < accept:
            n += 1
        accepted.append(n)
        index += n + 1
    return accepted


def simulated_decoding(rng: random.Random, *, k: int | None, accept: float, output_tokens: int) -> Decoding:
    """Tokens per chunk (the first chunk from prefill) and per-step counts of a stream of
    `output_tokens`. k=None: the baseline, one token a chunk."""
    if not k:
        return {"chunk_tokens": [1] * output_tokens}
    accepted = _accepted_per_step(rng, k, accept, output_tokens)
    return {
        "chunk_tokens": [1] + [n + 1 for n in accepted],
        "spec_acceptance_length": 1 + sum(accepted) / len(accepted),
        "spec_accepted_per_step": accepted,
        "spec_proposed_per_step": [k] * len(accepted),
    }


def recorded(decoding: Decoding) -> Recorded:
    """simulated_decoding's lists as the load generator records them (array.array)."""
    result: Recorded = {"chunk_tokens": UINT32.new(decoding["chunk_tokens"])}
    if "spec_acceptance_length" in decoding:
        result["spec_acceptance_length"] = decoding["spec_acceptance_length"]
    if "spec_accepted_per_step" in decoding:
        result["spec_accepted_per_step"] = UINT16.new(decoding["spec_accepted_per_step"])
    if "spec_proposed_per_step" in decoding:
        result["spec_proposed_per_step"] = UINT16.new(decoding["spec_proposed_per_step"])
    return result


def spec_counters(requests: list[RequestResult], k: int | None) -> SpecCounters:
    """vLLM's speculative-decoding counters over these requests, as /metrics reports them."""
    if not k:
        return SpecCounters()
    steps = [n for r in requests for n in (r.spec_accepted_per_step or ())]
    return SpecCounters(len(steps), len(steps) * k, sum(steps), [sum(n > i for n in steps) for i in range(k)])


def streamed_request(
    rng: random.Random, prompt_index: int, k: int | None, accept: float, output_tokens: int = OUTPUT_TOKENS
) -> RequestResult:
    """One successful streamed request: chunks 8-12 ms apart after a first token at 30-60 ms."""
    decoding = simulated_decoding(rng, k=k, accept=accept, output_tokens=output_tokens)
    ttft = rng.uniform(30, 60)
    times = [ttft]
    for _ in decoding["chunk_tokens"][1:]:
        times.append(times[-1] + rng.uniform(8, 12))
    return RequestResult(
        prompt_index=prompt_index, input_tokens=rng.randint(80, 400), output_tokens=output_tokens,
        sent_at_s=prompt_index * 0.01, ttft_ms=ttft, e2e_ms=times[-1], tpot_ms=(times[-1] - ttft) / (output_tokens - 1),
        chunk_times_ms=FLOAT64.new(times), finish_reason="length", **recorded(decoding),
        output_token_ids=UINT32.new(rng.randrange(32000) for _ in range(output_tokens)),
    )  # fmt: skip
