"""The experiment page's question: its section shows each primary cell as stored (word,
figure, confidence, blocks, why), defines its words, and the grid marks the words outside
the question as unadjusted."""

import re

import pytest
from django.urls import reverse

from experiments.measurement import verdicts
from experiments.measurement.stats import RatioEstimate
from experiments.models import SpeedupEstimate
from tests.factories import SEEDED_BLOCKS, seed_finished_experiment
from tests.results.test_results_page import _tables

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished(db):
    return seed_finished_experiment()


def _page(client, experiment) -> str:
    response = client.get(reverse("experiments:detail", args=[experiment.pk]))
    assert response.status_code == 200
    return response.text


def test_the_question_section_shows_each_primary_cell_as_stored(logged_in_client, finished):
    html = _page(logged_in_client, finished)
    rows = _tables(html)["question-cells"][1:]  # under the header
    stored = SpeedupEstimate.objects.filter(experiment=finished, primary=True).order_by("arm__position", "concurrency")
    assert len(rows) == stored.count() == 4  # two speculative arms at levels 1 and 4
    for row, estimate in zip(rows, stored, strict=True):
        arm, level, word, figure, confidence, blocks, why = row
        assert (arm, int(level), word) == (estimate.arm.label, estimate.concurrency, estimate.outcome)
        assert figure == verdicts.figure(RatioEstimate(estimate.point, estimate.ci_low, estimate.ci_high))
        assert confidence == f"{estimate.confidence:.1%}"
        assert int(blocks) == estimate.n_repetitions
        assert why
    # All four called: Holm's step-down tested them at 5 %/4, 5 %/3, 5 %/2 and 5 %, smallest p first.
    assert {estimate.outcome for estimate in stored} <= {"faster", "slower"}
    by_p = sorted(stored, key=lambda estimate: estimate.p_value)
    assert [e.confidence for e in by_p] == pytest.approx([1 - 0.05 / 4, 1 - 0.05 / 3, 1 - 0.05 / 2, 0.95])
    stop = re.sub(r"\s+", " ", html.split('id="question-stop">')[1].split("</p>")[0])
    assert f"It took <strong>{SEEDED_BLOCKS} blocks</strong>" in stop


def test_the_question_s_words_are_defined_on_the_page(logged_in_client, finished):
    html = _page(logged_in_client, finished)
    definitions = html.split('id="question-definitions"')[1].split("</details>")[0]
    for term in (
        "Primary cells",
        "Faster, slower",
        "Equivalent",
        "Not worth it",
        "Open, inconclusive",
        "Device-minutes",
    ):
        assert f"<dt>{term}</dt>" in definitions
    assert "Holm" in definitions
    assert "O'Brien and Fleming" in definitions


def test_the_grid_marks_words_outside_the_question_as_unadjusted(logged_in_client, finished):
    html = _page(logged_in_client, finished)
    called_elsewhere = SpeedupEstimate.objects.filter(
        experiment=finished, primary=False, outcome__in=("faster", "slower"), metric__in=("tpot", "e2e")
    ).count()
    assert called_elsewhere
    assert html.count('class="unadjusted"') >= called_elsewhere
    # The grid opens on the question's metric.
    assert html.index('id="grid-server_tpot"') < html.index('id="grid-tpot"')


def test_the_protocol_card_states_the_question(logged_in_client, finished):
    html = _page(logged_in_client, finished)
    question = re.sub(r"\s+", " ", html.split('id="protocol-question">')[1].split("</dd>")[0])
    assert question.startswith("server_tpot at concurrency 1, 4 · blocks added until settled, at most 3")
    assert question.endswith("worth deploying from a gain of 0.070")
