"""vLLM's own view of a round of requests, from /metrics read before and after it: the mean
TTFT, E2E and decode time of the same requests, the engine's mean decode step, and the
requests a client saw stall or arrive in one burst against that clock."""

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from experiments.measurement.engine import stream_fidelity

SERVER_HISTOGRAMS = {
    "server_ttft_ms": "vllm:time_to_first_token_seconds",
    "server_e2e_ms": "vllm:e2e_request_latency_seconds",
    "server_decode_ms": "vllm:request_decode_time_seconds",
}
# Counters read around each round: the engine's decode steps are the output tokens after each
# request's first, less the accepted draft tokens (each step adds one token and its accepted ones).
SERVER_COUNTERS = ("vllm:generation_tokens_total", "vllm:spec_decode_num_accepted_tokens_total")

Readings = dict[str, tuple[float, float]]  # a histogram's (sum, count); a counter's (value, 0)


def server_histograms(base_url: str) -> Readings:
    """(sum, count) of vLLM's own TTFT, E2E and decode-time histograms, in seconds, and the
    values of SERVER_COUNTERS (as (value, 0))."""
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    totals = {f"{name}_{part}": 0.0 for name in SERVER_HISTOGRAMS.values() for part in ("sum", "count")}
    totals |= dict.fromkeys(SERVER_COUNTERS, 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in totals:
                totals[sample.name] += sample.value
    readings = {key: (totals[f"{name}_sum"], totals[f"{name}_count"]) for key, name in SERVER_HISTOGRAMS.items()}
    return readings | {name: (totals[name], 0.0) for name in SERVER_COUNTERS}


def server_means_ms(before: Readings, after: Readings) -> dict[str, float | None]:
    """Mean of each server histogram over the requests between two readings, in ms, and the
    engine's mean decode step over them."""
    means: dict[str, float | None] = {
        key: (after[key][0] - before[key][0]) / (after[key][1] - before[key][1]) * 1000 for key in SERVER_HISTOGRAMS
    }
    requests = after["server_decode_ms"][1] - before["server_decode_ms"][1]
    tokens, accepted = (after[name][0] - before[name][0] for name in SERVER_COUNTERS)
    steps = tokens - requests - accepted
    decode = means["server_decode_ms"]
    means["server_step_ms"] = decode * requests / steps if steps > 0 and decode is not None else None
    return means


def stream_counts(
    spans_ms: list[float], longest_gaps_ms: list[float], server: dict[str, float | None]
) -> dict[str, int | None]:
    """Requests that waited longer than STALL_STEPS of the engine's mean decode steps for a
    chunk, and requests whose decode span was under BURST_SPAN_RATIO of the engine's mean
    decode time per request (both engine figures from /metrics over the same requests)."""
    step, decode = server["server_step_ms"], server["server_decode_ms"]
    if not step or decode is None:
        return {"stalled": None, "bursts": None}
    return {
        "stalled": sum(gap > stream_fidelity.STALL_STEPS * step for gap in longest_gaps_ms),
        "bursts": sum(span < stream_fidelity.BURST_SPAN_RATIO * decode for span in spans_ms),
    }
