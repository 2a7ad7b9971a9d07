"""experiments.stats against hand-computed cases. No database."""

import random

import pytest

from experiments import stats

# ---------------------------------------------------------------- descriptive statistics


def test_percentile_interpolates_linearly():
    # [1, 2, 3, 4], q=25: rank = (4-1)*0.25 = 0.75 -> 1 + 0.75*(2-1) = 1.75 (numpy "linear" agrees)
    assert stats.percentile([4, 1, 3, 2], 25) == pytest.approx(1.75)
    # q=50: rank 1.5 -> 2 + 0.5*(3-2) = 2.5
    assert stats.percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    # [10..50], q=90: rank 4*0.9 = 3.6 -> 40 + 0.6*10 = 46
    assert stats.percentile([10, 20, 30, 40, 50], 90) == pytest.approx(46)


def test_percentile_edges():
    assert stats.percentile([3, 1, 2], 0) == 1
    assert stats.percentile([3, 1, 2], 100) == 3
    assert stats.percentile([7], 99) == 7
    assert stats.percentile([], 50) is None
    with pytest.raises(ValueError, match="q must be in"):
        stats.percentile([1, 2], 101)


def test_summarise_skips_missing_values():
    # 1..10: mean 5.5; p50 rank 4.5 -> 5.5; p90 rank 8.1 -> 9.1; p99 rank 8.91 -> 9.91
    summary = stats.summarise([None, *range(1, 11)])
    assert summary == pytest.approx({"mean": 5.5, "p50": 5.5, "p90": 9.1, "p99": 9.91})


def test_summarise_empty_is_all_none():
    assert stats.summarise([]) == {"mean": None, "p50": None, "p90": None, "p99": None}
    assert stats.summarise([None]) == {"mean": None, "p50": None, "p90": None, "p99": None}


# ---------------------------------------------------------------- per-request latency


def test_tpot():
    # (1100 - 100) / (11 - 1) = 100 ms
    assert stats.tpot_ms(100.0, 1100.0, 11) == pytest.approx(100.0)
    assert stats.tpot_ms(100.0, 200.0, 1) is None
    assert stats.tpot_ms(None, 200.0, 5) is None
    # 6 tokens: the first at 50 ms, the last at 300 ms -> 250 ms over 5 later tokens.
    assert stats.tpot_ms(50.0, 300.0, 6) == 50.0
    assert stats.tpot_ms(20.0, 20.0, 0) is None


def test_itl_is_the_gap_between_chunks():
    # 130 - 100 = 30, 190 - 130 = 60
    assert stats.itl_ms([100.0, 130.0, 190.0]) == pytest.approx([30.0, 60.0])
    assert stats.itl_ms([100.0]) == []
    assert stats.itl_ms([]) == []
    assert stats.itl_ms([50.0, 80.0, 80.0, 125.5]) == [30.0, 0.0, 45.5]


def test_tokens_per_chunk():
    # (1 + 3 + 2) / 3 = 2
    assert stats.tokens_per_chunk([1, 3, 2]) == pytest.approx(2.0)
    assert stats.tokens_per_chunk([]) is None


# ---------------------------------------------------------------- acceptance


def test_acceptance_rate_and_length():
    # 30 accepted of 40 proposed = 0.75; tau = 1 + 30 / 10 drafts = 4
    assert stats.acceptance_rate(30, 40) == pytest.approx(0.75)
    assert stats.acceptance_length(30, 10) == pytest.approx(4.0)
    assert stats.acceptance_rate(0, 0) is None
    assert stats.acceptance_length(0, 0) is None


def test_per_position_acceptance():
    # 10 drafts, accepted at positions 0..2: 8, 6, 3
    # unconditional: 8/10, 6/10, 3/10; conditional: 8/10, 6/8, 3/6
    assert stats.per_position_unconditional([8, 6, 3], 10) == pytest.approx([0.8, 0.6, 0.3])
    assert stats.per_position_conditional([8, 6, 3], 10) == pytest.approx([0.8, 0.75, 0.5])


def test_per_position_conditional_after_a_position_never_accepted():
    # 5/10, 0/5, then 0/0 -> None
    assert stats.per_position_conditional([5, 0, 0], 10) == [0.5, 0.0, None]
    assert stats.per_position_unconditional([0, 0], 0) == [None, None]
    assert stats.per_position_conditional([0, 0], 0) == [None, None]


def test_acceptance_along_output():
    # bucket 4 tokens; index starts at 1 (token 0 comes from prefill), a step advances accepted + 1.
    # A: step at 1 (bucket 0) accepts 2 -> 4; step at 4 (bucket 4) accepts 0 -> 5; step at 5 (bucket 4) accepts 3.
    # B: step at 1 (bucket 0) accepts 1 -> 3; step at 3 proposed nothing: skipped, -> 4;
    #    step at 4 (bucket 4) accepts 2.
    # bucket 0: (2 + 1) / 2 steps = 1.5; bucket 4: (0 + 3 + 2) / 3 steps = 5/3
    requests = [
        {"accepted_per_step": [2, 0, 3], "proposed_per_step": [3, 3, 3]},
        {"accepted_per_step": [1, 0, 2], "proposed_per_step": [3, 0, 3]},
        {"accepted_per_step": None, "proposed_per_step": None},
    ]
    result = stats.acceptance_along_output(requests, 4)
    assert [(start, n) for start, _, n in result] == [(0, 2), (4, 3)]
    assert [mean for _, mean, _ in result] == pytest.approx([1.5, 5 / 3])


def test_acceptance_along_output_rejects_mismatched_arrays():
    with pytest.raises(ValueError, match="differ in length"):
        stats.acceptance_along_output([{"accepted_per_step": [1, 2], "proposed_per_step": [3]}], 4)


# ---------------------------------------------------------------- Leviathan et al. 2023


def test_alpha_from_tau_inverts_expected_tokens():
    # gamma 2, alpha 0.5: 1 + 0.5 + 0.25 = 1.75 tokens per step
    assert stats.alpha_from_tau(1.75, 2) == pytest.approx(0.5, abs=1e-9)


def test_alpha_from_tau_edges():
    assert stats.alpha_from_tau(1.0, 4) == 0.0
    assert stats.alpha_from_tau(0.9, 4) == 0.0
    assert stats.alpha_from_tau(5.0, 4) == 1.0
    assert stats.alpha_from_tau(None, 4) is None


def test_predicted_speedup():
    # alpha 0.5, gamma 2, c 0.1: 1.75 / (2*0.1 + 1) = 1.4583...
    assert stats.predicted_speedup(0.5, 2, 0.1) == pytest.approx(1.75 / 1.2)
    # alpha -> 1 limit, gamma 3, c 0.5: 4 / 2.5 = 1.6
    assert stats.predicted_speedup(1.0, 3, 0.5) == pytest.approx(1.6)
    # alpha 0: only the bonus token, so pure overhead: 1 / (4*0.25 + 1) = 0.5
    assert stats.predicted_speedup(0.0, 4, 0.25) == pytest.approx(0.5)


def test_estimate_cost_ratio():
    # baseline TPOT 10 ms, arm TPOT 8 ms, tau 2: a step takes 16 ms; c = (16/10 - 1) / 4 = 0.15
    assert stats.estimate_cost_ratio(10.0, 8.0, 2.0, 4) == pytest.approx(0.15)
    # arm TPOT 4 ms, tau 2: step 8 ms < baseline 10 ms -> negative, clamped to 0
    assert stats.estimate_cost_ratio(10.0, 4.0, 2.0, 4) == 0.0
    assert stats.estimate_cost_ratio(None, 4.0, 2.0, 4) is None


def test_implied_cost_ratio_reproduces_the_measured_speedup():
    # Documented circularity: with c implied by the TPOTs, the model gives back 10 / 8 = 1.25.
    c = stats.estimate_cost_ratio(10.0, 8.0, 2.0, 4)
    assert stats.predicted_speedup(stats.alpha_from_tau(2.0, 4), 4, c) == pytest.approx(1.25)


# ---------------------------------------------------------------- speedup with uncertainty


def _keyed(values_per_rep):
    return {(rep, prompt): value for rep, values in enumerate(values_per_rep) for prompt, value in enumerate(values)}


def test_bootstrap_exact_halving_gives_degenerate_interval():
    # arm = baseline / 2 for every prompt: every resample has ratio exactly 2
    rng = random.Random(1)
    base = [[rng.uniform(20, 80) for _ in range(50)] for _ in range(3)]
    arm = [[value / 2 for value in rep] for rep in base]
    estimate = stats.paired_bootstrap_speedup(_keyed(base), _keyed(arm))
    assert (estimate.point, estimate.lo, estimate.hi) == pytest.approx((2.0, 2.0, 2.0))
    assert (estimate.n_pairs, estimate.n_repetitions) == (150, 3)


def test_bootstrap_higher_is_better_inverts_the_ratio():
    base = _keyed([[10.0, 20.0, 30.0]])
    arm = _keyed([[20.0, 40.0, 60.0]])
    estimate = stats.paired_bootstrap_speedup(base, arm, higher_is_better=True)
    assert (estimate.point, estimate.lo, estimate.hi) == pytest.approx((2.0, 2.0, 2.0))


def test_bootstrap_noisy_interval_contains_truth_and_excludes_one():
    # Prompts differ widely (20..80 ms); the arm is 1.5x faster with +-10% noise of mean 1
    # per request and a per-repetition drift of a few percent. True ratio of means: 1.5.
    rng = random.Random(7)
    base, arm = [], []
    for drift in (1.0, 1.03, 0.98):
        prompts = [rng.uniform(20, 80) for _ in range(200)]
        base.append([p * rng.uniform(0.9, 1.1) for p in prompts])
        arm.append([p / 1.5 * drift * rng.uniform(0.9, 1.1) for p in prompts])
    estimate = stats.paired_bootstrap_speedup(_keyed(base), _keyed(arm))
    assert estimate.lo < 1.5 < estimate.hi
    assert estimate.lo > 1
    assert estimate.hi - estimate.lo < 0.2


def test_bootstrap_carries_run_to_run_spread():
    # Within each repetition the ratio is constant: 2 in rep 0, 1.5 in rep 1. A resample that
    # draws rep 1 twice (chance 1/4) gives exactly 1.5, rep 0 twice exactly 2, so the 2.5% and
    # 97.5% percentiles are 1.5 and 2: the interval spans the run-to-run difference.
    base = [[10.0, 20.0, 30.0, 40.0], [10.0, 20.0, 30.0, 40.0]]
    arm = [[v / 2 for v in base[0]], [v / 1.5 for v in base[1]]]
    estimate = stats.paired_bootstrap_speedup(_keyed(base), _keyed(arm))
    assert estimate.lo == pytest.approx(1.5)
    assert estimate.hi == pytest.approx(2.0)
    # point: 100 / (50 + 66.67) over both reps = 200 / 116.67 = 1.714...
    assert estimate.point == pytest.approx(200 / (50 + 100 / 1.5))


def test_bootstrap_pairs_only_shared_keys_and_is_reproducible():
    base = {(0, 0): 10.0, (0, 1): 20.0, (0, 2): 30.0, (1, 0): 12.0}
    arm = {(0, 0): 5.0, (0, 1): 10.0, (0, 2): None, (0, 3): 1.0}
    # pairs: (0,0) and (0,1) only -> (10 + 20) / (5 + 10) = 2
    estimate = stats.paired_bootstrap_speedup(base, arm)
    assert estimate.point == pytest.approx(2.0)
    assert (estimate.n_pairs, estimate.n_repetitions) == (2, 1)
    noisy_base = _keyed([[random.Random(i).uniform(10, 50) for i in range(40)]])
    noisy_arm = _keyed([[random.Random(100 + i).uniform(10, 50) for i in range(40)]])
    first = stats.paired_bootstrap_speedup(noisy_base, noisy_arm, seed=3)
    assert first == stats.paired_bootstrap_speedup(noisy_base, noisy_arm, seed=3)


def test_bootstrap_without_enough_pairs():
    assert stats.paired_bootstrap_speedup({}, {}).point is None
    one = stats.paired_bootstrap_speedup({(0, 0): 10.0}, {(0, 0): 5.0})
    assert (one.point, one.lo, one.hi) == (2.0, None, None)
    with pytest.raises(ValueError, match="at least 0"):
        stats.paired_bootstrap_speedup({(0, 0): 10.0}, {(0, 0): -1.0})


def test_bootstrap_takes_a_zero_value_such_as_a_one_chunk_tpot():
    # Pairs (10, 5), (0, 5), (20, 5): ratio of means (10 + 0 + 20) / (5 + 5 + 5) = 2.0.
    estimate = stats.paired_bootstrap_speedup(
        {(1, 0): 10.0, (1, 1): 0.0, (1, 2): 20.0}, {(1, i): 5.0 for i in range(3)}
    )
    assert estimate.point == 2.0
    assert estimate.lo <= 2.0 <= estimate.hi
    all_zero = stats.paired_bootstrap_speedup({(1, 0): 0.0, (1, 1): 0.0}, {(1, 0): 5.0, (1, 1): 5.0})
    assert all_zero.point is None
    assert "zero" in all_zero.note


def test_run_level_speedup():
    # means 100 and 150 -> 1.5. Every resample lies between 140/110 = 1.27 and 160/90 = 1.78.
    estimate = stats.run_level_speedup([100.0, 110.0, 90.0], [150.0, 160.0, 140.0])
    assert estimate.point == pytest.approx(1.5)
    assert 140 / 110 - 1e-9 <= estimate.lo <= 1.5 <= estimate.hi <= 160 / 90 + 1e-9
    assert estimate.n_repetitions == 3


def test_run_level_speedup_with_one_repetition_has_no_interval():
    estimate = stats.run_level_speedup([100.0], [150.0])
    assert (estimate.point, estimate.lo, estimate.hi) == (1.5, None, None)
    assert estimate.note == "one repetition, no interval"


def test_run_level_speedup_for_a_latency():
    # lower is better: 100 / 50 = 2
    assert stats.run_level_speedup([100.0, 100.0], [50.0, 50.0], higher_is_better=False).point == pytest.approx(2.0)


# ---------------------------------------------------------------- break-even and verdict


def test_classify_boundaries():
    assert stats.classify(1.2, 1.0, 1.4) == stats.INDISTINGUISHABLE
    assert stats.classify(1.2, 1.01, 1.4) == stats.FASTER
    assert stats.classify(0.9, 0.8, 1.0) == stats.INDISTINGUISHABLE
    assert stats.classify(0.9, 0.8, 0.99) == stats.SLOWER
    assert stats.classify(1.2, None, None) == stats.NO_INTERVAL
    assert stats.classify(None, None, None) == stats.NO_DATA


def test_break_even_is_the_first_level_not_significantly_above_one():
    rows = [(64, 1.2, 1.05, 1.3), (1, 2.0, 1.5, 2.5), (4, 1.5, 1.1, 1.9), (16, 1.05, 0.95, 1.15)]
    assert stats.break_even_concurrency(rows) == 16


def test_break_even_edges():
    assert stats.break_even_concurrency([(1, 2.0, 1.5, 2.5), (8, 1.2, 1.1, 1.3)]) is None
    assert stats.break_even_concurrency([(1, 1.1, 0.9, 1.3), (8, 1.2, 1.1, 1.3)]) == 1
    assert stats.break_even_concurrency([(1, 2.0, 1.5, 2.5), (8, 1.5, None, None, "one repetition, no interval")]) == 8
    assert stats.break_even_concurrency([]) is None


def test_verdict_mixed():
    # A single top level reads "at 16", not "from 16": nothing above it was measured.
    rows = [(1, 1.8, 1.6, 2.0), (2, 1.5, 1.3, 1.7), (4, 1.2, 1.05, 1.3), (16, 1.02, 0.9, 1.1)]
    assert stats.verdict("n-gram k=4", "TPOT", rows) == (
        "n-gram k=4 is faster than the baseline up to 4 concurrent requests "
        "(TPOT 1.80× [1.60, 2.00] at 1, 1.20× [1.05, 1.30] at 4); "
        "at 16 it is not distinguishable from the baseline (TPOT 1.02× [0.90, 1.10] at 16)."
    )


def test_verdict_mixed_with_more_levels_after_the_gain():
    rows = [(1, 1.8, 1.6, 2.0), (16, 1.02, 0.9, 1.1), (32, 0.97, 0.9, 1.05)]
    assert stats.verdict("n-gram k=4", "TPOT", rows) == (
        "n-gram k=4 is faster than the baseline at 1 concurrent request (TPOT 1.80× [1.60, 2.00] at 1); "
        "from 16 it is not distinguishable from the baseline "
        "(TPOT 1.02× [0.90, 1.10] at 16, 0.97× [0.90, 1.05] at 32)."
    )


def test_verdict_all_significant():
    text = stats.verdict("EAGLE-3 k=3", "TPOT", [(1, 2.0, 1.8, 2.2), (8, 1.4, 1.2, 1.6)])
    assert text == (
        "EAGLE-3 k=3 is faster than the baseline at every measured concurrency, 1 to 8 concurrent requests "
        "(TPOT 2.00× [1.80, 2.20] at 1, 1.40× [1.20, 1.60] at 8)."
    )


def test_verdict_never_calls_an_interval_holding_one_a_gain():
    text = stats.verdict("draft k=4", "TPOT", [(1, 1.3, 0.95, 1.6), (4, 1.1, 0.9, 1.3)])
    assert "faster" not in text
    assert text.startswith("draft k=4 is not distinguishable from the baseline at every measured concurrency")


def test_verdict_slower():
    text = stats.verdict("draft k=8", "TPOT", [(1, 1.2, 1.1, 1.3), (32, 0.8, 0.7, 0.9)])
    assert text == (
        "draft k=8 is faster than the baseline at 1 concurrent request (TPOT 1.20× [1.10, 1.30] at 1); "
        "at 32 it is slower than the baseline (TPOT 0.80× [0.70, 0.90] at 32)."
    )


def test_verdict_without_intervals():
    rows = [stats.run_level_speedup([100.0], [150.0]).row(1), stats.run_level_speedup([100.0], [90.0]).row(4)]
    text = stats.verdict("n-gram k=4", "output throughput", rows)
    assert text == (
        "n-gram k=4 cannot be called faster or slower at every measured concurrency, 1 to 4 concurrent requests "
        "(output throughput 1.50× at 1, 0.90× at 4; one repetition, no interval)."
    )


def test_verdict_prints_enough_decimals_to_keep_a_bound_off_one():
    text = stats.verdict("x", "TPOT", [(1, 1.1, 1.004, 1.3)])
    assert "[1.004, 1.300]" in text
    assert stats.verdict("x", "TPOT", []) == "x: no TPOT measurements to compare with the baseline."
