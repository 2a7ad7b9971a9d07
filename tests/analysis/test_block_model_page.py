"""An experiment of the block model (Experiment.verdict_method, the default for new ones) through
the stored analysis and the page: a settled primary cell stores and shows its estimate after the
stop with the plain one beside it, an open cell the blocks its looks would need and what they cost; an
experiment recorded before replays its per-cell method."""

from dataclasses import replace

import pytest
from django.urls import reverse

from experiments.analysis import continuation, primary
from experiments.analysis.loader import load_runs
from experiments.analysis.services import experiment_analyse
from experiments.measurement.stats import sequential
from experiments.models import Experiment, SpeedupEstimate
from tests.factories import seed_finished_experiment

pytestmark = pytest.mark.django_db


def _primary(experiment: Experiment) -> list[SpeedupEstimate]:
    return list(
        SpeedupEstimate.objects.filter(experiment=experiment, primary=True).order_by("arm__position", "concurrency")
    )


def test_a_new_experiment_is_decided_on_the_block_model_and_stores_its_estimates_after_the_stop():
    experiment = seed_finished_experiment()
    assert experiment.verdict_method == sequential.BLOCK_MODEL
    settled = [e for e in _primary(experiment) if e.outcome in ("faster", "slower")]
    assert settled
    for estimate in settled:
        assert estimate.stopping_aware
        assert estimate.confidence == 0.95
        assert estimate.plain_low is not None
        assert estimate.plain_high is not None
        assert estimate.plain_low <= estimate.plain_point <= estimate.plain_high
        # The word's side of 1 holds for both, and the shown point does not exceed the plain one.
        if estimate.outcome == "faster":
            assert estimate.plain_low > 1
            assert 1 <= estimate.point <= estimate.plain_point * (1 + 1e-6)
    question = experiment.analysis.series["question"]
    assert question["block_model"]
    cell = next(c for c in question["cells"] if c["outcome"] in ("faster", "slower"))
    assert cell["stopping_aware"]
    assert cell["plain_figure"]
    assert "pooled over" in cell["why"] or "own blocks" in cell["why"]


def test_the_page_shows_the_estimate_after_the_stop_and_the_plain_one(logged_in_client):
    experiment = seed_finished_experiment()
    html = logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).text
    question = html.split('id="question-cells"')[1].split("</table>")[0]
    assert "after the stop; plain" in question
    assert "Tested at" in question
    grid = html.split('id="grid-server_tpot"')[1].split("</table>")[0]
    assert "95 % after the stop interval" in grid
    assert 'class="plain"' in grid
    assert "The block model" in html
    definitions = html.split('id="question-definitions"')[1].split("</details>")[0]
    assert "<dt>After the stop</dt>" in definitions
    assert "The plain estimate is at the level of the look that settled it (the Tested at column)" in definitions
    assert "(the confidence column)" not in definitions


def test_an_experiment_recorded_before_replays_its_per_cell_method():
    experiment = seed_finished_experiment(verdict_method=sequential.PER_CELL_T)
    assert experiment.question.design.method == sequential.PER_CELL_T
    assert not any(e.stopping_aware for e in _primary(experiment))
    assert not experiment.analysis.series["question"]["block_model"]
    before = [(e.outcome, e.point, e.ci_low, e.ci_high, e.confidence) for e in _primary(experiment)]
    experiment_analyse(experiment=experiment)
    assert [(e.outcome, e.point, e.ci_low, e.ci_high, e.confidence) for e in _primary(experiment)] == before


def test_an_open_cell_says_the_blocks_its_looks_would_need_and_what_they_cost():
    experiment = seed_finished_experiment()  # 3 arms x 3 blocks: 9 server sessions; the baseline its one control
    decided = primary.primary_decisions(experiment, load_runs(experiment), final=False)
    cell = replace(decided.candidates[0], outcome=sequential.OPEN, to_settle=7)
    arm, level = cell.key
    labels = {arm: "n-gram k=4"}
    step = continuation.Step(blocks_run=3, device_minutes=30.0)
    # 7 blocks in all, 3 run: 4 more, each a session for the arm and the baseline, at 30 / 9 minutes a session.
    assert primary._to_settle(cell, experiment, step, labels) == (
        f"n-gram k=4 at {level} (about 4 more blocks, ≈ {4 * 2 * 30 / 9:.1f} device-minutes, would settle it)"
    )
    assert primary._why(cell, experiment.question.design, "") == (
        "open after 3 blocks: about 7 blocks in all would settle it at its current spread"
    )
