"""experiments/measurement/stats/break_even.py against hand-computed cases. No database."""

import pytest

from experiments.measurement.stats import break_even, intervals


def _estimate(point, lo, hi):
    return intervals.RatioEstimate(point, lo, hi, (point,) * 3, 0.01)


def _level(level, point, lo, hi):
    """A level whose call follows its interval, as verdicts.classify's would: faster above 1, slower below."""
    return break_even.LevelCall(level, _estimate(point, lo, hi), lo > 1, hi < 1)


def test_break_even_interpolates_on_log_concurrency():
    # 1.5x at 1, 0.75x at 4. In (log c, log s): log 1.5 = 0.405465, log 0.75 = -0.287682;
    # s = 1 at a fraction 0.405465 / 0.693147 = 0.584963 of the way from log 1 to log 4,
    # i.e. c = 4 ** 0.584963 = 2.25.
    # Lower bounds 1.2 at 1, 0.6 at 4: 4 ** (0.182322 / 0.693147) = 4 ** 0.263034 = 1.44.
    # Upper bounds 1.8 at 1, 0.95 at 4: 4 ** (0.587787 / 0.639080) = 4 ** 0.919740 = 3.58
    rows = [_level(4, 0.75, 0.6, 0.95), _level(1, 1.5, 1.2, 1.8)]
    result = break_even.break_even(rows)
    assert result.state == break_even.CROSSES
    assert result.level == pytest.approx(2.25, abs=1e-6)
    assert result.lo == pytest.approx(1.44, abs=1e-2)
    assert result.hi == pytest.approx(3.58, abs=1e-2)
    assert result.reason == ""


def test_break_even_between_levels_that_do_not_start_at_one():
    # 1.5x at 2, 0.75x at 8: s = 1 at a fraction 0.405465 / 0.693147 = 0.584963 of the way
    # from log 2 to log 8, i.e. c = 2 * 4 ** 0.584963 = 2 * 2.25 = 4.5.
    rows = [_level(2, 1.5, 1.2, 1.8), _level(8, 0.75, 0.6, 0.95)]
    assert break_even.break_even(rows).level == pytest.approx(4.5, abs=1e-6)


def test_a_crossing_needs_a_level_shown_slower_above_one_shown_faster():
    # The points cross (1.5 at 1, 0.9 at 4) but the upper bound at 4 is above 1: not slower,
    # so the break-even may lie anywhere above 1 and is not settled (it was "crosses" with an
    # open upper end when the points alone decided).
    rows = [_level(1, 1.5, 1.2, 1.8), _level(4, 0.9, 0.7, 1.1)]
    assert break_even.break_even(rows) == break_even.BreakEven(break_even.NOT_SETTLED, reason="faster at 1; open at 4")
    # A lower bound of exactly 1 at the lowest level is not above 1: that level is open too.
    rows = [_level(1, 1.5, 1.0, 1.8), _level(4, 0.75, 0.6, 0.95)]
    assert break_even.break_even(rows) == break_even.BreakEven(break_even.NOT_SETTLED, reason="slower at 4; open at 1")


def test_the_crossing_lies_between_the_faster_level_and_the_slower_one_above_it():
    # Points 1.2 at 1 (open), 0.95 at 2 (open), 1.5 at 4 (faster), 0.5 at 16 (slower). The
    # points first fall to 1 between 1 and 2, but nothing is shown there: the break-even is
    # the fall from 4 to 16, at log c = log 4 + log 4 * log 1.5 / (log 1.5 - log 0.5)
    # = 1.386294 + 1.386294 * 0.405465 / 1.098612 = 1.897934, c = 6.6721.
    # Lower bounds 1.2 at 4, 0.4 at 16: 1.386294 + 1.386294 * 0.182322 / 1.098612 = 1.616361, c = 5.0347.
    # Upper bounds 1.8 at 4, 0.6 at 16: 1.386294 + 1.386294 * 0.587787 / 1.098612 = 2.127997, c = 8.3980.
    rows = [_level(1, 1.2, 0.9, 1.6), _level(2, 0.95, 0.7, 1.3), _level(4, 1.5, 1.2, 1.8), _level(16, 0.5, 0.4, 0.6)]
    result = break_even.break_even(rows)
    assert result.state == break_even.CROSSES
    assert (result.level, result.lo, result.hi) == pytest.approx((6.6721, 5.0347, 8.3980), abs=1e-4)


def test_break_even_pays_everywhere_only_when_faster_at_every_level():
    faster = [_level(1, 1.5, 1.2, 1.8), _level(4, 1.3, 1.1, 1.5)]
    assert break_even.break_even(faster).state == break_even.PAYS_EVERYWHERE
    # Above 1 at every level without being shown to be at 4: not settled.
    unclear = [_level(1, 1.5, 1.2, 1.8), _level(4, 1.02, 0.9, 1.1)]
    assert break_even.break_even(unclear) == break_even.BreakEven(
        break_even.NOT_SETTLED, reason="faster at 1; open at 4"
    )


def test_pays_nowhere_needs_every_level_shown_slower():
    # The demo's n-gram arm: 0.51x [0.07, 3.57] at 1. A point at most 1 everywhere said
    # "pays at no measured level"; with an interval reaching above 1 it is open.
    demo = [_level(1, 0.51, 0.07, 3.57), _level(4, 0.8, 0.6, 0.95)]
    assert break_even.break_even(demo) == break_even.BreakEven(break_even.NOT_SETTLED, reason="slower at 4; open at 1")
    never = [_level(1, 0.9, 0.8, 0.98), _level(4, 0.7, 0.6, 0.95)]
    assert break_even.break_even(never) == break_even.BreakEven(break_even.PAYS_NOWHERE)
    # Inside the margin is not "does not pay": an upper bound of 1.01 does not exclude a gain.
    equivalent = [_level(1, 0.99, 0.98, 1.01), _level(4, 0.7, 0.6, 0.95)]
    assert break_even.break_even(equivalent).state == break_even.NOT_SETTLED


def test_the_calls_come_from_the_verdicts_not_the_intervals_alone():
    # A level whose interval lies above 1 but got no verdict (e.g. failures differ) is open.
    rows = [break_even.LevelCall(1, _estimate(1.5, 1.2, 1.8), False, False), _level(4, 0.75, 0.6, 0.95)]
    assert break_even.break_even(rows) == break_even.BreakEven(break_even.NOT_SETTLED, reason="slower at 4; open at 1")


def test_break_even_is_not_estimable_with_one_level_or_without_an_interval():
    assert break_even.break_even([_level(1, 1.5, 1.2, 1.8)]) == break_even.BreakEven(
        break_even.NOT_ESTIMABLE, reason="fewer than two levels"
    )
    one_block = [
        break_even.LevelCall(1, intervals.block_interval([1.5]), False, False),
        break_even.LevelCall(4, intervals.block_interval([0.8]), False, False),
    ]
    assert break_even.break_even(one_block) == break_even.BreakEven(
        break_even.NOT_ESTIMABLE, reason="no interval at 1, 4"
    )
