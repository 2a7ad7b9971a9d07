"""Decisions on the block model (experiments/measurement/stats/block_decisions.py) on block log
ratios built by hand, beside the per-cell method (sequential.decide) on the same cells."""

import math

import pytest

from experiments.measurement.stats import block_decisions, block_model, inference, question, sequential
from experiments.measurement.stats.block_decisions import QUIET
from experiments.measurement.stats.sequential import Design, PrimaryCell

FIXED_4 = Design(4, sequential=False, margin=0.02, worthwhile_gain=0.07)
PER_CELL_4 = Design(4, sequential=False, margin=0.02, worthwhile_gain=0.07, method=sequential.PER_CELL_T)
SEQUENTIAL_10 = Design(10, sequential=True, margin=0.02, worthwhile_gain=0.07)


def blocks(*logs: float) -> dict[int, float]:
    return {block: math.exp(x) for block, x in enumerate(logs, start=1)}


def decide(cells, design=FIXED_4, blocks_run=4, final=True, **kwargs):
    return {d.key: d for d in block_decisions.decide(cells, design, blocks_run=blocks_run, final=final, **kwargs)}


def per_cell(cells, **kwargs):
    return {d.key: d for d in sequential.decide(cells, PER_CELL_4, blocks_run=4, final=True, **kwargs)}


# Four cells with the same spread (sd 0.055) and little in common between them: each gains
# about 9 %, t = 3.29; on 3 degrees of freedom p = 0.046, above Holm's first 0.05 / 4.
GAINING = [
    PrimaryCell((1, 1), blocks(0.03, 0.15, 0.06, 0.12)),
    PrimaryCell((1, 4), blocks(0.12, 0.06, 0.15, 0.03)),
    PrimaryCell((2, 1), blocks(0.06, 0.03, 0.12, 0.15)),
    PrimaryCell((2, 4), blocks(0.15, 0.12, 0.03, 0.06)),
]


def test_pooling_the_cells_spread_calls_gains_that_each_cell_s_own_blocks_cannot():
    assert {d.outcome for d in per_cell(GAINING).values()} == {"inconclusive"}
    decided = decide(GAINING)
    assert {d.outcome for d in decided.values()} == {"faster"}
    spread = block_model.fit({c.key: c.ratios for c in GAINING}, block_model.arm_and_level)[(1, 1)]
    assert spread.cells == 4
    assert spread.df > 3  # the per-cell test has 3


def test_a_called_cell_shows_its_estimate_after_the_stop_with_the_plain_one_and_the_test_s_interval():
    decided = decide(GAINING)[(1, 1)]
    assert decided.stopping_aware
    assert decided.plain is not None
    assert decided.plain.point == pytest.approx(math.exp(0.09))
    lo, hi = decided.test_interval
    assert lo > 1  # the interval at the level the call passed excludes 1
    assert (lo, hi) == (decided.plain.lo, decided.plain.hi)
    assert decided.confidence == pytest.approx(1 - 0.05 / 4) or decided.confidence > 1 - 0.05 / 4
    # Called because it looked good at this look: the estimate is below the plain mean, at least 1.
    assert 1 <= decided.estimate.point < decided.plain.point
    assert decided.estimate.lo <= decided.estimate.point <= decided.estimate.hi
    assert "accounts for the stop at 4 blocks" in decided.estimate.note


def test_not_worth_it_needs_the_interval_above_the_mirrored_gain_so_it_never_pre_empts_slower():
    # Both cells lose about 5 %: the per-cell method stops them as not worth it (its equivalence
    # interval below 1.07) before slower could be shown; the block model keeps them open.
    losing = [
        PrimaryCell((1, 1), blocks(-0.09, -0.01, -0.03, -0.07)),
        PrimaryCell((1, 2), blocks(-0.01, -0.09, -0.07, -0.03)),
    ]
    assert {d.outcome for d in per_cell(losing).values()} == {"not worth it"}
    decided = decide(losing)
    assert {d.outcome for d in decided.values()} == {"inconclusive"}
    lo, hi = decided[(1, 1)].test_interval
    assert lo < 1 / 1.07
    assert hi > 1


def test_cells_shown_inside_the_worthwhile_band_settle_and_one_inside_the_margin_is_equivalent():
    cells = [
        PrimaryCell((1, 1), blocks(-0.07, -0.05, -0.04, -0.08)),
        PrimaryCell((1, 2), blocks(0.01, -0.01, 0.02, -0.02)),
        PrimaryCell((2, 1), blocks(0.0, 0.02, -0.02, 0.01)),
        PrimaryCell((2, 2), blocks(0.02, -0.01, 0.0, -0.01)),
    ]
    decided = decide(cells)
    assert decided[(1, 1)].outcome == "slower"
    assert {decided[key].outcome for key in ((1, 2), (2, 1), (2, 2))} == {"equivalent"}
    lo, hi = decided[(1, 2)].equivalence_interval
    assert lo >= 0.98
    assert hi <= 1.02
    assert 0.98 <= decided[(1, 2)].estimate.lo <= decided[(1, 2)].estimate.hi <= 1.02


def test_a_settled_cell_frees_alpha_for_other_settlements_but_not_for_calls():
    # Arm 2's cells settle; arm 1's p = 0.021 would pass 0.05 / 2 but does not pass 0.05 / 4.
    cells = [
        PrimaryCell((1, 1), blocks(0.09, 0.02, 0.11, 0.04)),
        PrimaryCell((1, 2), blocks(0.02, 0.09, 0.04, 0.11)),
        PrimaryCell((2, 1), blocks(0.005, -0.005, 0.0, 0.0)),
        PrimaryCell((2, 2), blocks(0.0, 0.005, -0.005, 0.0)),
    ]
    decided = decide(cells)
    assert [decided[(2, level)].outcome for level in (1, 2)] == ["not worth it"] * 2
    # The second settlement was tested at 0.05 / 3: the first freed its share for it.
    assert decided[(2, 2)].confidence == pytest.approx(1 - 0.05 / 3)
    assert 0.05 / 4 < decided[(1, 1)].p_value <= 0.05 / 2
    assert decided[(1, 1)].outcome == "inconclusive"
    assert decided[(1, 1)].confidence == pytest.approx(1 - 0.05 / 4)


def test_the_replicate_s_family_is_quiet_enough_when_its_interval_is_inside_the_worthwhile_band():
    quiet = [
        PrimaryCell((9, 1), blocks(0.01, -0.01, 0.02, -0.02)),
        PrimaryCell((9, 2), blocks(0.02, -0.01, -0.02, 0.01)),
    ]
    assert {d.outcome for d in decide(quiet, futility=False, quiet=True).values()} == {QUIET}
    loud = [PrimaryCell((9, 1), blocks(0.2, -0.2, 0.1, -0.1)), PrimaryCell((9, 2), blocks(-0.1, 0.2, -0.2, 0.1))]
    assert {d.outcome for d in decide(loud, futility=False, quiet=True).values()} == {"inconclusive"}
    # Without `quiet` (and without futility) the replicate's family only calls faster or slower.
    assert {d.outcome for d in decide(quiet, futility=False).values()} == {"inconclusive"}


def test_an_open_cell_shows_its_plain_estimate_and_the_blocks_that_would_settle_it():
    cells = [PrimaryCell((1, 1), blocks(0.04, 0.08, 0.02)), PrimaryCell((2, 1), blocks(0.05, 0.01, 0.06))]
    decided = decide(cells, design=SEQUENTIAL_10, blocks_run=3, final=False)
    cell = decided[(1, 1)]
    assert cell.outcome == "open"
    assert not cell.stopping_aware
    assert cell.estimate.point == pytest.approx(math.exp(0.14 / 3))
    assert cell.to_settle is not None
    assert 3 < cell.to_settle <= 99
    # A larger gain would settle sooner.
    bigger = [PrimaryCell((1, 1), blocks(0.09, 0.13, 0.07)), PrimaryCell((2, 1), blocks(0.05, 0.01, 0.06))]
    sooner = decide(bigger, design=SEQUENTIAL_10, blocks_run=3, final=False)[(1, 1)]
    assert sooner.outcome == "open"
    assert sooner.to_settle is not None
    assert sooner.to_settle < cell.to_settle


def test_two_blocks_at_the_first_look_of_a_long_design_do_not_overflow():
    # The crash of issue 36: a cell with 2 blocks at look 3 of 10 is tested at a tiny level.
    cells = [PrimaryCell((1, 1), {1: 0.2, 3: 3.0}), PrimaryCell((1, 2), {1: 0.5, 2: 1.5, 3: 0.9})]
    for decided in decide(cells, design=SEQUENTIAL_10, blocks_run=3, final=False).values():
        assert decided.outcome == "open"
        assert math.isfinite(decided.estimate.hi)
    old = sequential.decide(
        cells, Design(10, True, 0.02, 0.07, method=sequential.PER_CELL_T), blocks_run=3, final=False
    )
    assert all(math.isfinite(d.estimate.hi) for d in old)


def test_a_blocked_cell_keeps_its_reason_and_its_own_estimate():
    cells = [PrimaryCell((1, 1), blocks(0.1, 0.2, 0.3, 0.4), blocked="failures differ"), *GAINING[1:]]
    decided = decide(cells)
    assert decided[(1, 1)].outcome == "failures differ"
    assert decided[(1, 1)].confidence == 0.95
    assert decided[(1, 1)].estimate.point == pytest.approx(math.exp(0.25))


def test_a_cell_with_one_block_gets_no_test():
    decided = decide([PrimaryCell((1, 1), {1: 1.2}), *GAINING[1:]])
    assert decided[(1, 1)].outcome == "inconclusive"
    assert decided[(1, 1)].p_value is None


def test_the_question_decides_on_the_method_its_design_names():
    metric, baseline = "output_throughput", 0
    runs = [
        inference.RunData(baseline, level, block, throughputs={metric: 100.0})
        for level in (1, 4)
        for block in range(1, 5)
    ]
    for cell in GAINING:
        arm, level = cell.key
        runs += [inference.RunData(arm, level, b, throughputs={metric: 100 * r}) for b, r in cell.ratios.items()]
    cells = inference.speedup_cells(runs, baseline=baseline, arms=[1, 2], levels=[1, 4], margin=0.02, metrics=[metric])

    def outcomes(design):
        asked = question.Question(metric, (1, 4), design)
        decided = question.question_decisions(
            runs, cells, baseline=baseline, candidates=[1, 2], replicate=None, question=asked, final=True
        )
        return {d.outcome for d in decided.candidates}, {d.stopping_aware for d in decided.candidates}

    assert outcomes(FIXED_4) == ({"faster"}, {True})
    assert outcomes(PER_CELL_4) == ({"inconclusive"}, {False})
