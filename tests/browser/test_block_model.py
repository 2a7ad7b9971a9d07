"""The block model's figures in real Chromium: each called primary cell of the question shows its
estimate after the stop with the plain one beside it and the level its word was tested at, the
definitions say what both are, and the protocol card states how busy the host was."""

import os
from pathlib import Path

import pytest

from experiments.measurement.stats import verdicts
from experiments.measurement.stats.intervals import RatioEstimate
from experiments.models import RunSummary, SpeedupEstimate
from tests.factories import seed_finished_experiment

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def test_the_question_shows_each_called_cell_after_the_stop_with_the_plain_estimate(logged_in_page, live_server):
    experiment = seed_finished_experiment()
    runs = RunSummary.objects.filter(run__experiment=experiment).update(
        host_foreign_cpu=0.04, host_steal=0.0, host_load=1.5, host_cores=2
    )
    page = logged_in_page

    page.goto(f"{live_server.url}/experiments/{experiment.pk}/")

    question = page.locator("#question")
    assert "Tested at" in question.locator("#question-cells thead").text_content()
    stored = SpeedupEstimate.objects.filter(experiment=experiment, primary=True).select_related("arm")
    tested = {
        (c["arm_id"], c["level"]): c["confidence_percent"] for c in experiment.analysis.series["question"]["cells"]
    }
    rows = question.locator("#question-cells tbody tr[data-outcome]")
    assert rows.count() == stored.count() == 4
    for estimate, row in zip(stored.order_by("arm__position", "concurrency"), rows.all(), strict=True):
        after = verdicts.figure(RatioEstimate(estimate.point, estimate.ci_low, estimate.ci_high))
        plain = verdicts.figure(RatioEstimate(estimate.plain_point, estimate.plain_low, estimate.plain_high))
        assert row.locator("td.speedup").inner_text().split("\n") == [after, f"after the stop; plain {plain}"]
        assert row.locator("td").nth(5).inner_text() == tested[(estimate.arm_id, estimate.concurrency)]
    question.locator("#question-definitions summary").click()
    definitions = question.locator("#question-definitions").inner_text()
    assert "The block model" in definitions
    assert "After the stop" in definitions
    card = page.locator("#protocol-host-state").inner_text()
    assert card.startswith(f"other processes took 4% of the CPU, load 1.5; over {runs} runs · read from /proc")
    ARTIFACTS.mkdir(exist_ok=True)
    question.screenshot(path=ARTIFACTS / "block-model-question.png")
