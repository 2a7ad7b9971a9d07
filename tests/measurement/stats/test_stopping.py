"""Estimates conditional on where a sequential test stopped (experiments/measurement/stats/stopping.py).

One look is a normal mean cut at the call threshold: the conditional estimate is the truncated
normal's, in closed form. Two looks are checked against simulated paths.
"""

import math

import numpy as np
import pytest
from scipy import optimize, stats

from experiments.measurement.stats import stopping
from experiments.measurement.stats.stopping import DOWN, GO_ON, SETTLE, UP, LookBounds, Stopped

SD, BLOCKS, CALL = 0.055, 4, 0.09  # one block's sd, and the mean a call at 4 blocks had to pass
SE = SD / math.sqrt(BLOCKS)


def truncated(observed: float, quantile: float) -> float:
    """μ with P(mean ≥ observed | mean ≥ CALL) = 1 − quantile, for the mean ~ N(μ, SE)."""

    def gap(mu: float) -> float:
        upper = stats.norm.logsf((observed - mu) / SE) - stats.norm.logsf((CALL - mu) / SE)
        return 1 - math.exp(upper) - quantile

    return optimize.brentq(gap, -1, 1)


@pytest.mark.parametrize("observed", [0.10, 0.13, 0.2])
def test_one_look_is_the_truncated_normal(observed):
    estimate = stopping.stopped_estimate((LookBounds(BLOCKS, CALL),), UP, observed, SD)
    assert estimate.point == pytest.approx(truncated(observed, 0.5), abs=2e-4)
    assert estimate.lo == pytest.approx(truncated(observed, 0.975), abs=2e-4)
    assert estimate.hi == pytest.approx(truncated(observed, 0.025), abs=2e-4)


def test_far_past_the_threshold_it_is_the_plain_mean_and_interval():
    estimate = stopping.stopped_estimate((LookBounds(BLOCKS, CALL),), UP, 0.3, SD)
    assert estimate.point == pytest.approx(0.3, abs=1e-4)
    assert estimate.hi - estimate.lo == pytest.approx(2 * 1.96 * SE, abs=1e-3)


def test_just_past_the_threshold_it_is_far_below_the_plain_mean():
    estimate = stopping.stopped_estimate((LookBounds(BLOCKS, CALL),), UP, 0.092, SD)
    assert estimate.point < 0.0
    assert estimate.lo < estimate.point < estimate.hi < 0.092 + 2 * SE


def test_slower_mirrors_faster():
    up = stopping.stopped_estimate((LookBounds(BLOCKS, CALL),), UP, 0.12, SD)
    down = stopping.stopped_estimate((LookBounds(BLOCKS, CALL),), DOWN, -0.12, SD)
    assert (down.point, down.lo, down.hi) == pytest.approx((-up.point, -up.hi, -up.lo), abs=1e-6)


def test_the_spread_s_degrees_of_freedom_widen_the_interval_not_the_point():
    known = stopping.stopped_estimate((LookBounds(BLOCKS, CALL),), UP, 0.3, SD)
    estimated = stopping.stopped_estimate((LookBounds(BLOCKS, CALL),), UP, 0.3, SD, 5.0)
    assert estimated.point == pytest.approx(known.point)
    ratio = stats.t.ppf(0.975, 5) / stats.norm.ppf(0.975)
    assert estimated.hi - estimated.lo == pytest.approx((known.hi - known.lo) * ratio, rel=1e-3)


def test_two_looks_are_median_unbiased_and_cover_given_the_stop():
    """Paths with a true μ that went on at 3 blocks and were called at 4: the estimate falls
    below μ about half the time, its interval covers μ about 95 % of the time."""
    mu, b3, b4 = 0.095, 0.12, 0.09
    rng = np.random.default_rng(7)
    logs = rng.normal(mu, SD, (400_000, 4))
    m3, m4 = logs[:, :3].mean(axis=1), logs.mean(axis=1)
    stopped = m4[(np.abs(m3) < b3) & (m4 >= b4)][:300]
    path = (LookBounds(3, b3), LookBounds(4, b4))
    estimates = [stopping.stopped_estimate(path, UP, float(m), SD) for m in stopped]
    below = np.mean([e.point < mu for e in estimates])
    covered = np.mean([e.lo <= mu <= e.hi for e in estimates])
    assert 0.42 < below < 0.58
    assert covered > 0.92
    plain = np.mean(np.exp(stopped - mu))
    shown = [stopping.on_the_word_side(e, UP, None) for e in estimates]
    assert plain > 1  # the plain mean overstates, as it should here
    assert abs(np.mean([math.exp(e.point - mu) for e in shown]) - 1) < abs(plain - 1)


def test_a_cell_without_a_new_block_at_a_look_was_held_to_both_thresholds():
    # A missing run: looks 3 and 4 saw the same 3 blocks, so the mean went on past the stricter.
    merged = stopping.stopped_estimate((LookBounds(3, 0.2), LookBounds(3, 0.15), LookBounds(4, 0.09)), UP, 0.1, SD)
    strict = stopping.stopped_estimate((LookBounds(3, 0.15), LookBounds(4, 0.09)), UP, 0.1, SD)
    assert (merged.point, merged.lo, merged.hi) == pytest.approx((strict.point, strict.lo, strict.hi), abs=1e-9)


def test_a_settled_mean_is_estimated_inside_its_range_and_symmetric_at_zero():
    path = (LookBounds(6, 0.08, (-0.03, 0.03)),)
    at_zero = stopping.stopped_estimate(path, SETTLE, 0.0, SD)
    assert at_zero.point == pytest.approx(0.0, abs=1e-4)
    assert at_zero.lo == pytest.approx(-at_zero.hi, abs=1e-3)
    off = stopping.stopped_estimate(path, SETTLE, 0.02, SD)
    assert off.point > 0.0


def test_a_mean_that_went_on_to_the_end_is_median_unbiased_given_that_it_went_on():
    mu, b3, b4 = 0.05, 0.08, 0.1
    rng = np.random.default_rng(11)
    logs = rng.normal(mu, SD, (20_000, 4))
    m3, m4 = logs[:, :3].mean(axis=1), logs.mean(axis=1)
    ended = m4[(np.abs(m3) < b3) & (np.abs(m4) < b4)][:300]
    path = (LookBounds(3, b3), LookBounds(4, b4))
    estimates = [stopping.stopped_estimate(path, GO_ON, float(m), SD) for m in ended]
    assert 0.42 < np.mean([e.point < mu for e in estimates]) < 0.58
    assert np.mean([e.lo <= mu <= e.hi for e in estimates]) > 0.92


def test_no_spread_gives_the_mean_itself():
    assert stopping.stopped_estimate((LookBounds(3, 0.1),), UP, 0.2, 0.0) == Stopped(0.2, 0.2, 0.2)


def test_the_estimate_keeps_to_the_word_s_side():
    faster = stopping.on_the_word_side(Stopped(-0.02, -0.1, 0.05), UP, None)
    assert faster == Stopped(0.0, 0.0, 0.05)
    slower = stopping.on_the_word_side(Stopped(0.01, -0.05, 0.1), DOWN, None)
    assert slower == Stopped(0.0, -0.05, 0.0)
    settled = stopping.on_the_word_side(Stopped(0.08, -0.1, 0.09), SETTLE, (-0.068, 0.068))
    assert settled == Stopped(0.068, -0.068, 0.068)
    ended = Stopped(0.3, -0.2, 0.5)
    assert stopping.on_the_word_side(ended, GO_ON, None) == ended
    assert stopping.on_the_word_side(ended, SETTLE, None) == ended
