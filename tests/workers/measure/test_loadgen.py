import asyncio
import itertools
import json
import os
from array import array

import pytest
from aiohttp import web

from experiments.measurement.engine.host_load import HostState
from experiments.measurement.engine.prom import SpecCounters
from workers.measure import loadgen
from workers.measure.loadgen import (
    RequestResult,
    apply_event,
    finalise,
    poisson_offsets,
    request_body,
    run_load,
    sse_data,
)


def test_poisson_offsets_are_seeded_and_start_at_zero():
    offsets = poisson_offsets(2000, 10.0, seed=7)
    assert offsets == poisson_offsets(2000, 10.0, seed=7)
    assert offsets != poisson_offsets(2000, 10.0, seed=8)
    assert offsets[0] == 0.0
    assert all(b >= a for a, b in itertools.pairwise(offsets))
    assert offsets[-1] / 1999 == pytest.approx(0.1, rel=0.1)  # mean gap 1/rate


def test_without_a_rate_everything_is_sent_at_once():
    assert poisson_offsets(3, None, seed=0) == [0.0, 0.0, 0.0]


def test_request_body_asks_for_token_ids_and_usage():
    body = request_body(model="target", prompt="hi", max_tokens=8, temperature=0.0, top_p=1.0, seed=3, ignore_eos=True)
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["return_token_ids"] is True
    assert (body["seed"], body["ignore_eos"], body["max_tokens"]) == (3, True, 8)


def test_sse_data():
    assert sse_data(b"data: {}\r") == b"{}"
    assert sse_data(b"data:[DONE]") == b"[DONE]"
    assert sse_data(b": ping") is None
    assert sse_data(b"") is None


# Events as vLLM 0.32 streams them (n-gram arm, --per-request-spec-decode-metrics detailed).
REAL_EVENTS = [
    {"choices": [{"index": 0, "text": " a", "finish_reason": None, "prompt_token_ids": [559, 414, 264], "token_ids": [268]}]},  # noqa: E501 (as recorded)
    {"choices": [{"index": 0, "text": "", "finish_reason": None, "prompt_token_ids": None, "token_ids": [107]}]},
    {"choices": [{"index": 0, "text": "", "finish_reason": None, "prompt_token_ids": None, "token_ids": [107, 107]}]},
    {"choices": [{"index": 0, "text": "", "finish_reason": "length", "prompt_token_ids": None, "token_ids": [107, 107]}]},  # noqa: E501 (as recorded)
    {
        "choices": [],
        "usage": {"prompt_tokens": 3, "total_tokens": 9, "completion_tokens": 6},
        "metrics": {
            "speculative_decoding": {
                "mean_acceptance_length": 2.25, "draft_acceptance_rate": 0.8333333333333334,
                "acceptance_histogram": [1, 2, 0, 1], "num_spec_steps": 4, "num_accepted_draft_tokens": 5,
                "num_draft_tokens": 6, "num_spec_tokens": 3,
                "per_step_accepted": [0, 1, 1, 3], "per_step_drafted": [1, 1, 1, 3],
            }
        },
    },
]  # fmt: skip


def _fold(events, times):
    result = RequestResult(prompt_index=0)
    for event, at in zip(events, times, strict=True):
        apply_event(result, event, at)
    finalise(result)
    return result


def test_real_events_count_tokens_not_text():
    result = _fold(REAL_EVENTS, [40.0, 60.0, 75.0, 90.0, 91.0])
    assert result.error == ""
    assert result.chunk_tokens == array("I", [1, 1, 2, 2])
    assert result.output_token_ids == array("I", [268, 107, 107, 107, 107, 107])
    assert result.chunk_times_ms == array("d", [40.0, 60.0, 75.0, 90.0])
    assert (result.input_tokens, result.output_tokens, result.finish_reason) == (3, 6, "length")
    assert (result.ttft_ms, result.e2e_ms) == (40.0, 90.0)
    assert result.tpot_ms == pytest.approx(10.0)  # (90 - 40) / (6 - 1)
    assert result.spec_acceptance_length == 2.25
    assert result.spec_accepted_per_step == array("H", [0, 1, 1, 3])
    assert result.spec_proposed_per_step == array("H", [1, 1, 1, 3])


def test_the_engines_decode_time_is_read_from_the_last_event():
    # --enable-per-request-metrics adds vLLM's timings beside the speculative metrics.
    timings = {
        "time_to_first_token_ms": 31.5, "generation_time_ms": 42.25, "queue_time_ms": 0.5, "mean_itl_ms": 8.45,
        "tokens_per_second": 81.0,
    }  # fmt: skip
    last = REAL_EVENTS[-1] | {"metrics": REAL_EVENTS[-1]["metrics"] | timings}
    result = _fold([*REAL_EVENTS[:-1], last], [40.0, 60.0, 75.0, 90.0, 91.0])
    assert result.server_decode_ms == 42.25
    assert (result.server_ttft_ms, result.server_queue_ms) == (31.5, 0.5)
    assert result.spec_accepted_per_step == array("H", [0, 1, 1, 3])
    # Engine-timed TPOT: 42.25 / (6 - 1).
    assert result.server_tpot_ms == pytest.approx(8.45)
    # The stream against the engine: the client's decode span 90 - 40 = 50 ms over the engine's
    # 42.25 ms. The 5 tokens after the first took 3 steps (per_step_accepted 0, 1, 1 emit 1 + 2 + 2;
    # the fourth step's tokens lie past the output's end).
    steps = 3
    assert result.stream.steps == steps
    assert result.stream.span_ratio == pytest.approx(50 / 42.25)
    # The longest wait is the first chunk's lag: 40 - 0.5 - 31.5 = 8 ms, against gaps of 20, 15, 15.
    assert result.stream.first_token_lag_ms == pytest.approx(8.0)
    assert result.stream.longest_wait_steps == pytest.approx(20 / (42.25 / steps))
    # A server without the flag sends no timings; a timing vLLM could not take is null: None.
    assert _fold(REAL_EVENTS, [40.0, 60.0, 75.0, 90.0, 91.0]).server_decode_ms is None
    unset = REAL_EVENTS[-1] | {"metrics": {"generation_time_ms": None, "speculative_decoding": None}}
    assert _fold([*REAL_EVENTS[:-1], unset], [40.0, 60.0, 75.0, 90.0, 91.0]).server_decode_ms is None


def test_baseline_events_have_no_spec_metrics():
    usage_only = {"choices": [], "usage": {"prompt_tokens": 3, "total_tokens": 9, "completion_tokens": 6}}
    result = _fold([*REAL_EVENTS[:4], usage_only], [1.0, 2.0, 3.0, 4.0, 5.0])
    assert result.error == ""
    assert (result.spec_acceptance_length, result.spec_accepted_per_step, result.spec_proposed_per_step) == (
        None,
        None,
        None,
    )


def test_missing_usage_is_an_error():
    result = _fold(REAL_EVENTS[:4], [1.0, 2.0, 3.0, 4.0])
    assert "usage reports 0" in result.error
    assert result.output_tokens == 6
    assert result.ttft_ms is None


def test_error_event_is_recorded():
    result = _fold([REAL_EVENTS[0], {"error": {"message": "engine dead", "code": 500}}], [1.0, 2.0])
    assert result.error == "engine dead"


# --- against a fake streaming server ----------------------------------------------------

CHUNK_TOKEN_IDS = [[11], [12, 13], [14, 15, 16]]
CHUNK_DELAY_S = 0.05
SPEC = {"mean_acceptance_length": 2.0, "num_spec_steps": 2, "per_step_accepted": [1, 2], "per_step_drafted": [3, 3]}


class FakeVllm:
    """Streams CHUNK_TOKEN_IDS, one every CHUNK_DELAY_S, like vLLM's /v1/completions.

    Its /metrics counts 2 drafts, 6 draft tokens and 3 accepted tokens (2 at position 0,
    1 at position 1) per completed stream. The prompt "fail" gets an HTTP 500, "drop" a
    connection closed mid-stream, "no done" a stream without its closing [DONE].
    """

    def __init__(self):
        self.bodies: list[dict] = []
        self.active = 0
        self.max_active = 0
        self.completed = 0

    async def metrics(self, request: web.Request) -> web.Response:
        n, labels = self.completed, 'engine="0",model_name="target"'
        return web.Response(
            text=f"vllm:spec_decode_num_drafts_total{{{labels}}} {2.0 * n}\n"
            f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {6.0 * n}\n"
            f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {3.0 * n}\n"
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="0"}} {2.0 * n}\n'
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="1"}} {1.0 * n}\n'
        )

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        if body["prompt"] == "fail":
            return web.Response(status=500, text="boom")
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            return await self._stream(request, body["prompt"])
        finally:
            self.active -= 1

    async def _stream(self, request, prompt):
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i, ids in enumerate(CHUNK_TOKEN_IDS):
            await asyncio.sleep(CHUNK_DELAY_S)
            if prompt == "drop" and i == 1:
                request.transport.close()
                return response
            choice = {"index": 0, "text": "x", "token_ids": ids, "finish_reason": "length" if i == 2 else None}
            if i == 0:
                choice["prompt_token_ids"] = [1, 2, 3, 4]
            await response.write(_event({"choices": [choice]}))
        usage = _event(
            {
                "choices": [],
                "usage": {"prompt_tokens": 4, "completion_tokens": 6},
                "metrics": {"speculative_decoding": SPEC},
            }
        )
        await response.write(usage[:17])  # an event split across two reads
        await asyncio.sleep(0.01)
        await response.write(usage[17:] + (b"" if prompt == "no done" else b"data: [DONE]\n\n"))
        self.completed += 1
        return response


def _event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def serve_fake(fake: FakeVllm, client):
    """Serve `fake` on a free local port and return what `await client(base_url)` returns."""

    async def main():
        app = web.Application()
        app.router.add_post("/v1/completions", fake.completions)
        app.router.add_get("/metrics", fake.metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            return await client(f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}")
        finally:
            await runner.cleanup()

    return asyncio.run(main())


def _load(prompts, **overrides):
    """Run the load generator against a fresh FakeVllm; returns (LoadResult, fake)."""
    fake = FakeVllm()

    async def client(base_url):
        kwargs = {
            "base_url": base_url, "model": "target", "prompts": prompts, "max_tokens": 6,
            "temperature": 0.0, "top_p": 1.0, "seed": 42, "ignore_eos": True, "concurrency": 2, "timeout_s": 10,
        }  # fmt: skip
        return await run_load(**{**kwargs, **overrides})

    return serve_fake(fake, client), fake


def test_streamed_requests_are_timed_from_their_chunks():
    load, fake = _load(["a", "b", "c", "d"])
    assert [r.prompt_index for r in load.requests] == [0, 1, 2, 3]
    for result in load.requests:
        assert result.error == ""
        assert list(result.chunk_tokens) == [1, 2, 3]
        assert list(result.output_token_ids) == [11, 12, 13, 14, 15, 16]
        assert result.queue_ms is None  # no request rate: nothing is scheduled, nothing queues
        assert (result.input_tokens, result.output_tokens, result.finish_reason) == (4, 6, "length")
        # The server sleeps before each chunk, so these are lower bounds whatever the host's load.
        assert result.ttft_ms >= CHUNK_DELAY_S * 1000
        assert result.e2e_ms >= 3 * CHUNK_DELAY_S * 1000
        assert result.e2e_ms == result.chunk_times_ms[-1]
        assert len(result.chunk_times_ms) == 3  # three chunks: two gaps
        assert result.tpot_ms == pytest.approx((result.e2e_ms - result.ttft_ms) / 5)
        assert (result.spec_acceptance_length, list(result.spec_accepted_per_step)) == (2.0, [1, 2])
    assert fake.max_active == 2
    assert all(body["seed"] == 42 and body["return_token_ids"] for body in fake.bodies)
    # Two waves of two requests, each wave at least three chunk delays long.
    assert 6 * CHUNK_DELAY_S <= load.duration_s < 6 * CHUNK_DELAY_S + 2.0
    assert load.started_at <= load.finished_at


def test_warmup_requests_are_sent_but_not_returned():
    load, fake = _load(["w0", "w1", "m2", "m3", "m4"], warmup=2)
    assert [body["prompt"] for body in fake.bodies[:2]] == ["w0", "w1"]
    assert len(fake.bodies) == 5
    assert [r.prompt_index for r in load.requests] == [2, 3, 4]
    assert min(r.sent_at_s for r in load.requests) < 0.5


def test_spec_counters_cover_the_measured_requests_only():
    load, _ = _load(["w0", "w1", "m2", "m3", "m4"], warmup=2)
    assert load.spec_counters == SpecCounters(
        num_drafts=6, num_draft_tokens=18, num_accepted_tokens=9, accepted_per_pos=[6, 3]
    )


def test_the_host_state_is_read_around_the_measured_requests_only(monkeypatch):
    fake = FakeVllm()
    received = []  # the requests the server had received when the host was read

    class Watch:
        state = HostState(foreign_cpu=0.25, steal=0.0, memory_stall=None, load=1.0, cores=2)

        def __enter__(self):
            received.append(len(fake.bodies))
            return self

        def __exit__(self, *exc):
            received.append(len(fake.bodies))

    monkeypatch.setattr(loadgen, "HostWatch", Watch)

    async def client(base_url):
        return await run_load(
            base_url=base_url, model="target", prompts=["w0", "w1", "m2", "m3"], warmup=2, max_tokens=6,
            temperature=0.0, top_p=1.0, seed=42, ignore_eos=True, concurrency=2, timeout_s=10,
        )  # fmt: skip

    load = serve_fake(fake, client)
    assert received == [2, 4]  # after the two warm-up requests, after the two measured ones
    assert load.host is Watch.state


def test_on_this_host_a_load_records_the_host_s_state():
    load, _ = _load(["a", "b"])
    if not os.path.exists("/proc/stat"):
        assert load.host is None
        return
    assert load.host is not None
    assert 0.0 <= load.host.foreign_cpu <= 1.0
    assert load.host.cores == os.cpu_count()


def test_failures_are_recorded_not_raised():
    load, _ = _load(["ok", "fail", "drop", "ok"])
    errors = {r.prompt_index: r.error for r in load.requests}
    assert errors[0] == errors[3] == ""
    assert errors[1].startswith("HTTP 500")
    assert errors[2] != ""
    dropped = load.requests[2]
    assert dropped.ttft_ms is None
    assert dropped.output_tokens == 1


def test_a_stream_that_ends_without_done_is_a_failure():
    # Every chunk and the usage arrived and agree: only the missing [DONE] tells that the
    # server did not finish the response.
    load, _ = _load(["ok", "no done"])
    assert [r.error for r in load.requests] == ["", "stream ended before [DONE]"]
    assert list(load.requests[1].chunk_tokens) == [1, 2, 3]
    assert load.requests[1].ttft_ms is None


def test_connection_refused_is_recorded():
    async def main():
        return await run_load(
            base_url="http://127.0.0.1:9", model="m", prompts=["a"], max_tokens=4, temperature=0.0,
            top_p=1.0, seed=0, ignore_eos=False, concurrency=1, timeout_s=5,
        )  # fmt: skip

    load = asyncio.run(main())
    assert "Connect" in load.requests[0].error
    assert load.spec_counters is None


def test_poisson_arrivals_follow_the_seeded_schedule():
    load, _ = _load(["a", "b", "c", "d", "e"], request_rate=20.0, concurrency=5, seed=3)
    scheduled = poisson_offsets(5, 20.0, seed=3)
    for result, offset in zip(load.requests, scheduled, strict=True):
        assert offset - 0.001 <= result.sent_at_s <= offset + 0.25


def test_queue_time_is_the_wait_for_a_slot_after_the_poisson_arrival():
    # One slot, arrivals far faster than a request (3 chunk delays): each request after
    # the first waits in the client until the one before it ends.
    load, fake = _load(["a", "b", "c", "d"], request_rate=1000.0, concurrency=1, seed=3)
    scheduled = poisson_offsets(4, 1000.0, seed=3)
    assert fake.max_active == 1
    for result, offset in zip(load.requests, scheduled, strict=True):
        assert result.queue_ms == pytest.approx((result.sent_at_s - offset) * 1000.0)
    assert load.requests[0].queue_ms < 50.0
    for earlier, later in itertools.pairwise(load.requests):
        assert later.queue_ms >= 0.9 * 3 * CHUNK_DELAY_S * 1000.0
        assert later.sent_at_s >= earlier.sent_at_s + 3 * CHUNK_DELAY_S


def test_progress_callback_counts_measured_requests():
    calls = []
    _load(["w", "a", "b", "c"], warmup=1, on_request_done=lambda done, total: calls.append((done, total)))
    assert calls == [(1, 3), (2, 3), (3, 3)]


def test_a_failing_progress_callback_stops_the_load():
    def callback(done, total):
        raise RuntimeError("run cancelled")

    with pytest.raises(RuntimeError, match="run cancelled"):
        _load(["a", "b", "c", "d", "e", "f"], on_request_done=callback)


def test_needs_a_measured_prompt():
    with pytest.raises(ValueError, match="at least one measured prompt"):
        _load(["only warmup"], warmup=1)
