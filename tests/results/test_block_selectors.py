"""The results block's reads (experiments/results/block_selectors.py) against hand-made cases: per-cell
spreads over repetitions, acceptance pooled by position, the arms' colours."""

import pytest

from experiments.models import Experiment, Run
from experiments.results import block as results
from experiments.results import block_selectors
from tests.factories import (
    ArmFactory,
    RunFactory,
)
from tests.results.helpers import run_summary, two_arms

pytestmark = pytest.mark.django_db


def _cells(experiment):
    arms = block_selectors.arm_styles(experiment=experiment)
    return {(c.arm.label, c.level): c for c in block_selectors.summary_cells(experiment=experiment, arms=arms)}


def test_summary_cells_average_the_repetitions_with_their_range():
    experiment, baseline, arm = two_arms()
    run_summary(arm, 1, 1, tpot_p50_ms=10.0, output_throughput=100.0, spec_num_drafts=10, spec_num_accepted_tokens=15)
    run_summary(arm, 1, 2, tpot_p50_ms=14.0, output_throughput=120.0, spec_num_drafts=30, spec_num_accepted_tokens=25)
    run_summary(arm, 1, 3, status=Run.Status.FAILED, tpot_p50_ms=1000.0)  # a failed run does not count
    run_summary(baseline, 4, 1, tpot_p50_ms=20.0, goodput=None)

    cells = _cells(experiment)

    cell = cells[("n-gram k=4", 1)]
    assert cell.runs == 2
    assert cell.spread["tpot_p50_ms"] == results.Spread(12.0, 10.0, 14.0)
    assert cell.spread["output_throughput"] == results.Spread(110.0, 100.0, 120.0)
    assert (cell.drafts, cell.accepted, cell.acceptance_length) == (40, 40, 2.0)
    assert cells[("baseline", 4)].spread["goodput"] == results.Spread(None, None, None)
    assert list(cells) == [("baseline", 4), ("n-gram k=4", 1)]  # arm position, then level


def test_acceptance_by_position_pools_the_counters_over_runs():
    experiment, baseline, arm = two_arms()
    run_summary(arm, 1, 1, spec_num_drafts=10, spec_accepted_per_pos=[5, 3, 1])
    run_summary(arm, 4, 1, spec_num_drafts=6, spec_accepted_per_pos=[3, 1, 0])
    run_summary(baseline, 1, 1, spec_num_drafts=None, spec_accepted_per_pos=[])

    [pooled] = block_selectors.acceptance_by_position(
        experiment=experiment, arms=block_selectors.arm_styles(experiment=experiment)
    )

    assert (pooled.arm.label, pooled.drafts, pooled.accepted) == ("n-gram k=4", 16, [8, 4, 1])
    assert pooled.unconditional == [0.5, 0.25, 0.0625]
    assert pooled.conditional == [0.5, 0.5, 0.25]


def test_no_results_before_a_run_succeeded():
    experiment, baseline, _ = two_arms(status=Experiment.Status.RUNNING)
    RunFactory(arm=baseline, status=Run.Status.RUNNING)

    assert block_selectors.results_for_experiment(experiment=experiment) is None


def test_arms_keep_their_colour_and_the_baseline_is_grey():
    experiment, _, _ = two_arms()
    ArmFactory(experiment=experiment, position=2, label="draft k=3", method="draft_model", params={"model": "/m"})

    colours = [(arm.label, arm.colour) for arm in block_selectors.arm_styles(experiment=experiment)]

    assert colours == [
        ("baseline", results.BASELINE_COLOUR), ("n-gram k=4", results.ARM_COLOURS[0]),
        ("draft k=3", results.ARM_COLOURS[1]),
    ]  # fmt: skip
