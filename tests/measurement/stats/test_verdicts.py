"""The verdict words and sentences on hand-made estimates. No database."""

import math
import random

import pytest

from experiments.measurement.stats import verdicts
from experiments.measurement.stats.intervals import RatioEstimate, block_interval, blocks_to_settle, t_quantile


def _est(point, lo, hi, blocks=3, sd=0.05):
    """An estimate printed as point [lo, hi], with block ratios whose 95 % interval is [lo, hi]
    (centred on the log scale, offsets of standard deviation 1 scaled to fit): the equivalence
    test reads its 90 % interval from them. `sd` is the spread the settle hint works from."""
    centre, half = math.sqrt(lo * hi), math.log(hi / lo) / 2
    log_sd = half * math.sqrt(blocks) / t_quantile(0.95, blocks - 1) if blocks > 1 else 0.0
    offsets = [i - (blocks - 1) / 2 for i in range(blocks)]
    scale = math.sqrt(sum(o * o for o in offsets) / (blocks - 1)) if blocks > 1 else 1.0
    ratios = tuple(centre * math.exp(log_sd * o / scale) for o in offsets)
    return RatioEstimate(point, lo, hi, ratios, sd)


@pytest.mark.parametrize(
    ("estimate", "expected"),
    [
        (_est(1.2, 1.01, 1.4), verdicts.FASTER),
        (_est(1.01, 1.001, 1.015), verdicts.FASTER),  # inside the band, but shown to be above 1
        (_est(0.9, 0.8, 0.99), verdicts.SLOWER),
        (_est(1.0, 0.985, 1.019), verdicts.EQUIVALENT),
        (_est(1.0, 0.98, 1.02), verdicts.EQUIVALENT),
        # The 95 % interval leaves the band, the 90 % one (TOST at 5 % a side) lies inside it.
        (_est(1.0, 0.979, 1.019), verdicts.EQUIVALENT),
        (_est(1.0, 0.985, 1.021), verdicts.EQUIVALENT),
        (_est(1.0, 0.96, 1.04), verdicts.INCONCLUSIVE),  # the 90 % interval is about [0.972, 1.027]
        (_est(1.2, 1.0, 1.4), verdicts.INCONCLUSIVE),  # touching 1 is not above it
        (_est(0.95, 0.9, 1.0), verdicts.INCONCLUSIVE),  # ... nor below it
        (_est(1.2, 1.1, 1.3, blocks=2), verdicts.TOO_FEW_BLOCKS),
        (block_interval([1.2]), verdicts.TOO_FEW_BLOCKS),
        (RatioEstimate(None, None, None), verdicts.NO_DATA),
    ],
)
def test_outcome_words(estimate, expected):
    assert verdicts.classify(estimate, margin=0.02) == expected


def test_equivalence_is_tost_at_five_percent_a_side():
    # Log ratios -0.01, 0, 0.01: mean 0, sd 0.01. The 95 % interval, e^(±4.3027 * 0.01 / √3)
    # = [0.9755, 1.0252], leaves 1 ± 2 %; the 90 % one, e^(±2.9200 * 0.01 / √3) = [0.9833, 1.0170],
    # lies inside it: equivalent.
    estimate = block_interval([math.exp(-0.01), 1.0, math.exp(0.01)])
    assert (estimate.lo, estimate.hi) == pytest.approx((0.97546, 1.02515), abs=1e-5)
    assert verdicts.classify(estimate, margin=0.02) == verdicts.EQUIVALENT
    # Twice the spread: 90 % interval e^(±0.03372) = [0.9668, 1.0343], outside the band.
    wider = block_interval([math.exp(-0.02), 1.0, math.exp(0.02)])
    assert verdicts.classify(wider, margin=0.02) == verdicts.INCONCLUSIVE


def _failures(failed_baseline, failed_arm, sent=120):
    return {
        "failed_baseline": failed_baseline,
        "failed_arm": failed_arm,
        "requests_baseline": sent,
        "requests_arm": sent,
    }


def test_failure_rates_are_compared_with_fishers_exact_test():
    # 1 failure against 0 of 120 each: the one failure is as likely on either side, p = 1.
    assert verdicts.failure_rates_p(0, 120, 1, 120) == pytest.approx(1.0)
    # 12 against 0: each extreme table has probability C(120, 12) / C(240, 12), two-sided twice that.
    extreme = math.comb(120, 12) / math.comb(240, 12)
    assert verdicts.failure_rates_p(0, 120, 12, 120) == pytest.approx(2 * extreme)
    assert 2 * extreme == pytest.approx(0.000366, abs=1e-6)
    assert verdicts.failure_rates_p(12, 120, 0, 120) == pytest.approx(2 * extreme)  # either way
    assert verdicts.failure_rates_p(0, 0, 0, 0) == 1.0
    with pytest.raises(ValueError, match="between 0 and those sent"):
        verdicts.failure_rates_p(0, 120, 2, 1)


def test_failures_at_different_rates_and_fixed_rates_get_no_verdict():
    faster = _est(1.2, 1.1, 1.3)
    assert verdicts.classify(faster, margin=0.02, **_failures(0, 12)) == verdicts.FAILURES_DIFFER
    assert verdicts.classify(faster, margin=0.02, **_failures(12, 0)) == verdicts.FAILURES_DIFFER
    # Unequal counts at rates a test cannot tell apart keep the verdict.
    assert verdicts.classify(faster, margin=0.02, **_failures(0, 1)) == verdicts.FASTER
    assert verdicts.classify(faster, margin=0.02, **_failures(0, 2)) == verdicts.FASTER  # p = 0.498
    assert verdicts.classify(faster, margin=0.02, **_failures(3, 3)) == verdicts.FASTER
    assert verdicts.classify(faster, margin=0.02, applicable=False) == verdicts.NOT_APPLICABLE
    assert "different rates" in verdicts.NO_CALL_REASON[verdicts.FAILURES_DIFFER]
    assert "p < 0.05" in verdicts.NO_CALL_REASON[verdicts.FAILURES_DIFFER]


def test_a_distorted_stream_gets_no_verdict_but_no_data_says_so_first():
    faster = _est(1.2, 1.1, 1.3)
    assert verdicts.classify(faster, margin=0.02, stream_faithful=False) == verdicts.STREAM_DISTORTED
    # It outranks the failures' reason: the timing itself cannot be read.
    distorted = verdicts.classify(faster, margin=0.02, **_failures(0, 12), stream_faithful=False)
    assert distorted == verdicts.STREAM_DISTORTED
    assert verdicts.classify(RatioEstimate(None, None, None), margin=0.02, stream_faithful=False) == verdicts.NO_DATA
    assert "Stream fidelity" in verdicts.NO_CALL_REASON[verdicts.STREAM_DISTORTED]


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
    # Both intervals inside (1, 1.02]: shown to be faster by less than the margin.
    cells = _cells((1, _est(1.01, 1.005, 1.015)), (4, _est(1.012, 1.004, 1.02)))
    assert verdicts.sentence("n-gram k=4", "TPOT", cells) == (
        "n-gram k=4 is faster than the baseline at every measured concurrency, 1 to 4 "
        "(TPOT 1.010× [1.005, 1.015] at 1, 1.012× [1.004, 1.020] at 4, by less than the 2% margin)."
    )


def test_a_stretch_splits_where_the_gains_size_against_the_margin_changes():
    # Shown less than the margin at 1, across its edge at 4 and 8, beyond it at 16.
    cells = _cells(
        (1, _est(1.01, 1.005, 1.015)),
        (4, _est(1.05, 1.01, 1.1)),
        (8, _est(1.06, 1.01, 1.12)),
        (16, _est(1.3, 1.2, 1.4)),
    )
    assert verdicts.sentence("x", "TPOT", cells) == (
        "x is faster than the baseline at 1 (TPOT 1.010× [1.005, 1.015] at 1, by less than the 2% margin); "
        "from 4 to 8 it is faster than the baseline (TPOT 1.05× [1.01, 1.10] at 4, 1.06× [1.01, 1.12] at 8, "
        "possibly by less than the 2% margin); "
        "at 16 it is faster than the baseline (TPOT 1.30× [1.20, 1.40] at 16)."
    )


def test_small_losses_are_sized_against_the_margin_too():
    shown = _cells((1, _est(0.99, 0.983, 0.996)))
    assert verdicts.sentence("x", "TPOT", shown) == (
        "x is slower than the baseline at 1 (TPOT 0.990× [0.983, 0.996] at 1, by less than the 2% margin)."
    )
    possibly = _cells((1, _est(0.95, 0.9, 0.99)))
    assert verdicts.sentence("x", "TPOT", possibly) == (
        "x is slower than the baseline at 1 (TPOT 0.95× [0.90, 0.99] at 1, possibly by less than the 2% margin)."
    )
    # Upper bound 0.98 = 1 - 0.02: the loss is at least the margin, no flag.
    edge = _cells((1, _est(0.9, 0.8, 0.98)))
    assert verdicts.sentence("x", "TPOT", edge) == "x is slower than the baseline at 1 (TPOT 0.90× [0.80, 0.98] at 1)."


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
        "at 8 it has no verdict: the arm and the baseline failed their requests at different rates (failed / sent "
        "over the blocks both ran, Fisher's exact test p < 0.05), and dropping failures favours the side that fails "
        "its slowest requests (TPOT 1.20× [1.10, 1.30] at 8)."
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


def test_figure_keeps_a_bound_of_exactly_one_at_two_decimals_and_stops_at_four():
    # A bound exactly 1 is printed as 1.00: it is not a bound on one side of 1.
    assert verdicts.figure(_est(1.2, 1.0, 1.4)) == "1.20× [1.00, 1.40]"
    # 1.0004 rounds to 1 at 2 and at 3 decimals (1.00, 1.000), so it needs 4: 1.0004.
    assert verdicts.figure(_est(1.1, 1.0004, 1.3)) == "1.1000× [1.0004, 1.3000]"
    # 1.00001 would need 5; 4 is the most printed.
    assert verdicts.figure(_est(1.1, 1.00001, 1.3)) == "1.1000× [1.0000, 1.3000]"


def test_sentence_spans_of_several_levels_at_the_start_middle_and_end():
    # Faster at 1, 2, 4; equivalent at 8, 16, 32 (every interval inside [0.98, 1.02]);
    # slower at 64, 128. Each stretch quotes the figures of its first and last level.
    cells = _cells(
        (1, _est(1.5, 1.2, 1.8)),
        (2, _est(1.4, 1.1, 1.6)),
        (4, _est(1.3, 1.1, 1.5)),
        (8, _est(1.0, 0.99, 1.01)),
        (16, _est(1.0, 0.985, 1.015)),
        (32, _est(1.01, 0.99, 1.02)),
        (64, _est(0.9, 0.8, 0.95)),
        (128, _est(0.8, 0.7, 0.9)),
    )
    assert verdicts.sentence("draft k=4", "TPOT", cells) == (
        "draft k=4 is faster than the baseline up to 4 (TPOT 1.50× [1.20, 1.80] at 1, 1.30× [1.10, 1.50] at 4); "
        "from 8 to 32 it is equivalent to the baseline (TPOT 1.00× [0.99, 1.01] at 8, 1.01× [0.99, 1.02] at 32); "
        "from 64 it is slower than the baseline (TPOT 0.90× [0.80, 0.95] at 64, 0.80× [0.70, 0.90] at 128)."
    )


def test_sentence_one_stretch_of_three_levels_names_the_first_and_last():
    cells = _cells((1, _est(1.5, 1.2, 1.8)), (4, _est(1.4, 1.1, 1.6)), (16, _est(1.3, 1.1, 1.5)))
    assert verdicts.sentence("x", "TPOT", cells) == (
        "x is faster than the baseline at every measured concurrency, 1 to 16 "
        "(TPOT 1.50× [1.20, 1.80] at 1, 1.30× [1.10, 1.50] at 16)."
    )


def test_small_gain_flag_at_one_level_and_at_the_margins_edge():
    # Lower bound 1.01 < 1 + 0.02: the gain may be less than the margin.
    flagged = _cells((1, _est(1.1, 1.01, 1.2)))
    assert verdicts.sentence("x", "TPOT", flagged) == (
        "x is faster than the baseline at 1 (TPOT 1.10× [1.01, 1.20] at 1, possibly by less than the 2% margin)."
    )
    # Lower bound 1.02 = 1 + 0.02: the gain is at least the margin, no flag.
    edge = _cells((1, _est(1.1, 1.02, 1.2)))
    assert verdicts.sentence("x", "TPOT", edge) == "x is faster than the baseline at 1 (TPOT 1.10× [1.02, 1.20] at 1)."
    # Upper bound 1.02 = 1 + 0.02: inside (1, 1 + m], shown to be less than the margin.
    inside = _cells((1, _est(1.01, 1.001, 1.02)))
    assert verdicts.sentence("x", "TPOT", inside) == (
        "x is faster than the baseline at 1 (TPOT 1.010× [1.001, 1.020] at 1, by less than the 2% margin)."
    )


def test_hopeless_spread_sentence_in_full():
    # log sd 0.7 between blocks: at the cap of 99 blocks the half-width is still
    # t(98) * 0.7 / sqrt(99) = 1.98447 * 0.7 / 9.94987 = 0.1396, far above the room
    # log(1.02) - log(1.001) = 0.0188, so no count is given.
    cells = _cells((1, RatioEstimate(1.001, 0.5, 2.0, (0.5, 1.0, 2.0), 0.7)))
    assert verdicts.sentence("x", "TPOT", cells) == (
        "x is inconclusive at 1 (TPOT 1.00× [0.50, 2.00] at 1; "
        "the spread between blocks is too large for a few more repetitions to settle it)."
    )


def test_noise_floor_reached_on_the_upper_side():
    # max(1.05 - 1, 1 - 0.97) = 0.05: the upper bound reaches further.
    assert verdicts.noise_floor(_cells((1, _est(1.01, 0.97, 1.05)))) == pytest.approx(0.05)


def test_noise_floor_sentences_in_full():
    # Reaches 0.05 at 1 and max(1.02 - 1, 1 - 0.92) = 0.08 at 4; levels listed in order.
    cells = _cells((4, _est(0.95, 0.92, 1.02)), (1, _est(1.01, 0.97, 1.05)))
    assert verdicts.noise_floor_sentence("TPOT", cells) == (
        "The A/A replicate, identical to the baseline, measured TPOT 1.01× [0.97, 1.05] at 1, "
        "0.95× [0.92, 1.02] at 4: its intervals reach ±8.0% from 1, so smaller effects cannot be told "
        "from the noise of this host and design."
    )
    one_block = _cells((1, block_interval([1.1])), (4, block_interval([0.9])))
    assert verdicts.noise_floor_sentence("TPOT", one_block) == (
        "The A/A replicate, identical to the baseline, measured TPOT 1.10× at 1, 0.90× at 4; "
        "too few blocks for an interval."
    )


def test_a_replicate_called_faster_or_slower_is_named_as_a_false_call():
    # Identical arms: an interval that leaves 1 is a false call, and the sentence says so
    # (as the fresh-clone demo showed on a host whose load changed during the experiment:
    # the replicate "faster" at 4, 1.27× [1.02, 1.59]).
    cells = _cells((1, _est(1.26, 0.95, 1.66)), (4, _est(1.27, 1.02, 1.59)), (8, _est(0.9, 0.85, 0.95)))
    assert [cell.outcome for cell in cells] == [verdicts.INCONCLUSIVE, verdicts.FASTER, verdicts.SLOWER]
    assert verdicts.noise_floor_sentence("TPOT", cells) == (
        "The A/A replicate, identical to the baseline, measured TPOT 1.26× [0.95, 1.66] at 1, "
        "1.27× [1.02, 1.59] at 4, 0.90× [0.85, 0.95] at 8: its intervals reach ±66.0% from 1, so smaller "
        "effects cannot be told from the noise of this host and design. It was called faster at 4, slower at 8 "
        "although nothing differs from the baseline: a false call, which chance alone makes now and then (on the "
        "question's metric in at most 5% of experiments of this design, on another metric's unadjusted words in "
        "about one cell in twenty), and more often when the host's load changes during the experiment. The other "
        "arms' TPOT verdicts here are no surer than that: see the warnings on whether this host's spread was out "
        "of line."
    )
    # Equivalent (inside 1 ± margin) is the right call for identical arms: nothing added.
    quiet = _cells((1, _est(1.0, 0.99, 1.01)))
    assert quiet[0].outcome == verdicts.EQUIVALENT
    assert "false call" not in verdicts.noise_floor_sentence("TPOT", quiet)


def test_an_inconclusive_estimate_always_needs_more_blocks_than_it_has():
    # Why the sentence need not check the count against the blocks already run: an
    # inconclusive interval reaches 1 or leaves 1 ± margin, so its half-width is at least
    # the room blocks_to_settle asks for, and the count found is above the blocks run.
    rng = random.Random(20261130)
    inconclusive = 0
    for _ in range(300):
        blocks = rng.randint(3, 8)
        estimate = block_interval([math.exp(rng.gauss(0.01, 0.03)) for _ in range(blocks)])
        if verdicts.classify(estimate, margin=0.02) == verdicts.INCONCLUSIVE:
            inconclusive += 1
            needed = blocks_to_settle(estimate, 0.02)
            assert needed is None or needed > blocks, (estimate, needed)
    assert inconclusive > 100
