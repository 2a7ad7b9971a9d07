"""The chat endpoint: what the runs send (messages), the request body and URL, the streamed
chat events measured like completions (the template a server gets: tests/workers/server/test_chat_template.py)."""

import asyncio
import json

import pytest
from aiohttp import web
from django.urls import reverse

from experiments.models import Experiment
from experiments.prompts import catalog
from experiments.review.comparison import protocol_of
from tests.factories import ExperimentFactory, form_data
from tests.prompt_sets.test_prompt_sets import _stored
from workers.measure.loadgen import CHAT_PATH, request_body, run_load

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Rename x."}]
BODIES = web.AppKey("bodies", list)
SPEC = {"mean_acceptance_length": 2.0, "num_spec_steps": 2, "per_step_accepted": [1, 1], "per_step_drafted": [2, 2]}


def test_a_chat_request_sends_messages():
    body = request_body(model="target", prompt=MESSAGES, max_tokens=8, temperature=0, top_p=1, seed=1, ignore_eos=False)

    assert body["messages"] == MESSAGES
    assert "prompt" not in body
    assert (body["stream"], body["return_token_ids"], body["stream_options"]) == (True, True, {"include_usage": True})


async def _chat_stream(request: web.Request) -> web.StreamResponse:
    """A chat stream as vLLM 0.32 sends it: a role chunk without tokens, content chunks with
    their token ids beside the delta, then usage with the speculative metrics."""
    request.app[BODIES].append(await request.json())
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    events = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {"content": "Done"}, "token_ids": [5], "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {"content": " now."}, "token_ids": [6, 7], "finish_reason": "stop"}]},
        {
            "choices": [],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3},
            "metrics": {"speculative_decoding": SPEC},
        },
    ]
    for event in events:
        await asyncio.sleep(0.01)
        await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
    await response.write(b"data: [DONE]\n\n")
    return response


async def _no_metrics(request: web.Request) -> web.Response:
    return web.Response(text="")


def _load_chat(prompts):
    async def main():
        app = web.Application()
        app[BODIES] = []
        app.router.add_post(CHAT_PATH, _chat_stream)
        app.router.add_get("/metrics", _no_metrics)
        server = web.AppRunner(app)
        await server.setup()
        site = web.TCPSite(server, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        try:
            load = await run_load(
                base_url=f"http://127.0.0.1:{port}", model="target", prompts=prompts, max_tokens=3, temperature=0.0,
                top_p=1.0, seed=0, ignore_eos=False, concurrency=1, timeout_s=10,
            )  # fmt: skip
            return load, app[BODIES]
        finally:
            await server.cleanup()

    return asyncio.run(main())


def test_chat_streams_are_measured_like_completions():
    load, bodies = _load_chat([MESSAGES, [{"role": "user", "content": "Again."}]])

    assert [body["messages"][-1]["content"] for body in bodies] == ["Rename x.", "Again."]
    for result in load.requests:
        assert result.error == ""
        assert (result.input_tokens, result.output_tokens, list(result.chunk_tokens)) == (9, 3, [1, 2])
        assert list(result.output_token_ids) == [5, 6, 7]
        assert result.ttft_ms == result.chunk_times_ms[0]
        assert (result.spec_acceptance_length, list(result.spec_proposed_per_step)) == (2.0, [2, 2])


# ---------------------------------------------------------------- what the runs send


@pytest.mark.django_db
def test_the_chat_endpoint_sends_a_built_in_prompt_as_one_user_message():
    experiment = ExperimentFactory(endpoint=Experiment.Endpoint.CHAT, prompt_set="chat", num_prompts=3)

    requests = catalog.experiment_requests(experiment)

    prompts = catalog.experiment_prompts(experiment)
    assert requests == [[{"role": "user", "content": prompt}] for prompt in prompts]
    assert catalog.experiment_requests(ExperimentFactory(prompt_set="chat", num_prompts=3)) == prompts


@pytest.mark.django_db
def test_an_uploaded_chat_set_sends_its_own_messages(user):
    chat = [{"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": f"q{i}"}]} for i in range(6)]
    prompt_set = _stored(user, records=chat)
    experiment = ExperimentFactory(
        endpoint=Experiment.Endpoint.CHAT, workload_kind=Experiment.WorkloadKind.UPLOADED,
        uploaded_prompt_set=prompt_set, num_prompts=3, warmup_requests=1,
    )  # fmt: skip

    requests = catalog.experiment_requests(experiment)

    assert requests == [record["messages"] for record in chat[:4]]
    assert not any("chat template" in warning for warning in experiment.protocol_warnings())


@pytest.mark.django_db
def test_the_form_offers_both_endpoints_completions_first(logged_in_client, celery_dispatch):
    form = logged_in_client.get(reverse("experiments:create")).context["form"]
    assert [value for value, _ in form.fields["endpoint"].choices] == ["completions", "chat"]
    assert form["endpoint"].initial == "completions"

    logged_in_client.post(reverse("experiments:create"), form_data(endpoint="chat"))

    assert Experiment.objects.get().endpoint == Experiment.Endpoint.CHAT


@pytest.mark.django_db
def test_a_comparison_names_the_endpoint_among_the_differences():
    chat, plain = ExperimentFactory(endpoint="chat"), ExperimentFactory()

    assert protocol_of(chat, []).workload == "prompt set chat through the chat endpoint"
    assert protocol_of(plain, []).workload == "prompt set chat"
