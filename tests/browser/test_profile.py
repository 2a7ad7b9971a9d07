"""The profile and capacity charts of a finished experiment in real Chromium: drawn with the
stored figures, and the capacity table inside its card."""

import os
from pathlib import Path

import pytest

from experiments.models import ProfiledInterval, RunSummary
from tests.factories import seed_finished_experiment

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
# Per method: proposing, verifying, sampling shares (other is the rest).
SHARES = {"baseline": (0.0, 0.80, 0.05), "ngram": (0.10, 0.70, 0.08), "draft_model": (0.35, 0.50, 0.05)}

DATASETS = """(id) => Chart.getChart(document.getElementById(id)).data.datasets.map((d) => [d.label, d.data])"""


def _seed(user):
    experiment = seed_finished_experiment(repetitions=2, requests=8, owner=user, profile_intervals=True)
    for arm in experiment.arms.all():
        proposing, verifying, sampling = SHARES[arm.method]
        for level in experiment.concurrency_levels:
            ProfiledInterval.objects.create(
                experiment=experiment, arm=arm, concurrency=level, requests=4, completed=4, steps=40,
                profiled_ms=500.0, share_proposing=proposing, share_verifying=verifying - 0.1 * (level > 1),
                share_sampling=sampling, share_other=1 - proposing - verifying + 0.1 * (level > 1) - sampling,
            )  # fmt: skip
    RunSummary.objects.filter(run__experiment=experiment).update(
        capacity_samples=5, kv_cache_usage_peak=0.5, kv_cache_usage_mean=0.3, requests_running_max=4,
        requests_waiting_max=0, preemptions=0,
    )  # fmt: skip
    RunSummary.objects.filter(run__experiment=experiment, run__arm__method="draft_model", run__concurrency=4).update(
        kv_cache_usage_peak=0.97, preemptions=3, requests_waiting_max=2
    )
    return experiment


def test_profile_and_capacity_charts_are_drawn_and_the_capacity_table_fits(logged_in_page, live_server, user):
    page = logged_in_page
    experiment = _seed(user)
    page.goto(f"{live_server.url}/experiments/{experiment.pk}/")
    page.wait_for_function("() => Chart.getChart(document.getElementById('chart-capacity'))")

    stacked = dict(page.evaluate(DATASETS, "chart-step-time"))
    assert list(stacked) == ["Proposing", "Verifying", "Sampling", "Other"]
    assert all(len(values) == 6 for values in stacked.values())  # 3 arms × 2 levels, each with a step time
    assert stacked["Proposing"][0] == 0.0  # the baseline proposes nothing
    verify = dict(page.evaluate(DATASETS, "chart-verify-share"))
    assert [point["y"] for point in verify["n-gram k=4"]] == pytest.approx([70.0, 60.0])
    capacity = dict(page.evaluate(DATASETS, "chart-capacity"))
    assert capacity["Peak KV cache (%)"] == pytest.approx([50.0, 50.0, 50.0, 97.0])
    assert capacity["Preemptions"] == [0, 0, 0, 6]  # summed over the two blocks
    assert capacity["Preemptions, baseline"] == [0, 0, 0, 0]

    # Every column of the capacity table is in view, the Preemptions ones included, without
    # scrolling its box sideways (a narrower window scrolls it).
    widths = page.evaluate(
        """() => {
          const box = document.querySelector('#capacity .table-scroll');
          return [box.scrollWidth, box.clientWidth];
        }"""
    )
    assert widths[0] <= widths[1], widths
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#profile").screenshot(path=ARTIFACTS / "profile-section.png")
    page.locator("#capacity").screenshot(path=ARTIFACTS / "capacity-section.png")
