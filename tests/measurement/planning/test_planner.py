"""The break-even search's rules (experiments/measurement/planning/planner.py), on hand-computed cases."""

import pytest

from experiments.measurement.planning import planner
from experiments.measurement.planning.planner import SearchRange, Word
from experiments.measurement.stats.sequential import EQUIVALENT, FASTER, NOT_WORTH_IT, OPEN, SLOWER

DOUBLING = SearchRange(1, 64, 2.0)  # 1, 2, 4, 8, 16, 32, 64


def test_the_grid_spaces_levels_evenly_on_a_log_scale_within_the_resolution():
    assert DOUBLING.grid() == (1, 2, 4, 8, 16, 32, 64)
    # 64 = 1.5^10.26: 11 steps of 64^(1/11) = 1.459, rounded: 1, 1.46, 2.13, 3.11, 4.54, 6.62, 9.66, 14.1, 20.6,
    # 30.0, 43.8, 64 -> 1 and 1.46 both round to 1.
    assert SearchRange(1, 64, 1.5).grid() == (1, 2, 3, 5, 7, 10, 14, 21, 30, 44, 64)
    # 100 / 2 = 50 = 3^3.56: 4 steps of 50^(1/4) = 2.659: 2, 5.3, 14.1, 37.6, 100.
    assert SearchRange(2, 100, 3.0).grid() == (2, 5, 14, 38, 100)
    assert SearchRange(4, 4, 2.0).grid() == (4,)
    assert SearchRange(1, 64, 2.0).ends == (1, 64)


def test_a_range_or_resolution_that_makes_no_grid_is_refused():
    with pytest.raises(ValueError, match="range"):
        SearchRange(8, 4, 2.0)
    with pytest.raises(ValueError, match="range"):
        SearchRange(0, 4, 2.0)
    with pytest.raises(ValueError, match="resolution"):
        SearchRange(1, 4, 1.05)


def test_the_family_counts_the_ends_and_one_level_per_halving():
    # 7 levels: 6 gaps between the ends, halved in ceil(log2 6) = 3 steps.
    assert DOUBLING.family_size == 5
    assert SearchRange(1, 16, 2.0).family_size == 4  # 5 levels, 4 gaps: 2 steps
    assert SearchRange(1, 3, 2.0).family_size == 3  # 1, 2, 3: one step
    assert SearchRange(1, 2, 2.0).family_size == 2
    assert SearchRange(4, 4, 2.0).family_size == 1
    assert SearchRange(1, 64, 1.5).family_size == 6  # 11 levels, 10 gaps: 4 steps


def _words(**levels) -> dict[int, Word]:
    return {int(name[1:]): Word(*value) for name, value in levels.items()}


def test_the_bracket_is_the_last_level_paying_below_the_first_that_does_not():
    words = _words(l1=(FASTER, 1.5), l8=(FASTER, 1.1), l16=(NOT_WORTH_IT, 1.0), l64=(FASTER, 1.3))
    assert planner.bracket(words) == planner.Bracket(8, 16)
    # Open levels say nothing until they lean: the settled bracket skips them.
    words = _words(l1=(FASTER, 1.5), l8=(OPEN, 0.9), l64=(SLOWER, 0.7))
    assert planner.bracket(words) == planner.Bracket(1, 64)
    assert planner.bracket(words, leaning=True) == planner.Bracket(1, 8)
    assert planner.bracket(_words(l1=(EQUIVALENT, 1.0))) == planner.Bracket(None, 1)
    assert planner.bracket(_words(l1=(OPEN, None))) == planner.Bracket(None, None)


def test_the_state_from_the_settled_words():
    grid = DOUBLING.grid()
    found = planner.state_of(grid, _words(l1=(FASTER, 1.5), l8=(FASTER, 1.1), l16=(SLOWER, 0.9)))
    assert found == (planner.FOUND, planner.Bracket(8, 16))
    wide = planner.state_of(grid, _words(l1=(FASTER, 1.5), l16=(SLOWER, 0.9)))
    assert wide[0] == planner.SEARCHING
    assert planner.state_of(grid, _words(l1=(NOT_WORTH_IT, 1.02), l64=(OPEN, 0.8)))[0] == planner.PAYS_NOWHERE
    assert planner.state_of(grid, _words(l1=(FASTER, 1.5), l64=(FASTER, 1.2)))[0] == planner.PAYS_EVERYWHERE
    # The top of the range settled faster answers "up to which concurrency" whatever the levels below.
    assert planner.state_of(grid, _words(l1=(OPEN, 1.5), l64=(FASTER, 1.2)))[0] == planner.PAYS_EVERYWHERE
    assert planner.state_of(grid, _words(l1=(OPEN, 1.5), l64=(OPEN, 1.2)))[0] == planner.SEARCHING


def test_the_next_level_is_where_the_points_cross_1_inside_the_safeguard():
    grid = DOUBLING.grid()
    # ln c = ln 64 · ln 1.5 / ln(1.5 / 0.76) = 4.159 · 0.4055 / 0.6799 = 2.480, c = 11.9: nearer 16 (ln 2.773)
    # than 8 (ln 2.079); indices 0..6, the safeguard keeps 1.5..4.5: 16 (index 4) stays.
    assert planner.next_level(grid, _words(l1=(OPEN, 1.5), l64=(OPEN, 0.76))) == 16
    # A step: 1.3 at 1, 0.99 at 64 crosses at ln c = 4.159 · 0.2624 / 0.2724 = 4.006 (c = 55), nearest 32
    # (index 5); the safeguard caps the index at 4.5, and of 16 and 32, equally near, takes the lower.
    assert planner.next_level(grid, _words(l1=(FASTER, 1.3), l64=(EQUIVALENT, 0.99))) == 16
    # Points that do not cross (both above 1 while leaning: no bracket) place nothing.
    assert planner.next_level(grid, _words(l1=(OPEN, 1.3), l64=(OPEN, 1.1))) is None
    # Without both points the middle index: (0 + 6) / 2 = 3, level 8.
    assert planner.next_level(grid, _words(l1=(FASTER, None), l64=(SLOWER, 0.8))) == 8
    # An open level leaning paying moves the bracket up without waiting for its word: (8, 64), indices 3..6;
    # ln c = ln 8 + ln 8 · ln 1.1 / ln(1.1 / 0.8) = 2.079 + 2.079 · 0.0953 / 0.3185 = 2.701 (c = 14.9): 16.
    assert planner.next_level(grid, _words(l1=(FASTER, 1.5), l8=(OPEN, 1.1), l64=(SLOWER, 0.8))) == 16
    # A level inside the bracket still measured without a point yet (its runs failed): wait for it.
    assert planner.next_level(grid, _words(l1=(FASTER, 1.5), l8=(OPEN, None), l64=(SLOWER, 0.8))) is None
    # Neighbours: nothing between them.
    assert planner.next_level(grid, _words(l8=(FASTER, 1.1), l16=(SLOWER, 0.9))) is None


def test_the_plan_runs_the_open_levels_that_still_matter_and_adds_one():
    words = _words(l1=(FASTER, 1.5), l16=(OPEN, 1.05), l64=(SLOWER, 0.76), l2=(OPEN, 1.4))
    plan = planner.plan(DOUBLING, words, blocks_run=5, max_blocks=10)
    # 2 is below 1? No: the settled bracket is (1, 64), so 2 and 16 both still matter; 16 leans paying, so the
    # leaning bracket is (16, 64): 32 is placed (indices 4..6, middle 5).
    assert plan.state == planner.SEARCHING
    assert plan.run == {2, 16, 32}
    assert plan.added == 32


def test_settled_and_moot_levels_are_not_run_again():
    words = _words(l1=(OPEN, 1.5), l8=(FASTER, 1.1), l32=(OPEN, 0.8), l16=(SLOWER, 0.9))
    plan = planner.plan(DOUBLING, words, blocks_run=6, max_blocks=10)
    assert plan.state == planner.FOUND
    assert plan.run == frozenset()
    assert plan.done


def test_no_level_is_added_without_blocks_for_its_looks_or_past_the_family():
    words = _words(l1=(FASTER, 1.5), l64=(SLOWER, 0.76))
    assert planner.plan(DOUBLING, words, blocks_run=7, max_blocks=10).added == 16
    late = planner.plan(DOUBLING, words, blocks_run=8, max_blocks=10)
    assert (late.added, late.state, late.run) == (None, planner.NARROWED, frozenset())
    full = _words(l1=(FASTER, 1.5), l4=(FASTER, 1.2), l32=(SLOWER, 0.8), l64=(SLOWER, 0.76), l2=(FASTER, 1.3))
    assert planner.plan(DOUBLING, full, blocks_run=5, max_blocks=10).added is None  # 5 levels: the family's
    assert planner.plan(DOUBLING, words, blocks_run=0, max_blocks=10).added is None  # no block run: no points


def test_a_level_faster_above_the_bracket_is_reported():
    words = _words(l1=(FASTER, 1.5), l8=(FASTER, 1.1), l16=(SLOWER, 0.9), l64=(FASTER, 1.2))
    plan = planner.plan(DOUBLING, words, blocks_run=6, max_blocks=10)
    assert plan.state == planner.FOUND
    assert plan.faster_above == (64,)


def test_a_point_below_the_worthwhile_gain_leans_not_paying():
    grid = DOUBLING.grid()
    words = _words(l1=(FASTER, 1.3), l64=(OPEN, 1.03))
    # At 1 the point 1.03 leans paying: no bracket, nothing placed.
    assert planner.next_level(grid, words) is None
    # Leaning at 1.07 it does not: ln c = ln 64 · ln(1.3 / 1.07) / ln(1.3 / 1.03) = 4.159 · 0.1947 / 0.2328
    # = 3.478 (c = 32.4), index 5, inside the safeguard's 1.5-4.5? No: capped at 4.5, and of 16 and 32,
    # equally near, the lower.
    assert planner.next_level(grid, words, lean=1.07) == 16
    assert planner.plan(DOUBLING, words, blocks_run=1, max_blocks=10, lean=1.07).added == 16


def test_the_boundaries_of_the_rules_on_hand_computed_cases():
    assert SearchRange(1, 4, planner.MIN_RESOLUTION).grid()[0] == 1  # the least resolution is allowed
    # A point exactly at the lean leans not paying; the default lean is 1.
    assert Word(OPEN, 1.0).leans_stops()
    assert not Word(OPEN, 1.0).leans_pays()
    assert Word(OPEN, 1.07).leans_stops(1.07)
    leaning = _words(l1=(OPEN, 1.5), l8=(OPEN, 1.2), l64=(OPEN, 0.9))
    assert planner.bracket(leaning, leaning=True) == planner.Bracket(8, 64)
    # An open level below a settled faster one is moot, and one above the first not faster.
    words = _words(l1=(OPEN, 1.2), l4=(FASTER, 1.2), l16=(OPEN, 1.1))
    assert planner.plan(DOUBLING, words, blocks_run=8, max_blocks=10).run == {16}
    words = _words(l1=(OPEN, 1.2), l4=(SLOWER, 0.8), l16=(OPEN, 0.9))
    assert planner.plan(DOUBLING, words, blocks_run=8, max_blocks=10).run == {1}


def test_the_crossing_is_interpolated_at_the_lean():
    grid = DOUBLING.grid()
    # Lean 1.3, points 2.0 and 0.5: ln c = ln 64 · ln(2 / 1.3) / ln(2 / 0.5) = 4.159 · 0.4308 / 1.3863 = 1.292
    # (c = 3.6): index 2 (ln 4 = 1.386), inside the safeguard's 1.5-4.5.
    assert planner.next_level(grid, _words(l1=(OPEN, 2.0), l64=(OPEN, 0.5)), lean=1.3) == 4
    # The lower end's point exactly at the lean: no interpolation, the middle index (3).
    assert planner.next_level(grid, _words(l1=(FASTER, 1.07), l64=(SLOWER, 0.8)), lean=1.07) == 8
    # The upper end's point exactly at the lean: interpolated, the crossing at the upper end, capped at 4.5
    # and of 4 and 5 the lower: 16.
    assert planner.next_level(grid, _words(l1=(FASTER, 1.3), l64=(EQUIVALENT, 1.0))) == 16


def test_the_safeguard_keeps_the_step_out_of_the_bracket_s_outer_quarters():
    wide = SearchRange(1, 4096, 2.0).grid()  # 1, 2, 4, ..., 4096: indices 0-12
    # ln c = ln 4096 · ln 1.1 / ln(1.1 / 0.3) = 8.318 · 0.0953 / 1.2993 = 0.610 (c = 1.8): index 1, below the
    # safeguard's 12 / 4 = 3: index 3, level 8.
    assert planner.next_level(wide, _words(l1=(OPEN, 1.1), l4096=(OPEN, 0.3))) == 8
    # A bracket from index 2 (4) to 12: ln c = ln 4 + ln 1024 · ln 3 / ln(3 / 0.99) = 1.386 + 6.931 · 1.0986 /
    # 1.1087 = 8.254 (c = 3,850): index 11, above 12 - 10 / 4 = 9.5: of 9 and 10, the lower, 512.
    words = _words(l1=(FASTER, 3.5), l4=(FASTER, 3.0), l4096=(NOT_WORTH_IT, 0.99))
    assert planner.next_level(wide, words) == 512


def test_the_plan_keeps_its_bracket_and_the_levels_faster_above_it_while_searching():
    words = _words(l1=(FASTER, 1.5), l16=(SLOWER, 0.9), l64=(FASTER, 1.2))
    plan = planner.plan(DOUBLING, words, blocks_run=5, max_blocks=10)
    assert plan.state == planner.SEARCHING
    assert plan.settled == planner.Bracket(1, 16)
    assert plan.faster_above == (64,)
    done = planner.plan(DOUBLING, _words(l1=(NOT_WORTH_IT, 1.0)), blocks_run=5, max_blocks=10)
    assert done.settled == planner.Bracket(None, 1)
