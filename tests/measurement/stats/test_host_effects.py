"""The between-host term and the host warning's test (experiments/measurement/stats/host_effects.py),
hand-computed, and a simulation check of the warning's rate when no host differs."""

import math
import random

import pytest

from experiments.measurement.stats import host_effects as he

# Host a: blocks 1, 2 with log values 0.0, 0.2 (mean 0.1); host b: blocks 3-5 with 0.4, 0.6, 0.5 (mean 0.5).
VALUES = {1: 0.0, 2: 0.2, 3: 0.4, 4: 0.6, 5: 0.5}
HOSTS = {1: "a", 2: "a", 3: "b", 4: "b", 5: "b"}


def _t3_two_sided(t: float) -> float:
    """P(|T| ≥ t) for Student's t on 3 degrees of freedom, closed form: F(1, 3) = T² on 3 df."""
    x = t / math.sqrt(3)
    return 1 - (2 / math.pi) * (math.atan(x) + x / (1 + x * x))


def test_the_one_way_analysis_by_hand():
    # grand mean 1.7 / 5 = 0.34; SS_between = 2 · 0.24² + 3 · 0.16² = 0.192 on 1 df;
    # SS_within = 0.01 + 0.01 + 0.01 + 0.01 + 0 = 0.04 on 3 df, MS_within 0.04 / 3; F = 14.4;
    # n0 = (5 − (4 + 9) / 5) / 1 = 2.4; σ_host² = (0.192 − 0.04 / 3) / 2.4 = 0.074444…
    effect = he.host_effect(VALUES, HOSTS)
    assert effect.hosts == (("a", 2), ("b", 3))
    assert effect.means == (("a", pytest.approx(0.1)), ("b", pytest.approx(0.5)))
    assert (effect.df_between, effect.df_within) == (1, 3)
    assert effect.ms_between == pytest.approx(0.192)
    assert effect.ms_within == pytest.approx(0.04 / 3)
    assert effect.f == pytest.approx(14.4)
    assert effect.p == pytest.approx(_t3_two_sided(math.sqrt(14.4)))
    assert effect.var_host == pytest.approx((0.192 - 0.04 / 3) / 2.4)
    assert he.farthest_host(effect) in {"a", "b"}


def test_the_estimator_is_floored_at_zero():
    # Host means equal (0.1 each): MS_between 0, σ_host² raw = −MS_within / n0 < 0, shown as 0.
    effect = he.host_effect({1: 0.0, 2: 0.2, 3: 0.2, 4: 0.0}, {1: "a", 2: "a", 3: "b", 4: "b"})
    assert effect.var_host_raw == pytest.approx(-(0.04 / 2) / 2)
    assert effect.var_host == 0.0
    assert effect.p == pytest.approx(1.0)


def test_hosts_with_one_block_are_left_out_and_two_hosts_are_needed():
    effect = he.host_effect({1: 0.0, 2: 0.2, 3: 0.5}, {1: "a", 2: "a", 3: "b"})
    assert not effect.estimable
    assert effect.hosts == (("a", 2),)
    assert effect.left_out == (("b", 1),)
    assert "fewer than 2 hosts contributed at least 2 blocks" in effect.reason
    assert he.host_effect({1: 0.0, 2: 0.2}, {1: "a", 2: "a"}).reason == "all blocks ran on one host"
    # A third host's single block does not enter the analysis.
    with_single = he.host_effect(VALUES | {6: 3.0}, HOSTS | {6: "c"})
    assert with_single.f == pytest.approx(14.4)
    assert with_single.left_out == (("c", 1),)


def test_block_values_average_the_log_ratio_over_complete_blocks():
    ratios = {1: {1: math.exp(0.1), 2: math.exp(0.3)}, 4: {1: math.exp(0.3)}}  # {level: {block: ratio}}
    assert he.block_values(ratios) == {1: pytest.approx(0.2)}


def test_holm_by_hand():
    # Sorted 0.01, 0.03, 0.04 of 3: 3 · 0.01 = 0.03; max(0.03, 2 · 0.03) = 0.06; max(0.06, 0.04) = 0.06.
    adjusted = he.holm({"x": 0.01, "y": 0.04, "z": 0.03}, level=0.05)
    assert adjusted["x"] == (pytest.approx(0.03), True)
    assert adjusted["z"] == (pytest.approx(0.06), False)
    assert adjusted["y"] == (pytest.approx(0.06), False)


def test_no_host_difference_warns_at_about_the_level():
    """Through the page's decision (hosts_differ): 3 hosts with 3, 3 and 2 blocks, nothing differing
    between hosts. One arm: the warning rate is the test's level; three independent arms under Holm:
    the rate of any warning is at most the level."""
    rng = random.Random(38)
    hosts = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c", 7: "a", 8: "b"}
    trials = 4000
    one_arm = any_arm = 0
    for _ in range(trials):
        effects = {arm: he.host_effect({b: rng.gauss(0.2, 0.05) for b in hosts}, hosts) for arm in range(3)}
        decided = he.hosts_differ(effects)
        one_arm += he.hosts_differ({0: effects[0]})[0][1]
        any_arm += any(warn for _, warn in decided.values())
    se = math.sqrt(0.05 * 0.95 / trials)
    assert abs(one_arm / trials - 0.05) < 3 * se
    assert any_arm / trials < 0.05 + 3 * se


def test_a_host_that_differs_is_found():
    rng = random.Random(7)
    hosts = {b: "slow" if b <= 3 else f"h{b % 2}" for b in range(1, 10)}
    warned = found = 0
    for _ in range(200):
        values = {b: rng.gauss(0.2 - (0.2 if hosts[b] == "slow" else 0.0), 0.05) for b in hosts}
        effect = he.host_effect(values, hosts)
        warned += he.hosts_differ({0: effect})[0][1]
        found += he.farthest_host(effect) == "slow"
    assert warned > 170  # power about 0.95 at this shift (4 standard deviations of a block)
    assert found > 180
