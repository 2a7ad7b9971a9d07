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
    tested = {(c["arm_id"], c["level"]): c["confidence"] for c in finished.analysis.series["question"]["cells"]}
    for row, estimate in zip(rows, stored, strict=True):
        arm, level, joint, word, figure, confidence, blocks, why = row
        assert (arm, int(level), word) == (estimate.arm.label, estimate.concurrency, estimate.outcome)
        # No objective (a single-metric question): pays is faster, and not worth it anything else settled.
        assert joint.startswith("pays" if estimate.outcome == "faster" else "does not pay")
        # On the block model a called cell shows its estimate after the stop (95 %), the plain one beside it.
        assert estimate.stopping_aware
        assert estimate.confidence == 0.95
        after = verdicts.figure(RatioEstimate(estimate.point, estimate.ci_low, estimate.ci_high))
        plain = verdicts.figure(RatioEstimate(estimate.plain_point, estimate.plain_low, estimate.plain_high))
        assert figure == f"{after}after the stop; plain {plain}"
        assert confidence == f"{tested[(estimate.arm_id, estimate.concurrency)]:.1%}"
        assert int(blocks) == estimate.n_repetitions
        assert why
    # All four called: Holm's step-down tested them at 5 %/4, 5 %/3, 5 %/2 and 5 %, smallest p first.
    assert {estimate.outcome for estimate in stored} <= {"faster", "slower"}
    by_p = sorted(stored, key=lambda estimate: estimate.p_value)
    levels = [tested[(e.arm_id, e.concurrency)] for e in by_p]
    assert levels == pytest.approx([1 - 0.05 / 4, 1 - 0.05 / 3, 1 - 0.05 / 2, 0.95])
    stop = re.sub(r"\s+", " ", html.split('id="question-stop">')[1].split("</p>")[0])
    assert f"It took <strong>{SEEDED_BLOCKS} blocks</strong>" in stop


def test_the_question_s_words_are_defined_on_the_page(logged_in_client, finished):
    html = page_html(logged_in_client, finished)
    definitions = html.split('id="question-definitions"')[1].split("</details>")[0]
    for term in (
        "Pays, costs",
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


INTERACTIVE = {
    "objective": "interactive",
    "guards": [{"metric": "e2e", "margin": 0.05}, {"metric": "output_throughput", "margin": 0.05}],
}


def _joint_rows(html: str) -> dict[tuple[str, int], str]:
    rows = html_tables(html)["question-cells"][1:]
    return {(row[0], int(row[1])): row[2] for row in rows if len(row) == 8}


def test_an_arm_faster_per_token_whose_throughput_is_halved_costs_capacity(logged_in_client):
    """The seeded draft arm is faster in engine TPOT at level 1; its runs' output throughput
    halved, its joint word is "costs" at both levels, naming output throughput, with the TPOT word
    beside it."""
    from experiments.analysis.services import experiment_analyse
    from experiments.models import RunSummary

    experiment = seed_finished_experiment(**INTERACTIVE)
    draft = experiment.arms.get(method="draft_model")
    for summary in RunSummary.objects.filter(run__arm=draft):
        summary.output_throughput *= 0.5
        summary.save(update_fields=["output_throughput"])
    experiment_analyse(experiment=experiment)

    html = unescape(page_html(logged_in_client, experiment))
    joint = _joint_rows(html)
    assert re.match(r"faster per token but costs capacity: output throughput -\d+ %", joint[(draft.label, 1)])
    assert "The service's objective: <strong>Interactive" in html
    cells = Experiment.objects.get(pk=experiment.pk).analysis.series["question"]["cells"]
    draft_cells = [cell for cell in cells if cell["arm_id"] == draft.id]
    assert [cell["outcome"] for cell in draft_cells if cell["level"] == 1] == ["faster"]
    assert {cell["joint"]["word"] for cell in draft_cells} == {"costs"}
    assert {cell["joint"]["blocked_by"] for cell in draft_cells} == {"Output throughput"}


def test_an_arm_that_gains_everywhere_pays(logged_in_client):
    experiment = seed_finished_experiment(**INTERACTIVE)
    draft = experiment.arms.get(method="draft_model")
    joint = _joint_rows(unescape(page_html(logged_in_client, experiment)))
    assert joint[(draft.label, 1)].startswith("pays: faster on engine-timed TPOT, no worse on end-to-end latency")


def test_the_service_break_even_reads_the_joint_words(logged_in_client):
    """The n-gram arm pays at 1; its output throughput at 4 cut to 40 %, it costs there: it stops
    paying for the service between 1 and 4, on the page and in the API's question."""
    from experiments.analysis.services import experiment_analyse
    from experiments.api.payloads import results_payload
    from experiments.models import RunSummary

    experiment = seed_finished_experiment(**INTERACTIVE)
    ngram = experiment.arms.get(label="n-gram k=4")
    for summary in RunSummary.objects.filter(run__arm=ngram, run__concurrency=4):
        summary.output_throughput *= 0.4
        summary.save(update_fields=["output_throughput"])
    experiment_analyse(experiment=experiment)

    html = unescape(page_html(logged_in_client, experiment))
    assert "n-gram k=4 pays up to 1 and costs the service from 4" in html
    (row,) = [b for b in results_payload(experiment)["question"]["service_break_evens"] if b["arm_id"] == ngram.id]
    assert (row["state"], row["below"], row["above"]) == ("stops paying", 1, 4)
