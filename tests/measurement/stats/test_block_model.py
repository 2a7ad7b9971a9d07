"""The block model's spread (experiments/measurement/stats/block_model.py) on log ratios built by hand.

Cells are (arm, level) keys; a block's ratio is e^x for the log ratio x written in the test.
"""

import math

import numpy as np
import pytest
from scipy import stats

from experiments.measurement.stats import block_model
from experiments.measurement.stats.block_model import NEITHER, SAME_ARM, SAME_LEVEL, Covariances


def ratios(**cells: tuple[float, ...]) -> dict[tuple[int, int], dict[int, float]]:
    """{(arm, level): {block: e^x}} from keyword cells named a<arm>l<level>."""
    result = {}
    for name, logs in cells.items():
        arm, level = name[1:].split("l")
        result[(int(arm), int(level))] = {block: math.exp(x) for block, x in enumerate(logs, start=1)}
    return result


def cell(arm, level, *logs):
    return block_model._Cell(arm, level, dict(enumerate(logs, start=1)))


def upper(df: float) -> float:
    return df / stats.chi2.ppf(block_model.UNCERTAIN_SHARE_Q, df)


def test_the_pooled_variance_is_the_cells_sums_of_squares_over_their_degrees_of_freedom():
    data = ratios(a1l1=(0.0, 0.1, 0.2), a2l1=(0.1, 0.0, 0.2), a3l1=(0.1, 0.0, 0.1, 0.2))
    spreads = block_model.fit(data, block_model.arm_and_level)
    # (0.02 + 0.02 + 0.02) / (2 + 2 + 3)
    assert [s.variance for s in spreads.values()] == [pytest.approx(0.06 / 7)] * 3
    assert {s.cells for s in spreads.values()} == {3}


def test_a_cell_with_one_block_is_left_out_and_blocks_past_the_look_are_not_read():
    data = ratios(a1l1=(0.0, 0.1, 5.0), a2l1=(0.2,))
    spreads = block_model.fit(data, block_model.arm_and_level, upto=2)
    assert list(spreads) == [(1, 1)]
    assert spreads[(1, 1)].variance == pytest.approx(0.005)
    assert spreads[(1, 1)].df == 1
    assert block_model.fit(ratios(a1l1=(0.1,)), block_model.arm_and_level) == {}


def test_the_covariances_are_the_mean_over_pairs_of_each_kind_and_none_below_what_every_pair_shares():
    cells = [cell(1, 1, 0.0, 0.2), cell(1, 2, 0.0, 0.1), cell(2, 1, 0.1, 0.0), cell(2, 2, 0.0, 0.1)]
    cov = block_model.covariances(cells)
    # Pairs over 2 blocks: cov = (x2 − x1)(y2 − y1) / 2.
    assert cov.variance == pytest.approx((0.02 + 0.005 + 0.005 + 0.005) / 4)
    # Same arm: (1,1)-(1,2) 0.01, (2,1)-(2,2) −0.005 → 0.0025; same level: (1,1)-(2,1) −0.01 and
    # (1,2)-(2,2) 0.005 → −0.0025, held at NEITHER's (0.01 and −0.005 → 0.0025).
    assert cov.of(SAME_ARM) == pytest.approx(0.0025)
    assert cov.of(NEITHER) == pytest.approx(0.0025)
    assert cov.of(SAME_LEVEL) == pytest.approx(0.0025)


def test_covariances_are_held_between_zero_and_the_variance():
    cells = [cell(1, 1, 0.0, 0.1), cell(2, 1, 0.1, 0.0)]  # perfectly anti-correlated
    assert block_model.covariances(cells).of(SAME_LEVEL) == 0.0
    # A pair over the blocks both have can covary more than the cells vary over all of theirs.
    gappy = [cell(1, 1, 0.0, 0.3, 0.15), block_model._Cell(1, 2, {1: 0.0, 2: 0.3})]
    cov = block_model.covariances(gappy)
    assert cov.variance == pytest.approx((0.045 + 0.045) / 3)
    assert cov.of(SAME_ARM) == pytest.approx(cov.variance)


def test_independent_cells_have_nearly_their_summed_degrees_of_freedom():
    cells = [cell(a, 1, 0.0, 0.1, 0.2) for a in range(4)]
    df = block_model.satterthwaite_df(cells, Covariances(1.0, {}))
    # Four equal eigenvalues; the largest at its upper bound on 2 df, the rest on 6.
    k1, kr = upper(2), upper(6)
    assert df == pytest.approx(2 * (k1 + 3 * kr) ** 2 / (k1**2 + 3 * kr**2))
    assert 6 < df < 8


def test_cells_that_share_everything_have_one_cell_s_degrees_of_freedom():
    cells = [cell(a, 1, 0.0, 0.1, 0.2) for a in range(4)]
    assert block_model.satterthwaite_df(cells, Covariances(1.0, {SAME_LEVEL: 1.0})) == pytest.approx(2)


def test_one_cell_has_its_blocks_less_one_and_no_spread_gives_the_sum():
    assert block_model.satterthwaite_df([cell(1, 1, 0.0, 0.1, 0.2, 0.4)], Covariances(1.0, {})) == 3
    two = [cell(1, 1, 0.0, 0.0), cell(2, 1, 0.0, 0.0)]
    assert block_model.satterthwaite_df(two, Covariances(0.0, {})) == 2


def test_the_degrees_of_freedom_never_exceed_the_cells_blocks_less_one():
    cells = [cell(a, level, 0.0, 0.1) for a in range(3) for level in range(2)]
    assert block_model.satterthwaite_df(cells, Covariances(1.0, {})) <= 6


def test_an_arm_that_spreads_more_is_tested_on_its_own_levels_spread():
    quiet = {f"a{a}l{level}": (0.02, -0.02, 0.02, -0.02, 0.0) for a in (1, 2) for level in (1, 2, 4)}
    louder = {f"a3l{level}": (0.05, -0.05, 0.04, -0.04, 0.0) for level in (1, 2, 4)}
    spreads = block_model.fit(ratios(**quiet, **louder), block_model.arm_and_level)
    assert spreads[(3, 1)].cells == 3
    assert spreads[(3, 1)].variance == pytest.approx((0.0025 * 2 + 0.0016 * 2) / 4)
    assert spreads[(3, 1)].why == "its arm spreads more"
    # The quieter arms keep the pool's spread, the louder arm's cells in it.
    assert spreads[(1, 1)].cells == 9
    assert spreads[(1, 1)].variance == pytest.approx((6 * 0.0016 + 3 * 0.0082) / 36)


def test_an_arm_quieter_than_the_pool_keeps_the_pool_s_spread():
    quiet = {f"a1l{level}": (0.01, -0.01, 0.01, -0.01) for level in (1, 2)}
    loud = {f"a2l{level}": (0.05, -0.05, 0.05, -0.05) for level in (1, 2)}
    spreads = block_model.fit(ratios(**quiet, **loud), block_model.arm_and_level)
    assert spreads[(1, 1)].cells == 4
    assert spreads[(2, 1)].cells == 2


def test_a_cell_that_spreads_far_more_is_tested_on_its_own_blocks_and_stays_in_the_pool():
    steady = {f"a1l{level}": (0.01, -0.01, 0.0, 0.01 * level) for level in (1, 2, 4, 8, 16)}
    steady["a1l16"] = (0.5, -0.5, 0.4, -0.4)
    spreads = block_model.fit(ratios(**steady), block_model.arm_and_level)
    assert spreads[(1, 16)].cells == 1
    assert spreads[(1, 16)].df == 3
    assert spreads[(1, 16)].variance == pytest.approx(0.82 / 3)
    assert "cell" in spreads[(1, 16)].why
    # The others keep the pool, the noisy cell in it.
    assert spreads[(1, 1)].cells == 5
    assert spreads[(1, 1)].variance > 0.82 / 15


def test_a_noisy_cell_s_arm_mates_take_its_arm_s_spread():
    steady = {f"a{a}l{level}": (0.01, -0.01, 0.0, 0.01 * a) for a in (1, 2, 3) for level in (1, 4)}
    steady["a3l4"] = (0.5, -0.5, 0.4, -0.4)
    spreads = block_model.fit(ratios(**steady), block_model.arm_and_level)
    assert spreads[(3, 1)] == spreads[(3, 4)]
    assert spreads[(3, 1)].why == "its arm spreads more"
    assert spreads[(1, 1)].cells == 6


def test_similar_spreads_pool_every_cell():
    base = (0.03, -0.05, 0.01, 0.06, -0.02)
    logs = {f"a{a}l{level}": tuple(np.roll(base, a + 2 * level)) for a in (1, 2) for level in (1, 2)}
    spreads = block_model.fit(ratios(**logs), block_model.arm_and_level)
    assert {s.cells for s in spreads.values()} == {4}
    assert {s.why for s in spreads.values()} == {""}


def test_the_layout_of_keys():
    assert block_model.arm_and_level((3, 16)) == (3, 16)
    assert block_model.arm_and_level("a") == ("a", "a")


def test_a_spread_says_how_it_was_estimated():
    assert block_model.Spread(0.01, 7.25, 6).describe() == "pooled over 6 cells, 7.2 df"
    assert block_model.Spread(0.04, 3, 1, "it spreads more than the other cells").describe() == (
        "own blocks, 3 df (it spreads more than the other cells)"
    )
    assert block_model.Spread(0.04, 3, 1).sd == pytest.approx(0.2)
