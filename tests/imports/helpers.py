"""What the import tests share: the real `vllm bench serve` files made against the demo target on CPU
(scripts/make_bench_fixtures.py), files changed from them, and the import form's post."""

import json
from html import unescape
from pathlib import Path

from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from experiments.models import Experiment, RunSummary

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_bench"


FILES = sorted(FIXTURES.glob("*.json"))


def real_file(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def as_bytes(content) -> bytes:
    return json.dumps(content).encode()


def uploads(pairs) -> list[SimpleUploadedFile]:
    return [SimpleUploadedFile(name, data, content_type="application/json") for name, data in pairs]


def post_import(client, pairs, name="bench import", methods=""):
    return client.post(reverse("experiments:import"), {"name": name, "files": uploads(pairs), "methods": methods})


def real_pairs() -> list[tuple[str, bytes]]:
    return [(path.name, path.read_bytes()) for path in FILES]


GOOD = "baseline-c1.json"


# What vLLM writes only with --save-detailed (it keeps "latencies" and "queue_times" without).
DETAILED_ONLY = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors", "start_times")


def bench_file(real: str, name: str, **changes) -> tuple[str, bytes]:
    """A real file without its per-request rows, with `changes`."""
    content = {key: value for key, value in real_file(real).items() if key not in DETAILED_ONLY}
    return name, as_bytes(content | changes)


def bench_run(prompts: int, output_per_request: int, **changes) -> dict:
    """The figures of a run of `prompts` prompts of 46.5 input tokens and `output_per_request` output tokens."""
    return {
        "num_prompts": prompts, "completed": prompts, "failed": 0, "total_input_tokens": int(prompts * 46.5),
        "total_output_tokens": prompts * output_per_request, **changes,
    }  # fmt: skip


def assert_refused(response, *messages):
    text = unescape(response.content.decode())
    assert response.status_code == 400, text[:2000]
    for message in messages:
        assert message in text
    assert not Experiment.objects.exists()
    assert not RunSummary.objects.exists()
