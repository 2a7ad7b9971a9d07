"""The capacity table and its warnings: pooled per arm and level from the run summaries, the
baseline beside each arm, against hand-computed values on the page and in the API."""

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.authtoken.models import Token

from experiments.analysis import capacity
from experiments.models import RunSummary
from experiments.results import block_selectors
from tests.factories import seed_finished_experiment
from tests.results.helpers import html_tables, page_html

pytestmark = pytest.mark.django_db

Cell = capacity.CapacityCell


def _row(arm: Cell, baseline: Cell) -> capacity.CapacityRow:
    return capacity.CapacityRow(arm.arm_id, arm.level, arm, baseline)


def test_warned_only_where_the_arm_preempted_or_queued_and_the_baseline_did_not():
    baseline_calm = Cell(1, 4, runs=3, preemptions=0, waiting_max=0)
    baseline_busy = Cell(1, 4, runs=3, preemptions=2, waiting_max=1)
    not_recorded = Cell(1, 4, runs=0)
    arm = Cell(2, 4, runs=3, preemptions=5, waiting_max=3)
    calm_arm = Cell(2, 4, runs=3, preemptions=0, waiting_max=0)
    labels = {2: "draft k=4"}

    assert capacity.capacity_warnings([_row(arm, baseline_calm)], labels) == [
        "draft k=4 preempted 5 request(s) at concurrency 4, where the baseline preempted none: its KV cache ran "
        "out, and the preempted requests were recomputed.",
        "draft k=4 had up to 3 request(s) waiting at concurrency 4, where the baseline had none waiting: its "
        "server could not fit the batch the baseline ran.",
    ]
    assert capacity.capacity_warnings([_row(arm, baseline_busy)], labels) == []
    assert capacity.capacity_warnings([_row(arm, not_recorded)], labels) == []
    assert capacity.capacity_warnings([_row(calm_arm, baseline_calm)], labels) == []


# Per (arm label, level), the three blocks' (peak, mean, running, waiting, preemptions).
FIGURES = {
    ("baseline", 1): [(0.10, 0.05, 1, 0, 0), (0.12, 0.06, 1, 0, 0), (0.11, 0.07, 1, 0, 0)],
    ("baseline", 4): [(0.40, 0.30, 4, 0, 0), (0.45, 0.35, 4, 0, 0), (0.50, 0.25, 4, 0, 0)],
    ("n-gram k=4", 4): [(0.42, 0.31, 4, 0, 0), (0.41, 0.30, 4, 0, 0), (0.44, 0.32, 4, 0, 0)],
    ("draft k=3", 4): [(1.00, 0.90, 3, 1, 2), (0.98, 0.80, 4, 0, 0), (1.00, 0.85, 3, 2, 5)],
}


@pytest.fixture
def measured():
    """The seeded experiment with FIGURES stored; the n-gram arm's runs at level 1 and the draft
    arm's at level 1 left as if recorded before capacity was measured."""
    experiment = seed_finished_experiment()
    for (label, level), blocks in FIGURES.items():
        summaries = RunSummary.objects.filter(
            run__experiment=experiment, run__arm__label=label, run__concurrency=level
        ).order_by("run__repetition")
        for summary, (peak, mean, running, waiting, preempted) in zip(summaries, blocks, strict=True):
            summary.capacity_samples = 10
            summary.kv_cache_usage_peak, summary.kv_cache_usage_mean = peak, mean
            summary.requests_running_max, summary.requests_waiting_max, summary.preemptions = (
                running,
                waiting,
                preempted,
            )
            summary.save()
    return experiment


def test_the_table_pools_the_blocks_and_sets_the_baseline_beside_each_arm(logged_in_client, measured):
    table = html_tables(page_html(logged_in_client, measured))["table-capacity"]
    rows = {(row[0], int(row[1])): row[2:] for row in table[1:]}

    assert list(rows) == [("n-gram k=4", 1), ("n-gram k=4", 4), ("draft k=3", 1), ("draft k=3", 4)]
    blocks, *pairs = rows[("draft k=3", 4)]
    # Arm then baseline: peak % (highest), mean % (mean of the means), max running, max waiting,
    # preemptions (summed).
    assert int(blocks) == 3
    expected = [100.0, 50.0, 85.0, 30.0, 4, 4, 2, 0, 7, 0]
    assert [float(value) for value in pairs] == pytest.approx(expected)
    ngram = rows[("n-gram k=4", 4)][1:]
    assert [float(v) for v in ngram[:2]] == pytest.approx([44.0, 50.0])
    # Level 1: the arm recorded nothing, the baseline did.
    blocks, *pairs = rows[("n-gram k=4", 1)]
    assert int(blocks) == 0
    assert pairs[0::2] == ["not recorded"] * 5
    assert [float(v) for v in pairs[1::2]] == pytest.approx([12.0, 6.0, 1, 0, 0])


def test_the_page_warns_of_the_draft_arms_preemptions_and_queue(logged_in_client, measured):
    html = page_html(logged_in_client, measured)
    assert "draft k=3 preempted 7 request(s) at concurrency 4, where the baseline preempted none" in html
    assert "draft k=3 had up to 2 request(s) waiting at concurrency 4" in html
    assert "n-gram k=4 preempted" not in html
    assert "Peak KV cache (%)" in html
    assert "vllm:num_preemptions_total" in html


def test_runs_recorded_before_show_not_recorded(logged_in_client):
    experiment = seed_finished_experiment()
    table = html_tables(page_html(logged_in_client, experiment))["table-capacity"]
    assert all(row[3:] == ["not recorded"] * 10 for row in table[1:])
    assert "the runs were stored before these figures were measured" in page_html(logged_in_client, experiment)
    assert '<ul class="warnings" id="capacity-warnings">' not in page_html(logged_in_client, experiment)


def test_the_api_gives_the_pages_figures(user, measured):
    token = Token.objects.create(user=user)
    body = (
        Client(headers={"Authorization": f"Token {token.key}"})
        .get(reverse("api:experiment-results", args=[measured.pk]))
        .json()
    )
    block = block_selectors.results_for_experiment(experiment=measured)
    assert body["capacity_warnings"] == block.capacity_warnings != []
    [draft] = [row for row in body["capacity"] if row["level"] == 4 and row["preempted_alone"]]
    assert draft["arm"] == {
        "runs": 3, "kv_cache_peak": 1.0, "kv_cache_mean": pytest.approx(0.85), "running_max": 4, "waiting_max": 2,
        "preemptions": 7,
    }  # fmt: skip
    assert draft["baseline"]["kv_cache_peak"] == 0.5
    assert draft["queued_alone"] is True
