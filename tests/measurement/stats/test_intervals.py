"""experiments/measurement/stats/intervals.py against hand-computed cases: speedups per block and
their interval over blocks. No database."""

import math

import pytest

from experiments.measurement.stats import intervals

# ---------------------------------------------------------------- speedup per block


def test_ratio_of_means_pairs_prompts_both_sides_have():
    # Prompts 0 and 1 on both sides (prompt 2 only in the baseline, prompt 3 has no TPOT in
    # the arm): (10 + 30) / (5 + 15) = 2.
    baseline = {0: 10.0, 1: 30.0, 2: 99.0, 3: 7.0}
    arm = {0: 5.0, 1: 15.0, 3: None}
    assert intervals.ratio_of_means(baseline, arm) == (2.0, 2)
    # Throughput-like: arm / baseline
    assert intervals.ratio_of_means(baseline, arm, higher_is_better=True) == (0.5, 2)


def test_ratio_of_means_without_a_usable_pair():
    assert intervals.ratio_of_means({}, {}) == (None, 0)
    # A zero on the arm side (a whole output in one chunk gives TPOT 0): no finite ratio.
    assert intervals.ratio_of_means({0: 10.0}, {0: 0.0}) == (None, 1)
    # ... and a zero on the baseline side: no logarithm.
    assert intervals.ratio_of_means({0: 0.0}, {0: 5.0}) == (None, 1)
    # A zero among others is fine: (0 + 10) / (5 + 5) = 1.
    assert intervals.ratio_of_means({0: 0.0, 1: 10.0}, {0: 5.0, 1: 5.0}) == (1.0, 2)
    with pytest.raises(ValueError, match="at least 0"):
        intervals.ratio_of_means({0: 10.0}, {0: -1.0})


def test_pooled_per_token_ratio_weighs_every_decode_token_the_same():
    # Prompt 0: baseline 10 ms over 10 decode tokens (100 ms), the arm 5 ms over 20 (100 ms);
    # prompt 1: baseline 20 ms over 2 (40 ms), the arm 10 ms over 2 (20 ms). Prompt 2 is only in
    # the baseline, prompt 3 has no TPOT in the arm: left out. Baseline 140 / 12 ms a token, the
    # arm's 120 / 22: (140 / 12) / (120 / 22) = 3080 / 1440.
    baseline = {0: 10.0, 1: 20.0, 2: 99.0, 3: 7.0}
    arm = {0: 5.0, 1: 10.0, 3: None}
    ratio, pairs = intervals.pooled_per_token_ratio(
        baseline, arm, baseline_tokens={0: 11, 1: 3, 2: 5, 3: 5}, arm_tokens={0: 21, 1: 3, 3: 1}
    )
    assert (ratio, pairs) == (pytest.approx(3080 / 1440), 2)
    # The ratio of means of the same TPOTs: (10 + 20) / (5 + 10) = 2.
    assert intervals.ratio_of_means(baseline, arm) == (2.0, 2)


def test_pooled_per_token_ratio_without_a_usable_pair_or_token_count():
    assert intervals.pooled_per_token_ratio({}, {}, baseline_tokens={}, arm_tokens={}) == (None, 0)
    # A zero TPOT on the arm's side: no finite ratio.
    assert intervals.pooled_per_token_ratio({0: 10.0}, {0: 0.0}, baseline_tokens={0: 3}, arm_tokens={0: 3}) == (None, 1)
    with pytest.raises(ValueError, match="at least 0"):
        intervals.pooled_per_token_ratio({0: 10.0}, {0: -1.0}, baseline_tokens={0: 3}, arm_tokens={0: 3})
    # A TPOT whose output token count is missing (or under 2) cannot be weighed.
    with pytest.raises(ValueError, match="prompt 0 has a TPOT without an output of at least 2 tokens"):
        intervals.pooled_per_token_ratio({0: 10.0}, {0: 5.0}, baseline_tokens={0: 3}, arm_tokens={})
    with pytest.raises(ValueError, match="at least 2 tokens: 1, 3"):
        intervals.pooled_per_token_ratio({0: 10.0}, {0: 5.0}, baseline_tokens={0: 1}, arm_tokens={0: 3})


def test_run_ratio():
    # throughput 150 against 100 -> 1.5; as a latency 100 / 150
    assert intervals.run_ratio(100.0, 150.0) == 1.5
    assert intervals.run_ratio(100.0, 150.0, higher_is_better=False) == pytest.approx(2 / 3)
    assert intervals.run_ratio(None, 150.0) is None
    assert intervals.run_ratio(0.0, 150.0) is None
    assert intervals.run_ratio(100.0, 0.0) is None
    # Values below 1 are fine: 0.75 requests/s against 0.5 -> 1.5
    assert intervals.run_ratio(0.5, 0.75) == 1.5


def test_block_interval_on_a_hand_computed_case():
    # Block ratios 1.1, 1.2, 1.3. Logs 0.0953102, 0.1823216, 0.2623643: mean 0.1799987;
    # deviations -0.0846885, 0.0023229, 0.0823656, squares summing to 0.0139616, so the
    # sample sd is sqrt(0.0139616 / 2) = 0.0835513; t(0.975, 2 df) = 4.3027 (t table),
    # half-width 4.3027 * 0.0835513 / sqrt(3) = 0.207551.
    # point exp(0.1799987) = 1.19722, lo exp(-0.027552) = 0.97282, hi exp(0.387550) = 1.47336.
    estimate = intervals.block_interval([1.1, 1.2, 1.3])
    assert estimate.point == pytest.approx(1.19722, abs=1e-5)
    assert estimate.lo == pytest.approx(0.97282, abs=1e-4)
    assert estimate.hi == pytest.approx(1.47336, abs=1e-4)
    assert estimate.log_sd == pytest.approx(0.0835513, abs=1e-6)
    assert estimate.block_ratios == (1.1, 1.2, 1.3)
    assert estimate.n_blocks == 3


def test_the_interval_is_a_95_percent_one():
    # Pins the level: t(0.975, 4 df) = 2.7764 and t(0.975, 9 df) = 2.2622 (t table).
    assert intervals.CONFIDENCE == 0.95
    assert intervals.t_quantile(0.95, 4) == pytest.approx(2.7764, abs=1e-4)
    assert intervals.t_quantile(0.95, 9) == pytest.approx(2.2622, abs=1e-4)
    # Two blocks 1.0 and 1.2: logs 0 and 0.18232, mean 0.09116, sd 0.12892;
    # t(0.975, 1) = 12.706: half-width 12.706 * 0.12892 / sqrt(2) = 1.15830.
    two = intervals.block_interval([1.0, 1.2])
    assert two.lo == pytest.approx(math.exp(0.09116 - 1.15830), abs=1e-4)
    assert two.hi == pytest.approx(math.exp(0.09116 + 1.15830), abs=1e-3)


def test_block_interval_edges():
    assert intervals.block_interval([]).point is None
    assert intervals.block_interval([]).note == "no block with a ratio"
    one = intervals.block_interval([1.25])
    assert (one.point, one.lo, one.hi, one.log_sd) == (1.25, None, None, None)
    assert one.note == "one block, no interval"
    same = intervals.block_interval([2.0, 2.0, 2.0])
    assert (same.point, same.lo, same.hi) == pytest.approx((2.0, 2.0, 2.0))
    with pytest.raises(ValueError, match="positive and finite"):
        intervals.block_interval([1.0, 0.0])
    with pytest.raises(ValueError, match="positive and finite"):
        intervals.block_interval([1.0, math.inf])


def test_blocks_to_settle():
    # Mean log ratio 0.1 (point e^0.1 = 1.105), sd 0.1 between blocks. To call it faster the
    # half-width t(n-1) * 0.1 / sqrt(n) must drop below 0.1: t(n-1) < sqrt(n), first at
    # n = 7 (t(6) = 2.447 < 2.646; at n = 6, t(5) = 2.571 > 2.449).
    estimate = intervals.RatioEstimate(math.exp(0.1), 0.9, 1.3, (1.0, 1.1, 1.2), 0.1)
    assert intervals.blocks_to_settle(estimate, 0.02) == 7
    # At no effect (point 1) with sd 0.05 and a 10 % margin: log(1.1) = 0.09531 of room,
    # t(n-1) * 0.05 / sqrt(n) < 0.09531 first at n = 4 (t(3) = 3.182: 0.0796).
    flat = intervals.RatioEstimate(1.0, 0.9, 1.1, (0.95, 1.0, 1.05), 0.05)
    assert intervals.blocks_to_settle(flat, 0.10) == 4
    # Hopeless within the cap, and undefined without a spread.
    assert intervals.blocks_to_settle(intervals.RatioEstimate(1.001, 0.5, 2.0, (0.5, 1.0, 2.0), 0.7), 0.01) is None
    assert intervals.blocks_to_settle(intervals.block_interval([1.1]), 0.02) is None


def test_blocks_to_settle_up_to_the_cap_of_99():
    # Point e^0.2, log sd 1.0 between blocks; the room is 0.2 (calling it faster). The
    # half-width t(n-1) * 1.0 / sqrt(n), t from the table:
    #   n = 98: 1.98472 / 9.89949 = 0.200487 > 0.2
    #   n = 99: 1.98447 / 9.94987 = 0.199446 < 0.2   -> 99 blocks
    #   n = 100: 1.98422 / 10     = 0.198422
    assert intervals.blocks_to_settle(intervals.RatioEstimate(math.exp(0.2), 0.5, 2.0, (1.0,) * 3, 1.0), 0.02) == 99
    # With room 0.199 it would take 100 blocks: beyond the cap.
    assert intervals.blocks_to_settle(intervals.RatioEstimate(math.exp(0.199), 0.5, 2.0, (1.0,) * 3, 1.0), 0.02) is None


def test_blocks_to_settle_counts_the_blocks_already_run():
    # Two blocks 1.10 and 1.11: logs 0.0953102 and 0.1043600, mean 0.0998351, sd
    # 0.0090498 / sqrt(2) = 0.0063992; at n = 2 the half-width is already
    # 12.7062 * 0.0063992 / 1.41421 = 0.057494 < 0.0998351: 2 blocks settle it.
    assert intervals.blocks_to_settle(intervals.block_interval([1.10, 1.11]), 0.02) == 2


def test_blocks_to_settle_an_interval_that_would_touch_one_is_not_settled():
    # sd 0.017 over 3 blocks: half-width t(2) * 0.017 / sqrt(3) = 4.30265 * 0.017 / 1.73205
    # = 0.042230. With the point e^0.042230 the interval would reach exactly 1, which is not
    # above 1 (classify: inconclusive), so 3 blocks do not settle it; 4 do:
    # t(3) * 0.017 / 2 = 3.18245 * 0.0085 = 0.027051 < 0.042230.
    half = intervals.t_quantile(0.95, 2) * 0.017 / math.sqrt(3)
    assert half == pytest.approx(0.042230, abs=1e-6)
    point = math.exp(half)
    assert math.log(point) == half  # an exact tie in floating point
    assert intervals.blocks_to_settle(intervals.RatioEstimate(point, 1.0, 1.09, (1.0,) * 3, 0.017), 0.02) == 4
