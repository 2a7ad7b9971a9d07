"""Variance components and rounds per server against cases worked by hand, and a simulation
with known σ_start and σ_run."""

import math

import numpy as np
import pytest

from experiments.measurement.stats import variance_components as vc
from experiments.measurement.stats.inference import RunData


def _ratios(logs_by_level: dict[int, list[float]]) -> dict[int, dict[int, float]]:
    """{level: {block: ratio}} from log ratios listed in block order, blocks numbered from 1."""
    return {
        level: {block: math.exp(y) for block, y in enumerate(logs, start=1)} for level, logs in logs_by_level.items()
    }


# ---------------------------------------------------------------- the components by hand


def test_three_blocks_two_levels_worked_by_hand():
    # Centred: level 1 (0.03, 0, −0.03), level 2 (0.02, 0.01, −0.03); the offsets of each level
    # (0.1 and 0.5) are the levels' means and do not enter.
    # cov = (0.03·0.02 + 0 + 0.03·0.03) / 2 = 0.00075; var1 = 0.0018 / 2 = 0.0009,
    # var2 = 0.0014 / 2 = 0.0007: σ_start² = 0.00075, σ_run² = 0.0008 − 0.00075 = 0.00005,
    # and level 2's own σ_run² (0.0007 − 0.00075) is negative.
    result = vc.components(_ratios({1: [0.13, 0.10, 0.07], 4: [0.52, 0.51, 0.47]}))
    assert (result.levels, result.blocks) == (2, 3)
    assert result.var_start == pytest.approx(0.00075)
    assert result.var_run == pytest.approx(0.00005)
    assert result.start_raw == pytest.approx(0.00075)
    assert not result.start_floored
    assert result.run_floored_levels == (4,)
    assert result.estimable


def test_a_negative_covariance_is_floored_at_zero_and_said():
    # Levels move in opposite directions: cov = −0.0001, each variance 0.0001.
    result = vc.components(_ratios({1: [0.01, 0.0, -0.01], 2: [-0.01, 0.0, 0.01]}))
    assert result.start_raw == pytest.approx(-0.0001)
    assert result.start_floored
    assert result.var_start == 0.0
    assert result.var_run == pytest.approx(0.0001)
    assert result.run_floored_levels == ()


def test_three_levels_average_the_three_pairs():
    # Covariances: (1,2) = (0.01·0.02 + 0.01·0.02) / 2 = 0.0002, (1,3) = 0.01·0.01 / 2 = 0.00005,
    # (2,3) = 0.02·0.01 / 2 = 0.0001: σ_start² = 0.00035 / 3. Variances 0.0001, 0.0004, 0.0001:
    # σ_run² = 0.0006 / 3 − σ_start² = 0.00025 / 3; levels 1 and 3 alone would be negative.
    result = vc.components(_ratios({1: [0.01, 0.0, -0.01], 2: [0.02, 0.0, -0.02], 3: [0.0, 0.01, -0.01]}))
    assert result.var_start == pytest.approx(0.00035 / 3)
    assert result.var_run == pytest.approx(0.00025 / 3)
    assert result.run_floored_levels == (1, 3)


def test_only_the_blocks_complete_at_every_level_are_used():
    # Block 2 is missing at level 4: blocks 1, 3, 4 are the three of the hand case above.
    ratios = _ratios({1: [0.13, 0.0, 0.10, 0.07], 4: [0.52, 0.0, 0.51, 0.47]})
    del ratios[4][2]
    result = vc.components(ratios)
    assert result.blocks == 3
    assert result.var_start == pytest.approx(0.00075)


def test_one_level_is_not_estimable():
    result = vc.components(_ratios({1: [0.1, 0.2, 0.3, 0.4]}))
    assert not result.estimable
    assert "one concurrency level" in result.reason


def test_fewer_than_three_complete_blocks_are_not_estimable():
    ratios = _ratios({1: [0.1, 0.2, 0.3], 4: [0.1, 0.2, 0.3]})
    del ratios[1][3]
    result = vc.components(ratios)
    assert (result.estimable, result.blocks) == (False, 2)
    assert result.reason == "2 block(s) with a ratio at every level; at least 3 are needed"


# ---------------------------------------------------------------- the simulation


@pytest.mark.parametrize(("sigma_start", "sigma_run"), [(0.02, 0.03), (0.04, 0.01)])
def test_known_components_are_recovered_from_many_blocks(sigma_start, sigma_run):
    # 3000 blocks of 3 levels: the estimates' relative standard error is about 3 %. Were the
    # covariance replaced by a level's variance, σ_start would read √(σ_start² + σ_run²) and
    # σ_run 0, outside the tolerance in both cases.
    rng = np.random.default_rng(20261201)
    blocks, means = 3000, np.array([0.1, 0.3, -0.2])
    logs = means + rng.normal(0, sigma_start, (blocks, 1)) + rng.normal(0, sigma_run, (blocks, 3))
    ratios = {level: {b + 1: math.exp(y) for b, y in enumerate(logs[:, i])} for i, level in enumerate((1, 4, 16))}
    result = vc.components(ratios)
    assert math.sqrt(result.var_start) == pytest.approx(sigma_start, rel=0.1)
    assert math.sqrt(result.var_run) == pytest.approx(sigma_run, rel=0.1)


# ---------------------------------------------------------------- block ratios by block


def _run(arm, level, block, e2e):
    return RunData(arm=arm, level=level, block=block, latencies={"e2e": dict(enumerate(e2e))})


def test_block_ratios_keep_their_block_numbers_where_one_is_missing():
    runs = [
        _run(0, 1, 1, [20.0, 20.0]), _run(0, 1, 2, [20.0, 20.0]), _run(0, 1, 3, [30.0, 10.0]),
        _run(1, 1, 1, [10.0, 10.0]), _run(1, 1, 3, [5.0, 15.0]),  # no block 2
        _run(0, 4, 1, [20.0, 20.0]), _run(0, 4, 2, [20.0, 20.0]),
        _run(1, 4, 1, [40.0, 40.0]), _run(1, 4, 2, [10.0, None]),  # one pair in block 2
        _run(2, 1, 1, [40.0, 40.0]),  # another arm
    ]  # fmt: skip
    ratios = vc.block_ratios(runs, baseline=0, arms=[1], levels=[1, 4], metrics=["e2e", "ttft"])
    # Level 1: 40 / 20 in block 1, 40 / 20 in block 3; level 4: 40 / 80, then prompt 0 alone, 20 / 10.
    assert ratios == {(1, "e2e"): {1: {1: 2.0, 3: 2.0}, 4: {1: 0.5, 2: 2.0}}}


# ---------------------------------------------------------------- the costs


def _timing(arm, session, started, finished, succeeded=True):
    return vc.RunTiming(arm, session, started, finished, succeeded)


TIMINGS = [
    # Block 1: arm 1's server, two runs; arm 2's, two runs. Block 2: arm 1, then arm 2 with a failed run.
    _timing(1, (1, 1), 0.0, 10.0), _timing(1, (1, 1), 11.0, 21.0),
    _timing(2, (2, 1), 51.0, 61.0), _timing(2, (2, 1), 62.0, 80.0),
    _timing(1, (1, 2), 100.0, 110.0), _timing(1, (1, 2), 111.0, 121.0),
    _timing(2, (2, 2), 150.0, 150.0, succeeded=False), _timing(2, (2, 2), 150.0, 150.0, succeeded=False),
]  # fmt: skip


def test_a_sessions_start_up_is_its_wall_time_since_the_last_session_minus_its_runs():
    # Arm 2, block 1: 80 − 21 = 59 s of wall time, 28 s of runs -> 31 s. Arm 1, block 2:
    # 121 − 80 = 41 s, 20 s of runs -> 21 s. The first session has no session before it; the
    # last has failed runs.
    assert vc.start_times(TIMINGS) == {2: [31.0], 1: [21.0]}


def test_arm_costs_are_medians_over_its_sessions_and_succeeded_runs():
    assert vc.arm_costs(TIMINGS, 1) == vc.Costs(21.0, 10.0, sessions=1, runs=4)
    assert vc.arm_costs(TIMINGS, 2) == vc.Costs(31.0, 14.0, sessions=1, runs=2)
    assert vc.arm_costs([], 1) == vc.Costs(None, None)


def test_a_comparison_costs_the_mean_of_its_two_sides():
    both = vc.comparison_costs(vc.Costs(20.0, 10.0, 2, 6), vc.Costs(40.0, 6.0, 2, 6))
    assert both == vc.Costs(30.0, 8.0, 4, 12)
    assert vc.comparison_costs(vc.Costs(None, 10.0), vc.Costs(40.0, 6.0)).start_s is None


# ---------------------------------------------------------------- rounds per server


def _components(var_start, var_run, levels=2):
    return vc.Components(levels, 5, var_start=var_start, var_run=var_run)


def test_rounds_worked_by_hand():
    # c_round = 2 levels × 10 s = 20 s; r* = √(90 / 20 · 0.0016 / 0.0004) = √18 = 4.24.
    # Variance × cost: 4 rounds (0.0004 + 0.0004) · 170 = 0.136, 5 rounds (0.0004 + 0.00032) · 190 = 0.1368.
    rounds = vc.rounds_per_server(_components(0.0004, 0.0016), vc.Costs(90.0, 10.0))
    assert rounds.exact == pytest.approx(math.sqrt(18))
    assert rounds.rounds == 4


def test_rounds_take_the_cheaper_neighbour_not_the_nearer():
    # r* = √(60 / 20 · 4) = √12 = 3.46 = √(3 · 4): 3 and 4 rounds both give 0.112, and the fewer wins.
    assert vc.rounds_per_server(_components(0.0004, 0.0016), vc.Costs(60.0, 10.0)).rounds == 3
    # r* = √(20 / 20 · 0.0021 / 0.001) = 1.45, nearer 1 than 2; but 1 round gives
    # (0.001 + 0.0021) · 40 = 0.124 and 2 rounds (0.001 + 0.00105) · 60 = 0.123.
    rounds = vc.rounds_per_server(_components(0.001, 0.0021), vc.Costs(20.0, 10.0))
    assert rounds.exact == pytest.approx(math.sqrt(2.1))
    assert rounds.rounds == 2


def test_rounds_are_clamped_to_one_and_to_the_cap():
    assert vc.rounds_per_server(_components(0.01, 0.0001), vc.Costs(10.0, 10.0)).rounds == 1
    assert vc.rounds_per_server(_components(0.0001, 0.01), vc.Costs(6000.0, 1.0)).rounds == vc.MAX_ROUNDS
    assert vc.rounds_per_server(_components(0.0001, 0.01), vc.Costs(6000.0, 1.0), max_rounds=3).rounds == 3


def test_no_start_variance_gives_the_cap_and_says_why():
    rounds = vc.rounds_per_server(_components(0.0, 0.001), vc.Costs(30.0, 10.0))
    assert (rounds.rounds, rounds.exact) == (vc.MAX_ROUNDS, math.inf)
    assert "σ_start² is 0" in rounds.reason


def test_rounds_are_not_chosen_without_components_costs_or_variance():
    not_estimable = vc.Components(1, 3, reason="one concurrency level: …")
    assert vc.rounds_per_server(not_estimable, vc.Costs(30.0, 10.0)) == vc.Rounds(None, reason=not_estimable.reason)
    assert vc.rounds_per_server(_components(0.001, 0.001), vc.Costs(None, 10.0)).rounds is None
    flat = vc.rounds_per_server(_components(0.0, 0.0), vc.Costs(30.0, 10.0))
    assert flat.reason.startswith("the block ratios do not vary")
