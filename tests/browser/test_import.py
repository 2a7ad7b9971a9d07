"""The import page in real Chromium: summary-only `vllm bench serve` files without a method,
named on the Methods field, become an experiment whose latency speedups are point estimates
shown as such; a file of another protocol is refused by name."""

import json
import os
from pathlib import Path

import pytest

from experiments.models import Experiment

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_bench"
# What a file saved without --save-detailed lacks.
DETAILED_ONLY = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors", "start_times")


def _summary_only(real: str, name: str, **changes) -> dict:
    """A real file without per-request rows, label or speculative config."""
    content = json.loads((FIXTURES / real).read_text())
    kept = {k: v for k, v in content.items() if k not in (*DETAILED_ONLY, "speculative_config", "label")}
    data = json.dumps(kept | changes).encode()
    return {"name": name, "mimeType": "application/json", "buffer": data}


def _files(**spec_changes) -> list[dict]:
    return [
        _summary_only("baseline-c1.json", "base-c1.json"),
        _summary_only("ngram-k3-c1.json", "spec-c1.json", **spec_changes),
    ]


def _shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"{name}.png", full_page=True)


def test_import_summary_files_with_their_method_and_read_the_point_estimates(logged_in_page, live_server):
    page = logged_in_page
    page.click("text=Import")
    page.fill("#id_name", "bench files from the chat pool")

    # First another protocol: the arm's file sent twice the prompts of the baseline's.
    page.set_input_files("#id_files", _files(num_prompts=999, completed=999))
    page.fill("#id_methods", "spec-c1.json = ngram 3")
    page.click("form[enctype='multipart/form-data'] [type=submit]")
    page.wait_for_selector("#id_files_errors")
    refused = page.inner_text("main")
    assert "num_prompts 999, the baseline's" in refused, refused
    _shot(page, "import-1-refused")
    assert not Experiment.objects.exists()

    page.set_input_files("#id_files", _files())
    page.fill("#id_methods", "spec-c1.json = ngram 3")
    page.click("form[enctype='multipart/form-data'] [type=submit]")
    page.wait_for_selector("#point-estimates")
    experiment = Experiment.objects.get()
    assert page.url.endswith(f"/experiments/{experiment.pk}/")
    section = page.inner_text("#point-estimates")
    assert "Latency speedups from the files' means" in section
    assert "No interval, no verdict" in section
    assert "point estimate" in page.inner_text("#table-point-estimates")
    _shot(page, "import-2-experiment")
    page.locator("#point-estimates").screenshot(path=ARTIFACTS / "import-3-point-estimates.png")
    assert experiment.arms.get(method="ngram").num_speculative_tokens == 3
