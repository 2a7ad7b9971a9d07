"""The experiment page's question: its section shows each primary cell as stored (word,
figure, confidence, blocks, why), defines its words, and the grid marks the words outside
the question as unadjusted."""

import re
from html import unescape

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse

from experiments.measurement.stats import verdicts
from experiments.measurement.stats.intervals import RatioEstimate
from experiments.models import Experiment, SpeedupEstimate
from tests.factories import SEEDED_BLOCKS, seed_finished_experiment
from tests.results.helpers import html_tables

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished(db):
    return seed_finished_experiment()


def page_html(client, experiment) -> str:
    response = client.get(reverse("experiments:detail", args=[experiment.pk]))
    assert response.status_code == 200
    return response.text


def test_the_question_section_shows_each_primary_cell_as_stored(logged_in_client, finished):
    html = page_html(logged_in_client, finished)
    rows = html_tables(html)["question-cells"][1:]  # under the header
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
    html = page_html(logged_in_client, finished)
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
    html = page_html(logged_in_client, finished)
    called_elsewhere = SpeedupEstimate.objects.filter(
        experiment=finished, primary=False, outcome__in=("faster", "slower"), metric__in=("tpot", "e2e")
    ).count()
    assert called_elsewhere
    assert html.count('class="unadjusted"') >= called_elsewhere
    # The grid opens on the question's metric.
    assert html.index('id="grid-server_tpot"') < html.index('id="grid-tpot"')


def test_the_protocol_card_states_the_question(logged_in_client, finished):
    html = page_html(logged_in_client, finished)
    question = re.sub(r"\s+", " ", html.split('id="protocol-question">')[1].split("</dd>")[0])
    assert question.startswith("server_tpot at concurrency 1, 4 · blocks added until settled, at most 3")
    assert question.endswith("worth deploying from a gain of 0.070")
    assert "looks on the alpha spending, ρ = 3 (close to O'Brien–Fleming) boundary" in unescape(question)


def test_the_looks_replay_on_the_boundary_the_experiment_was_run_with(finished):
    # New experiments get the spending boundary; those stored before it keep Pocock's
    # (migration 0027), so replaying their looks gives the decisions their blocks were added on.
    assert finished.boundary == "spending-3"
    assert finished.question.design.spending == 3.0
    finished.boundary = "pocock"
    assert finished.question.design.spending is None


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_pocock_s_boundary_for_experiments_already_stored():
    before = [("experiments", "0026_server_settings")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    user = old.get_model("auth", "User").objects.create(username="old-timer")
    team = old.get_model("auth", "Group").objects.get_or_create(name="everyone")[0]
    stored = old.get_model("experiments", "Experiment").objects.create(
        name="sequential, before the spending boundary", owner_id=user.pk, team_id=team.pk, target_model="/m",
        num_prompts=1, max_tokens=1, concurrency_levels=[1], sequential=True,
    )  # fmt: skip
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    assert Experiment.objects.get(pk=stored.pk).boundary == "pocock"
    assert Experiment.objects.get(pk=stored.pk).question.design.spending is None
