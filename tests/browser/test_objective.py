"""The service's words in real Chromium: the question section of an experiment whose draft arm is
faster per token but costs capacity shows the joint word with the guard named, beside the primary
metric's own word, and its definitions."""

import os
from pathlib import Path

import pytest

from experiments.analysis.services import experiment_analyse
from experiments.models import RunSummary
from tests.factories import seed_finished_experiment

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
GUARDS = [{"metric": "e2e", "margin": 0.05}, {"metric": "output_throughput", "margin": 0.05}]


def test_the_question_names_the_guard_that_keeps_an_arm_from_paying(logged_in_page, live_server):
    experiment = seed_finished_experiment(objective="interactive", guards=GUARDS)
    draft = experiment.arms.get(method="draft_model")
    for summary in RunSummary.objects.filter(run__arm=draft):
        summary.output_throughput *= 0.5
        summary.save(update_fields=["output_throughput"])
    experiment_analyse(experiment=experiment)
    page = logged_in_page

    page.goto(f"{live_server.url}/experiments/{experiment.pk}/")

    question = page.locator("#question")
    text = question.inner_text()
    assert "The service's objective: Interactive" in text
    row = question.locator("#question-cells tbody tr[data-word='costs']").first
    assert "faster per token but costs capacity: output throughput" in row.inner_text()
    assert row.locator("td.outcome").inner_text().strip() == "faster"
    assert question.locator("#question-cells tbody tr[data-word='pays']").count() >= 1
    assert "Where it stops paying for the service" in text
    question.locator("#question-definitions summary").click()
    assert "Pays, costs" in question.locator("#question-definitions").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    question.screenshot(path=ARTIFACTS / "objective-question.png")
