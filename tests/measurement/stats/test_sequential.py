"""The primary cells' decisions (experiments/measurement/stats/sequential.py) on hand-computed cases.

With 3 blocks (2 degrees of freedom) Student's t has a closed form: the two-sided p-value of
t is 1 - t / sqrt(t² + 2), and its 95 % quantile (one side of the 90 % interval) is 2.920.
Block log ratios of the form [m - d, m, m + d] have mean m and standard deviation d, so
t = m / (d / sqrt(3)).
"""

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from experiments.measurement.stats import sequential
from experiments.measurement.stats.intervals import RatioEstimate
from experiments.measurement.stats.sequential import Design, PrimaryCell, _holm_calls, _Look, decide, nominal_level

FIXED_3 = Design(max_blocks=3, sequential=False, margin=0.02, worthwhile_gain=0.05)


def blocks(*logs: float) -> dict[int, float]:
    """{block: ratio} from block log ratios, blocks numbered from 1."""
    return {block: math.exp(value) for block, value in enumerate(logs, start=1)}


def p_two_df(m: float, d: float) -> float:
    t = abs(m) / (d / math.sqrt(3))
    return 1 - t / math.sqrt(t * t + 2)


def outcomes(decisions) -> dict:
    return {decision.key: decision.outcome for decision in decisions}


# ---------------------------------------------------------------- the boundary


def test_one_look_is_tested_at_alpha_itself():
    assert nominal_level(0.05, (3,)) == 0.05
    assert Design(max_blocks=8, sequential=False, margin=0.02, worthwhile_gain=0.05).looks == (8,)


def test_a_sequential_design_looks_after_every_block_from_the_third():
    assert Design(max_blocks=6, sequential=True, margin=0.02, worthwhile_gain=0.05).looks == (3, 4, 5, 6)
    assert Design(max_blocks=3, sequential=True, margin=0.02, worthwhile_gain=0.05).looks == (3,)
    # Fewer than 3 blocks: no look, so no word (two blocks give one degree of freedom).
    assert Design(max_blocks=2, sequential=True, margin=0.02, worthwhile_gain=0.05).looks == ()
    assert Design(max_blocks=2, sequential=False, margin=0.02, worthwhile_gain=0.05).looks == ()


def test_the_pocock_level_lies_between_bonferroni_over_the_looks_and_no_adjustment():
    # Looks after 3..10 blocks are strongly correlated, so the level is far above 0.05 / 8.
    levels = sequential.look_levels(0.05, tuple(range(3, 11)), None)
    assert len(set(levels)) == 1  # one level for every look
    assert 0.05 / 8 < levels[0] < 0.05
    # Pocock's constant for 8 looks of a normal statistic is 0.0117 (Jennison & Turnbull,
    # table 2.1); the t statistics' few degrees of freedom at the first looks make it a little larger.
    assert levels[0] == pytest.approx(0.0122, abs=0.0008)


def test_the_spending_boundary_is_strict_first_and_near_alpha_last():
    looks = tuple(range(3, 11))
    levels = sequential.look_levels(0.05, looks, 3.0)
    assert list(levels) == sorted(levels)  # each look less strict than the one before
    pocock = sequential.look_levels(0.05, looks, None)[0]
    assert levels[0] < pocock / 5  # after 3 of 10 blocks: (3/10)^3 = 2.7 % of alpha spent
    assert pocock < levels[-1] < 0.05  # the last look: close to a single look's 5 %
    # The default design uses it; None is Pocock's.
    assert Design(max_blocks=10, sequential=True, margin=0.02, worthwhile_gain=0.07).spending == 3.0
    assert nominal_level(0.05, looks, 10, 3.0) == levels[-1]
    assert nominal_level(0.05, looks, 3, 3.0) == levels[0]


def _fresh_calls(levels: tuple[float, ...], looks: tuple[int, ...]) -> np.ndarray:
    """Fresh simulated null experiments (another seed than the calibration's): for each, the
    first look at which its t-test p-value is within the look's level (0: none)."""
    draws = np.random.default_rng(7).standard_normal((40_000, max(looks)))
    first = np.zeros(len(draws), dtype=int)
    for n, level in zip(looks, levels, strict=True):
        t = draws[:, :n].mean(axis=1) / (draws[:, :n].std(axis=1, ddof=1) / math.sqrt(n))
        first[(first == 0) & (2 * scipy_stats.t.sf(np.abs(t), n - 1) <= level)] = n
    return first


def test_the_level_holds_the_chance_of_any_false_call_at_alpha_on_fresh_paths():
    # At no effect, a call at any of the looks 3..8 happens in 5 % of experiments.
    looks = tuple(range(3, 9))
    assert (_fresh_calls(sequential.look_levels(0.05, looks, None), looks) > 0).mean() == pytest.approx(0.05, abs=0.004)
    naive = _fresh_calls((0.05,) * len(looks), looks)
    assert (naive > 0).mean() > 0.12  # looking after every block at 5 % calls far more often


def test_the_spending_boundary_spends_alpha_as_its_function_says_on_fresh_paths():
    # By the look after n of 8 blocks, 0.05 · (n / 8)^3 of the null experiments were called.
    looks = tuple(range(3, 9))
    first = _fresh_calls(sequential.look_levels(0.05, looks, 3.0), looks)
    for n in looks:
        assert ((first > 0) & (first <= n)).mean() == pytest.approx(0.05 * (n / 8) ** 3, abs=0.003)


# ---------------------------------------------------------------- Holm's step-down


def _looks(*p_values: float) -> dict:
    return {index: _Look(RatioEstimate(1.1, None, None), p, 3) for index, p in enumerate(p_values)}


def test_holm_calls_down_the_ranked_p_values_while_each_is_within_alpha_over_those_left():
    # 0.001 <= 0.05/3, 0.02 <= 0.05/2, 0.04 <= 0.05: all three (Bonferroni would call one).
    assert set(_holm_calls(_looks(0.04, 0.001, 0.02), 3, FIXED_3)) == {0, 1, 2}
    # 0.001 <= 0.05/3, then 0.03 > 0.05/2 stops the step-down: 0.04 is not tested.
    assert set(_holm_calls(_looks(0.04, 0.001, 0.03), 3, FIXED_3)) == {1}
    # Nothing within 0.05/3: nothing called, even at 0.02 and 0.03.
    assert _holm_calls(_looks(0.02, 0.03, 0.04), 3, FIXED_3) == {}


# ---------------------------------------------------------------- one look, hand-computed


def test_a_fixed_design_calls_faster_with_the_closed_form_p_value_and_shows_the_adjusted_interval():
    faster = PrimaryCell("a", blocks(0.10, 0.12, 0.14))  # t = 10.39, p = 0.0091
    null = PrimaryCell("b", blocks(-0.05, 0.0, 0.05))  # p = 1
    decisions = decide([faster, null], FIXED_3, blocks_run=3, final=True)

    assert decisions[0].p_value == pytest.approx(p_two_df(0.12, 0.02), rel=1e-6)
    assert p_two_df(0.12, 0.02) == pytest.approx(0.00913, abs=1e-5)
    assert outcomes(decisions) == {"a": "faster", "b": "inconclusive"}
    # Called at 0.05 / 2 (two cells): the interval shown is the 97.5 % one, which excludes 1.
    assert decisions[0].confidence == pytest.approx(0.975)
    half = scipy_stats.t.ppf(1 - 0.025 / 2, 2) * 0.02 / math.sqrt(3)
    assert decisions[0].estimate.lo == pytest.approx(math.exp(0.12 - half))
    assert decisions[0].estimate.hi == pytest.approx(math.exp(0.12 + half))
    assert decisions[0].blocks == 3


def test_a_cell_within_alpha_alone_is_not_called_when_the_family_is_larger():
    # p = 0.0351 (t = 5.196): within 0.05 alone, not within 0.05 / 2 beside a null cell.
    cell = PrimaryCell("a", blocks(0.02, 0.03, 0.04))
    null = PrimaryCell("b", blocks(-0.05, 0.0, 0.05))
    assert p_two_df(0.03, 0.01) == pytest.approx(0.0351, abs=1e-4)
    assert outcomes(decide([cell], FIXED_3, blocks_run=3, final=True)) == {"a": "faster"}
    assert outcomes(decide([cell, null], FIXED_3, blocks_run=3, final=True))["a"] != "faster"


def test_equivalent_when_the_tost_interval_lies_inside_the_margin():
    # 90 % interval: ±2.920 × 0.001 / √3 = ±0.0017 on the log scale, inside ±2 %.
    tight = PrimaryCell("a", blocks(-0.001, 0.0, 0.001))
    decision = decide([tight], FIXED_3, blocks_run=3, final=True)[0]
    assert decision.outcome == "equivalent"
    lo, hi = decision.equivalence_interval
    half = 2.920 * 0.001 / math.sqrt(3)
    assert lo == pytest.approx(math.exp(-half), abs=2e-5)
    assert hi == pytest.approx(math.exp(half), abs=2e-5)


def test_not_worth_it_when_the_upper_end_lies_below_the_smallest_worthwhile_gain():
    # mean -0.02, sd 0.02: 90 % interval exp(-0.02 ± 0.0337) = [0.948, 1.014]: not inside ±2 %,
    # but below 1.05; and p = 0.225, so not slower either.
    cell = PrimaryCell("a", blocks(-0.04, -0.02, 0.0))
    decision = decide([cell], FIXED_3, blocks_run=3, final=True)[0]
    assert decision.outcome == "not worth it"
    assert decision.equivalence_interval[1] == pytest.approx(math.exp(-0.02 + 2.920 * 0.02 / math.sqrt(3)), abs=1e-4)
    wider = PrimaryCell("b", blocks(-0.03, 0.0, 0.03))  # [0.951, 1.052]: reaches past 1.05
    assert decide([wider], FIXED_3, blocks_run=3, final=True)[0].outcome == "inconclusive"


def test_a_blocked_cell_keeps_its_reason_and_leaves_the_family():
    faster = PrimaryCell("a", blocks(0.02, 0.03, 0.04))  # p = 0.0351
    blocked = PrimaryCell("b", blocks(0.5, 0.5, 0.5), blocked="stream distorted")
    decisions = decide([faster, blocked], FIXED_3, blocks_run=3, final=True)
    # The blocked cell is no hypothesis: the other is tested at the whole alpha.
    assert outcomes(decisions) == {"a": "faster", "b": "stream distorted"}


# ---------------------------------------------------------------- looks over the blocks


SEQ_5 = Design(max_blocks=5, sequential=True, margin=0.02, worthwhile_gain=0.05)


def test_open_while_blocks_may_follow_then_inconclusive_at_the_maximum():
    cell = PrimaryCell("a", blocks(-0.08, 0.0, 0.08, 0.06, -0.06))
    assert decide([cell], SEQ_5, blocks_run=3, final=False)[0].outcome == "open"
    assert decide([cell], SEQ_5, blocks_run=4, final=False)[0].outcome == "open"
    assert decide([cell], SEQ_5, blocks_run=5, final=False)[0].outcome == "inconclusive"
    # Stopped early (cancelled, or the budget): what is open ends inconclusive.
    assert decide([cell], SEQ_5, blocks_run=4, final=True)[0].outcome == "inconclusive"
    assert decide([cell], SEQ_5, blocks_run=2, final=True)[0].outcome == "too few blocks"


def test_a_cell_called_at_a_look_keeps_its_word_and_the_blocks_it_rests_on():
    level = nominal_level(0.05, SEQ_5.looks, 3, SEQ_5.spending)
    # Three tight blocks well above 1, then two that would pull the mean back to 1.
    cell = PrimaryCell("a", blocks(0.20, 0.21, 0.22, -0.6, -0.6))
    assert p_two_df(0.21, 0.01) < level
    decision = decide([cell], SEQ_5, blocks_run=5, final=True)[0]
    assert (decision.outcome, decision.blocks) == ("faster", 3)
    assert decision.estimate.n_blocks == 3


def test_a_call_frees_its_share_of_alpha_for_the_cells_left_at_later_looks():
    # The levels at the second look (after 4 blocks), for two cells and for one.
    level_2 = nominal_level(0.05 / 2, SEQ_5.looks, 4, SEQ_5.spending)
    level_1 = nominal_level(0.05, SEQ_5.looks, 4, SEQ_5.spending)
    strong = PrimaryCell("a", blocks(0.20, 0.21, 0.22))
    # A cell whose p-value after 4 blocks lies between the two levels: called only because
    # the first cell's call at the first look left it alone in the family.
    logs = [0.02, 0.055, 0.035, 0.05]
    t = np.mean(logs) / (np.std(logs, ddof=1) / 2)
    p4 = 2 * scipy_stats.t.sf(t, 3)
    assert level_2 < p4 <= level_1
    weaker = PrimaryCell("b", blocks(*logs))
    decisions = decide([strong, weaker], SEQ_5, blocks_run=4, final=False)
    assert outcomes(decisions) == {"a": "faster", "b": "faster"}
    assert decisions[1].blocks == 4
    assert decisions[1].confidence == pytest.approx(1 - level_1)
    # Beside a cell that is not called, the same cell stays open: it is tested at alpha / 2.
    null = PrimaryCell("a", blocks(-0.05, 0.0, 0.05, 0.0))
    assert outcomes(decide([null, weaker], SEQ_5, blocks_run=4, final=False))["b"] == "open"


def test_the_repeated_looks_make_each_look_stricter_than_a_single_one():
    # p = 0.0351 is called by a fixed 3-block design but not at the first of three looks.
    cell = PrimaryCell("a", blocks(0.02, 0.03, 0.04))
    assert decide([cell], FIXED_3, blocks_run=3, final=True)[0].outcome == "faster"
    assert decide([cell], SEQ_5, blocks_run=3, final=False)[0].outcome == "open"
    assert nominal_level(0.05, SEQ_5.looks, 3, SEQ_5.spending) < p_two_df(0.03, 0.01)


def test_more_blocks_are_needed_while_a_cell_is_open():
    settled = PrimaryCell("a", blocks(0.20, 0.21, 0.22))
    still = PrimaryCell("b", blocks(-0.05, 0.0, 0.05))
    assert sequential.needs_another_block(decide([settled, still], SEQ_5, blocks_run=3, final=False))
    assert not sequential.needs_another_block(decide([settled], SEQ_5, blocks_run=3, final=False))


# ---------------------------------------------------------------- edges, hand-computed


def t_two_df(q: float) -> float:
    """Student's t quantile with 2 degrees of freedom: F(t) = 1/2 + t / (2 sqrt(t² + 2))."""
    a = 2 * q - 1
    return a * math.sqrt(2 / (1 - a * a))


def test_a_cell_below_one_is_called_slower():
    cell = PrimaryCell("a", blocks(-0.14, -0.12, -0.10))  # p = 0.0091, as its mirror image
    decision = decide([cell], FIXED_3, blocks_run=3, final=True)[0]
    assert (decision.outcome, decision.settled, decision.open) == ("slower", True, False)
    assert decision.p_value == pytest.approx(p_two_df(-0.12, 0.02), rel=1e-6)


def test_holm_calls_a_p_value_equal_to_its_level():
    # With one look the level is alpha / h exactly: 0.025 for two cells, then 0.05 for one.
    assert set(_holm_calls(_looks(0.05, 0.025), 2, FIXED_3)) == {0, 1}
    assert _holm_calls(_looks(0.05, 0.025), 2, FIXED_3)[1] == ("faster", 0.025)


def test_identical_block_ratios_give_a_p_value_of_zero_or_one():
    # No spread between blocks: away from 1 the t statistic is infinite (p = 0), at 1 it is 0/0,
    # taken as no evidence (p = 1); the interval is the point itself.
    away = decide([PrimaryCell("a", {1: 1.1, 2: 1.1, 3: 1.1})], FIXED_3, blocks_run=3, final=True)[0]
    assert (away.outcome, away.p_value) == ("faster", 0.0)
    assert away.estimate.lo == away.estimate.hi == pytest.approx(1.1)
    at_one = decide([PrimaryCell("a", {1: 1.0, 2: 1.0, 3: 1.0})], FIXED_3, blocks_run=3, final=True)[0]
    assert (at_one.outcome, at_one.p_value, at_one.equivalence_interval) == ("equivalent", 1.0, (1.0, 1.0))


def test_a_blocked_cell_shows_its_95_percent_interval_over_the_blocks_run():
    blocked = PrimaryCell("b", blocks(0.4, 0.5, 0.6), blocked="failures differ")
    decision = decide([blocked], FIXED_3, blocks_run=3, final=True)[0]
    assert (decision.outcome, decision.confidence, decision.blocks) == ("failures differ", 0.95, 3)
    assert decision.p_value == pytest.approx(p_two_df(0.5, 0.1), rel=1e-6)
    half = t_two_df(0.975) * 0.1 / math.sqrt(3)  # 4.303 × 0.1 / √3
    assert decision.estimate.hi == pytest.approx(math.exp(0.5 + half))


def test_the_cells_left_after_a_call_show_the_level_the_next_call_would_need():
    # "a" is called at 0.05 / 2; the one cell left would be called at 0.05: the equivalent
    # cell's interval and the open cell's are the 95 % ones.
    faster = PrimaryCell("a", blocks(0.10, 0.12, 0.14))
    tight = PrimaryCell("b", blocks(-0.001, 0.0, 0.001))
    null = PrimaryCell("c", blocks(-0.05, 0.0, 0.05))
    equivalent = decide([faster, tight], FIXED_3, blocks_run=3, final=True)[1]
    assert (equivalent.outcome, equivalent.confidence) == ("equivalent", pytest.approx(0.95))
    assert equivalent.estimate.hi == pytest.approx(math.exp(t_two_df(0.975) * 0.001 / math.sqrt(3)))
    inconclusive = decide([faster, null], FIXED_3, blocks_run=3, final=True)[1]
    assert (inconclusive.outcome, inconclusive.confidence) == ("inconclusive", pytest.approx(0.95))
    # Nothing called: each of the two would need 0.05 / 2.
    assert decide([null, tight], FIXED_3, blocks_run=3, final=True)[0].confidence == pytest.approx(0.975)


def test_a_fixed_design_stopped_short_takes_its_one_look_at_the_blocks_it_has():
    fixed_5 = Design(max_blocks=5, sequential=False, margin=0.02, worthwhile_gain=0.05)
    cell = PrimaryCell("a", blocks(0.10, 0.12, 0.14))  # p = 0.0091 after 3 blocks
    assert decide([cell], fixed_5, blocks_run=3, final=True)[0].outcome == "faster"
    assert decide([cell], fixed_5, blocks_run=3, final=False)[0].outcome == "open"
    assert decide([cell], fixed_5, blocks_run=2, final=True)[0].outcome == "too few blocks"


def test_the_replicate_family_has_no_futility_stop():
    cell = PrimaryCell("a", blocks(-0.04, -0.02, 0.0))  # not worth it as a candidate
    assert decide([cell], FIXED_3, blocks_run=3, final=True, futility=False)[0].outcome == "inconclusive"


def test_a_two_block_design_gives_no_word_but_shows_its_intervals():
    # t with 1 degree of freedom is Cauchy: its q quantile is tan(π (q - 1/2)). Two blocks with
    # log ratios 0 and 0.002: mean 0.001, sd 0.002 / √2, so the half-width is t × 0.001.
    fixed_2 = Design(max_blocks=2, sequential=False, margin=0.02, worthwhile_gain=0.05)
    tight = [PrimaryCell(key, blocks(0.0, 0.002)) for key in ("a", "b")]
    decisions = decide(tight, fixed_2, blocks_run=2, final=True)
    # Inside the margin, but on one degree of freedom: too few blocks for a word.
    assert outcomes(decisions) == {"a": "too few blocks", "b": "too few blocks"}
    assert outcomes(decide(tight, fixed_2, blocks_run=2, final=False)) == {"a": "too few blocks", "b": "too few blocks"}
    lo, hi = decisions[0].equivalence_interval  # 90 %: t = tan(0.45 π) = 6.314
    assert (lo, hi) == pytest.approx((math.exp(0.001 - 6.314e-3), math.exp(0.001 + 6.314e-3)), abs=2e-6)
    # Two cells, nothing called: the interval shown is the 97.5 % one, t = tan(0.4875 π) = 25.45.
    assert decisions[0].confidence == pytest.approx(0.975)
    assert decisions[0].estimate.hi == pytest.approx(math.exp(0.001 + math.tan(0.4875 * math.pi) * 0.001))


def test_a_cell_with_fewer_than_two_blocks_has_a_point_and_no_test():
    one = decide([PrimaryCell("a", blocks(0.10))], SEQ_5, blocks_run=1, final=False)[0]
    assert (one.outcome, one.blocks, one.p_value, one.equivalence_interval) == ("open", 1, None, None)
    assert one.estimate.point == pytest.approx(math.exp(0.10))
    empty = decide([PrimaryCell("b", {}, blocked="no data")], FIXED_3, blocks_run=3, final=True)[0]
    assert (empty.outcome, empty.blocks, empty.p_value, empty.estimate.point) == ("no data", 0, None, None)


def test_calls_at_different_looks_all_leave_the_family():
    # "a" is called at the first look, "b" only at the second (p = 0.044 after 3 blocks, 0.007
    # after 4): the open cell "c" is then alone, as when both are called at the first look.
    a = PrimaryCell("a", blocks(0.20, 0.21, 0.22, 0.21))
    b_later = PrimaryCell("b", blocks(0.05, 0.11, 0.08, 0.08))
    b_at_once = PrimaryCell("b", blocks(0.20, 0.21, 0.22, 0.21))
    c = PrimaryCell("c", blocks(-0.05, 0.0, 0.05, 0.0))
    later = decide([a, b_later, c], SEQ_5, blocks_run=4, final=False)
    assert [(d.outcome, d.blocks) for d in later] == [("faster", 3), ("faster", 4), ("open", 4)]
    at_once = decide([a, b_at_once, c], SEQ_5, blocks_run=4, final=False)
    assert [(d.outcome, d.blocks) for d in at_once] == [("faster", 3), ("faster", 3), ("open", 4)]
    # Alone, "c" would be called at alpha itself; beside another open cell at alpha / 2, whose
    # interval is wider.
    two_open = decide([c, PrimaryCell("d", c.ratios)], SEQ_5, blocks_run=4, final=False)[0]
    assert later[2].confidence == at_once[2].confidence < two_open.confidence


# ---------------------------------------------------------------- the look's own level


def test_a_look_the_design_does_not_have_uses_the_last_look_s_level():
    levels = sequential.look_levels(0.05, SEQ_5.looks, 3.0)
    assert levels[-2] != levels[-1]
    assert nominal_level(0.05, SEQ_5.looks, 7, 3.0) == levels[-1]
    assert nominal_level(0.05, SEQ_5.looks, None, 3.0) == levels[-1]
    assert nominal_level(0.05, (), None, 3.0) == 0.05  # no look at all: alpha itself


def test_the_equivalence_interval_is_at_the_look_s_own_level():
    # TOST at 5 % a side on the spending boundary: at the first of three looks the level is far
    # stricter than at the last, so the same three blocks give a wider interval there.
    logs = (-0.004, 0.0, 0.004)
    cell = PrimaryCell("a", blocks(*logs))
    first, last = sequential.look_levels(0.10, SEQ_5.looks, 3.0)[0], sequential.look_levels(0.10, SEQ_5.looks, 3.0)[-1]
    assert first < last / 3
    decision = decide([cell], SEQ_5, blocks_run=3, final=False)[0]
    half = scipy_stats.t.ppf(1 - first / 2, 2) * 0.004 / math.sqrt(3)
    assert decision.equivalence_interval == pytest.approx((math.exp(-half), math.exp(half)), rel=1e-9)
    assert decision.outcome == "equivalent"
    # Pocock's boundary (spending=None) would have used its constant level at that look.
    pocock = Design(max_blocks=5, sequential=True, margin=0.02, worthwhile_gain=0.05, spending=None)
    constant = sequential.look_levels(0.10, SEQ_5.looks, None)[0]
    half = scipy_stats.t.ppf(1 - constant / 2, 2) * 0.004 / math.sqrt(3)
    assert decide([cell], pocock, blocks_run=3, final=False)[0].equivalence_interval == pytest.approx(
        (math.exp(-half), math.exp(half)), rel=1e-9
    )


def test_a_cell_settled_or_open_shows_the_confidence_of_its_look():
    tight = PrimaryCell("a", blocks(-0.001, 0.0, 0.001))  # equivalent at the first look
    settled = decide([tight], SEQ_5, blocks_run=3, final=False)[0]
    assert (settled.outcome, settled.blocks) == ("equivalent", 3)
    assert settled.confidence == pytest.approx(1 - nominal_level(0.05, SEQ_5.looks, 3, 3.0))
    wide = PrimaryCell("b", blocks(-0.08, 0.0, 0.08, 0.06))  # open after the second look
    still = decide([wide], SEQ_5, blocks_run=4, final=False)[0]
    assert still.outcome == "open"
    assert still.confidence == pytest.approx(1 - nominal_level(0.05, SEQ_5.looks, 4, 3.0))
    assert nominal_level(0.05, SEQ_5.looks, 4, 3.0) != nominal_level(0.05, SEQ_5.looks, 5, 3.0)
