"""The command line and the API through the real parts: the client script submits over HTTP,
a Celery worker runs the experiment on vLLM, `--wait` follows it to the verdict table and the
exit status, and the API's numbers are the experiment page's. The spec asks for profiled
intervals, so each arm's server also profiles one interval, stored apart from the statistics."""

import json
import re
from html import unescape

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token

from experiments.api import client as specdash_client
from experiments.measurement.engine import trace_shares
from experiments.models import Arm, Experiment, ExperimentAnalysis, ProfiledInterval

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TARGET = settings.SPECDASH_MODELS_DIR / "target"
# Every output runs to its 24 tokens (ignore_eos), so that every request has a decode phase
# whatever the tiny model's numerics; the expectation reads the engine-timed TPOT (the default
# metric), which has a ratio whatever the stream did.
SPEC = {
    "name": "cli on vllm", "dtype": "float32", "prompt_set": "code_edit", "num_prompts": 4, "max_tokens": 24,
    "ignore_eos": True, "concurrency_levels": [1], "repetitions": 1, "warmup_requests": 1, "temperature": 0,
    "profile_intervals": True,
    "arms": [{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 2, "prompt_lookup_max": 3}],
}  # fmt: skip


@pytest.mark.skipif(not (TARGET / "config.json").exists(), reason="demo models not built (./dev test builds them)")
def test_wait_follows_a_real_experiment_to_its_verdicts(celery_worker_process, live_server, user, tmp_path, capsys):
    token = Token.objects.create(user=user).key
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(SPEC | {"expect": ["n-gram lookup k=2 faster at concurrency <= 1"]}))

    status = specdash_client.main(
        [str(spec), "--wait", "--poll", "1", "--timeout", "900", "--url", live_server.url, "--token", token]
    )

    out = capsys.readouterr().out
    experiment = Experiment.objects.get(name="cli on vllm")
    assert experiment.status == Experiment.Status.FINISHED, out
    # One block gives estimates but no verdict, so the expectation cannot hold.
    assert status == specdash_client.NOT_HELD, out
    assert re.search(r"running: \d/2 runs done", out), out
    assert "finished: 2/2 runs done (2 succeeded, 0 failed)" in out
    assert re.search(r"n-gram lookup k=2 +too few blocks \d", out), out
    assert "NOT HELD: n-gram lookup k=2 faster at concurrency <= 1 (at 1: too few blocks" in out
    _check_api_numbers_equal_the_pages(experiment, user, token)


def _check_api_numbers_equal_the_pages(experiment, user, token):
    page = Client()
    page.force_login(user)
    html = page.get(reverse("experiments:detail", args=[experiment.pk])).content.decode()
    chart = json.loads(re.search(r'<script id="results-data" type="application/json">(.*?)</script>', html, re.S)[1])
    api = Client(headers={"Authorization": f"Token {token}"})
    body = api.get(reverse("api:experiment-results", args=[experiment.pk])).json()
    cells = {(c["arm_id"], c["level"]): c["metrics"] for c in body["summaries"]}
    assert len(cells) == len(chart["cells"]) == 2
    for page_cell in chart["cells"]:
        metrics = cells[(page_cell["arm"], page_cell["level"])]
        assert all([s["mean"], s["min"], s["max"]] == page_cell[column] for column, s in metrics.items())
    speedups = {(s["arm_id"], s["level"], s["metric"]): s for s in body["speedups"]}
    for point in chart["speedups"]:
        mine = speedups[(point["arm"], point["level"], point["metric"])]
        assert (mine["point"], mine["ci_low"], mine["ci_high"], mine["outcome"]) == (
            point["point"], point["lo"], point["hi"], point["outcome"]
        )  # fmt: skip
    requests = api.get(reverse("api:experiment-requests", args=[experiment.pk])).json()
    assert requests["count"] == 2 * SPEC["num_prompts"]
    _check_step_accounting(experiment, body, html)
    _check_profiled_intervals(experiment, html)


def _check_step_accounting(experiment, body, html):
    """The n-gram arm's steps were counted and timed against the baseline's, and the page and
    the API show the stored figures."""
    accounting = ExperimentAnalysis.objects.get(experiment=experiment).series["step_accounting"]
    arm = experiment.arms.get(method=Arm.Method.NGRAM)
    row = next(row for row in accounting["rows"] if row["arm_id"] == arm.id)
    assert row["steps"] > 0
    assert row["tokens_per_step"] >= 1
    assert row["step_ms"] > 0
    assert row["baseline_step_ms"] > 0
    assert row["relative_cost"]["point"] == pytest.approx(row["step_ms"] / row["baseline_step_ms"])
    assert row["margin"]["point"] == pytest.approx(row["tokens_per_step"] / row["relative_cost"]["point"])
    assert body["series"]["step_accounting"] == accounting
    assert unescape(accounting["sentences"][0]["text"]) in unescape(html)


def _check_profiled_intervals(experiment, html):
    """Each arm profiled one interval after its measured run: its trace is on disk, its shares
    sum to one, and it is not among the requests counted above (2 × num_prompts)."""
    intervals = {i.arm.method: i for i in ProfiledInterval.objects.filter(experiment=experiment).select_related("arm")}
    assert sorted(intervals) == ["baseline", "ngram"]
    for interval in intervals.values():
        assert interval.error == ""
        assert (interval.concurrency, interval.requests, interval.completed) == (1, 4, 4)  # the measured prompts
        assert interval.steps > 0
        assert (settings.DATA_DIR / interval.trace_path).stat().st_size == interval.trace_bytes
        shares = [getattr(interval, f"share_{phase}") for phase in trace_shares.PHASES]
        assert all(share >= 0 for share in shares)
        assert sum(shares) == pytest.approx(1.0, abs=1e-6)
        assert interval.share_verifying > 0
    assert intervals["baseline"].share_proposing == 0.0
    assert intervals["ngram"].share_proposing > 0
    assert 'id="table-profile"' in html
    assert 'id="chart-step-time"' in html
