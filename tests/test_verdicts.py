"""The verdict words and sentences on hand-made estimates. No database."""

import pytest

from experiments import verdicts
from experiments.stats import RatioEstimate, block_interval


def _est(point, lo, hi, blocks=3, sd=0.05):
    return RatioEstimate(point, lo, hi, (point,) * blocks, sd)


@pytest.mark.parametrize(
    ("estimate", "expected"),
    [
        (_est(1.2, 1.01, 1.4), verdicts.FASTER),
        (_est(1.01, 1.001, 1.015), verdicts.FASTER),  # inside the band, but shown to be above 1
        (_est(0.9, 0.8, 0.99), verdicts.SLOWER),
        (_est(1.0, 0.985, 1.019), verdicts.EQUIVALENT),
        (_est(1.0, 0.98, 1.02), verdicts.EQUIVALENT),  # the band's edges belong to it
        (_est(1.0, 0.979, 1.019), verdicts.INCONCLUSIVE),
        (_est(1.0, 0.985, 1.021), verdicts.INCONCLUSIVE),
        (_est(1.2, 1.0, 1.4), verdicts.INCONCLUSIVE),  # touching 1 is not above it
        (_est(1.2, 1.1, 1.3, blocks=2), verdicts.TOO_FEW_BLOCKS),
        (block_interval([1.2]), verdicts.TOO_FEW_BLOCKS),
        (RatioEstimate(None, None, None), verdicts.NO_DATA),
    ],
)
def test_outcome_words(estimate, expected):
    assert verdicts.classify(estimate, margin=0.02) == expected


def test_different_failures_and_fixed_rates_get_no_verdict():
    faster = _est(1.2, 1.1, 1.3)
    assert verdicts.classify(faster, margin=0.02, failed_baseline=0, failed_arm=2) == verdicts.FAILURES_DIFFER
    assert verdicts.classify(faster, margin=0.02, failed_baseline=3, failed_arm=3) == verdicts.FASTER
    assert verdicts.classify(faster, margin=0.02, applicable=False) == verdicts.NOT_APPLICABLE


def test_the_margin_is_the_experiments():
    estimate = _est(1.0, 0.96, 1.04)
    assert verdicts.classify(estimate, margin=0.02) == verdicts.INCONCLUSIVE
    assert verdicts.classify(estimate, margin=0.05) == verdicts.EQUIVALENT


def _cells(*rows, margin=0.02):
    return [verdicts.Cell(level, est, verdicts.classify(est, margin=margin), margin) for level, est in rows]


def test_figure_prints_enough_decimals_to_keep_a_bound_off_one():
    assert verdicts.figure(_est(1.1, 1.004, 1.3)) == "1.100× [1.004, 1.300]"
    assert verdicts.figure(_est(1.5, 1.2, 1.8)) == "1.50× [1.20, 1.80]"
    assert verdicts.figure(block_interval([1.25])) == "1.25×"
    assert verdicts.figure(RatioEstimate(None, None, None)) == "–"


def test_sentence_with_three_segments():
    # The inconclusive level: point 1, sd 0.05 between blocks, so only equivalence can
    # settle it: t(n-1) * 0.05 / sqrt(n) < log(1.02) = 0.0198 first at n = 27
    # (t(26) = 2.056: 0.01978; at n = 26, t(25) = 2.060: 0.0202).
    cells = _cells(
        (1, _est(1.5, 1.2, 1.8)), (4, _est(1.3, 1.1, 1.5)), (8, _est(1.0, 0.9, 1.2)), (16, _est(0.8, 0.7, 0.9))
    )
    assert verdicts.sentence("draft k=4", "TPOT", cells) == (
        "draft k=4 is faster than the baseline up to 4 (TPOT 1.50× [1.20, 1.80] at 1, 1.30× [1.10, 1.50] at 4); "
        "at 8 it is inconclusive (TPOT 1.00× [0.90, 1.20] at 8; about 27 blocks in all would settle it); "
        "at 16 it is slower than the baseline (TPOT 0.80× [0.70, 0.90] at 16)."
    )


def test_sentence_every_level_the_same_and_small_gains_flagged():
    cells = _cells((1, _est(1.01, 1.005, 1.015)), (4, _est(1.012, 1.004, 1.02)))
    assert verdicts.sentence("n-gram k=4", "TPOT", cells) == (
        "n-gram k=4 is faster than the baseline at every measured concurrency, 1 to 4 "
        "(TPOT 1.010× [1.005, 1.015] at 1, 1.012× [1.004, 1.020] at 4, possibly by less than the 2% margin)."
    )


def test_sentence_without_verdicts_says_why():
    cells = [
        verdicts.Cell(1, block_interval([1.2, 1.3]), verdicts.TOO_FEW_BLOCKS, 0.02),
        verdicts.Cell(4, RatioEstimate(None, None, None), verdicts.NO_DATA, 0.02),
        verdicts.Cell(8, _est(1.2, 1.1, 1.3), verdicts.FAILURES_DIFFER, 0.02),
    ]
    text = verdicts.sentence("x", "TPOT", cells)
    assert text.startswith("x has too few repetitions to call (fewer than 3 blocks) at 1 (TPOT 1.25× [")
    assert "; at 4 it has no paired measurements;" in text
    assert text.endswith(
        "at 8 it has no verdict: the arm and the baseline failed different numbers of requests "
        "(TPOT 1.20× [1.10, 1.30] at 8)."
    )
    assert verdicts.sentence("x", "TPOT", []) == "x: no TPOT measurements to compare with the baseline."


def test_inconclusive_with_a_hopeless_spread_says_so():
    cells = _cells((1, RatioEstimate(1.001, 0.5, 2.0, (0.5, 1.0, 2.0), 0.7)))
    assert "too large for a few more repetitions to settle it" in verdicts.sentence("x", "TPOT", cells)


def test_noise_floor_is_the_replicates_widest_reach():
    # reaches: max(1.05 - 1, 1 - 0.97) = 0.05 at 1; max(0.02, 0.08) = 0.08 at 4
    cells = _cells((1, _est(1.01, 0.97, 1.05)), (4, _est(0.95, 0.92, 1.02)))
    assert verdicts.noise_floor(cells) == pytest.approx(0.08)
    text = verdicts.noise_floor_sentence("TPOT", cells)
    assert "its intervals reach ±8.0% from 1" in text
    assert verdicts.noise_floor(_cells((1, block_interval([1.1])))) is None
    assert "too few blocks" in verdicts.noise_floor_sentence("TPOT", _cells((1, block_interval([1.1]))))
