"""experiments.measurement.stats against hand-computed cases. No database."""

import math

import pytest

from experiments.measurement.encoding import packed
from experiments.measurement.engine import prediction
from experiments.measurement.stats import acceptance, break_even, intervals, latency, output_fidelity

# ---------------------------------------------------------------- descriptive statistics


def test_percentile_interpolates_linearly():
    # [1, 2, 3, 4], q=25: rank = (4-1)*0.25 = 0.75 -> 1 + 0.75*(2-1) = 1.75 (numpy "linear" agrees)
    assert latency.percentile([4, 1, 3, 2], 25) == pytest.approx(1.75)
    # q=50: rank 1.5 -> 2 + 0.5*(3-2) = 2.5
    assert latency.percentile([1, 2, 3, 4], 50) == pytest.approx(2.5)
    # [10..50], q=90: rank 4*0.9 = 3.6 -> 40 + 0.6*10 = 46
    assert latency.percentile([10, 20, 30, 40, 50], 90) == pytest.approx(46)


def test_percentile_edges():
    assert latency.percentile([3, 1, 2], 0) == 1
    assert latency.percentile([3, 1, 2], 100) == 3
    assert latency.percentile([7], 99) == 7
    assert latency.percentile([], 50) is None
    with pytest.raises(ValueError, match="q must be in"):
        latency.percentile([1, 2], 101)


def test_summarise_skips_missing_values():
    # 1..10: mean 5.5; p50 rank 4.5 -> 5.5; p90 rank 8.1 -> 9.1; p99 rank 8.91 -> 9.91
    summary = latency.summarise([None, *range(1, 11)])
    assert summary == pytest.approx({"mean": 5.5, "p50": 5.5, "p90": 9.1, "p99": 9.91})


def test_summarise_empty_is_all_none():
    assert latency.summarise([]) == {"mean": None, "p50": None, "p90": None, "p99": None}
    assert latency.summarise([None]) == {"mean": None, "p50": None, "p90": None, "p99": None}


# ---------------------------------------------------------------- per-request latency


def test_tpot():
    # (1100 - 100) / (11 - 1) = 100 ms
    assert latency.tpot_ms(100.0, 1100.0, 11) == pytest.approx(100.0)
    assert latency.tpot_ms(100.0, 200.0, 1) is None
    assert latency.tpot_ms(None, 200.0, 5) is None
    # 6 tokens: the first at 50 ms, the last at 300 ms -> 250 ms over 5 later tokens.
    assert latency.tpot_ms(50.0, 300.0, 6) == 50.0
    assert latency.tpot_ms(20.0, 20.0, 0) is None


def test_tpot_with_a_value_missing_and_with_two_tokens():
    assert latency.tpot_ms(100.0, None, 5) is None
    assert latency.tpot_ms(100.0, 200.0, None) is None
    # 2 tokens: the second 30 ms after the first -> (130 - 100) / 1 = 30 ms.
    assert latency.tpot_ms(100.0, 130.0, 2) == 30.0


def _itl(*requests: list[float]) -> list[float]:
    times, starts = packed.unpack_many((packed.pack(r, packed.FLOAT64) for r in requests), packed.FLOAT64)
    return latency.itl_ms(times, starts).tolist()


def test_itl_is_the_gap_between_chunks():
    # 130 - 100 = 30, 190 - 130 = 60
    assert _itl([100.0, 130.0, 190.0]) == pytest.approx([30.0, 60.0])
    assert _itl([100.0]) == []
    assert _itl([]) == []
    assert _itl([50.0, 80.0, 80.0, 125.5]) == [30.0, 0.0, 45.5]
    # Two requests: 10 and 30, never the 90 ms from the first request's last chunk to the second's first.
    assert _itl([0.0, 10.0], [], [100.0, 130.0], [7.0]) == [10.0, 30.0]


def _tokens_per_chunk(*requests: list[int]) -> float | None:
    return latency.decode_tokens_per_chunk(
        *packed.unpack_many((packed.pack(r, packed.UINT32) for r in requests), packed.UINT32)
    )


def test_tokens_per_chunk_leaves_out_each_requests_first_chunk():
    # (3 + 2) / 2 = 2.5: the first chunk (prefill, one token) is left out.
    assert _tokens_per_chunk([1, 3, 2]) == pytest.approx(2.5)
    # Two requests: (3 + 2 + 4) / 3 = 3.
    assert _tokens_per_chunk([1, 3], [1, 2, 4]) == pytest.approx(3.0)
    assert _tokens_per_chunk([1], []) is None
    assert _tokens_per_chunk() is None


# ---------------------------------------------------------------- acceptance


def test_acceptance_rate_and_length():
    # 30 accepted of 40 proposed = 0.75; tau = 1 + 30 / 10 drafts = 4
    assert acceptance.acceptance_rate(30, 40) == pytest.approx(0.75)
    assert acceptance.acceptance_length(30, 10) == pytest.approx(4.0)
    assert acceptance.acceptance_rate(0, 0) is None
    assert acceptance.acceptance_length(0, 0) is None


def test_per_position_acceptance():
    # 10 drafts, accepted at positions 0..2: 8, 6, 3
    # unconditional: 8/10, 6/10, 3/10; conditional: 8/10, 6/8, 3/6
    assert acceptance.per_position_unconditional([8, 6, 3], 10) == pytest.approx([0.8, 0.6, 0.3])
    assert acceptance.per_position_conditional([8, 6, 3], 10) == pytest.approx([0.8, 0.75, 0.5])


def test_per_position_conditional_after_a_position_never_accepted():
    # 5/10, 0/5, then 0/0 -> None
    assert acceptance.per_position_conditional([5, 0, 0], 10) == [0.5, 0.0, None]
    assert acceptance.per_position_unconditional([0, 0], 0) == [None, None]
    assert acceptance.per_position_conditional([0, 0], 0) == [None, None]


def test_conditional_acceptance_from_what_was_drafted():
    # Step A drafted 3, accepted 2: positions 0, 1 accepted, 2 at stake and rejected.
    # Step B drafted 1 (a short n-gram match), accepted 1: position 0 accepted; position 1
    #   was never drafted, so it is not at stake (the counters would count it as rejected).
    # Step C drafted 3, accepted 0: position 0 at stake and rejected.
    # Position 0: accepted 2 of 3 at stake; position 1: 1 of 1; position 2: 0 of 1.
    steps = [([2, 1], [3, 1]), ([0], [3])]
    assert acceptance.per_position_conditional_from_steps(steps) == [(2, 3), (1, 1), (0, 1)]
    assert acceptance.per_position_conditional_from_steps([]) == []
    with pytest.raises(ValueError, match=r"^accepted_per_step and drafted_per_step differ in length$"):
        acceptance.per_position_conditional_from_steps([([1, 2], [3])])


def test_per_position_without_positions():
    # No per-position counters: nothing to divide.
    assert acceptance.per_position_unconditional([], 10) == []
    assert acceptance.per_position_conditional([], 10) == []


def test_decode_steps_count_the_steps_that_drafted_nothing():
    # Plain decoding: 10 tokens, the first from prefill -> 9 steps.
    assert acceptance.decode_steps(10, None) == 9
    # Drafted steps emit accepted + 1: (2+1) + (0+1) = 4 of the 9 later tokens; the other
    # 5 came one per step from steps that drafted nothing -> 2 + 5 = 7 steps.
    assert acceptance.decode_steps(10, [2, 0]) == 7
    # vLLM's own example: 6 tokens, per_step_accepted [0, 1, 1, 3]. Steps emitting 1, 2, 2
    # tokens complete the 5 later tokens; the 4th step's tokens were cut at max_tokens.
    assert acceptance.decode_steps(6, [0, 1, 1, 3]) == 3
    assert acceptance.decode_steps(1, [3]) == 0
    assert acceptance.decode_steps(0, None) == 0


def test_tokens_per_decode_step():
    # 9 tokens after the first in 7 steps
    assert acceptance.tokens_per_decode_step(9, 7) == pytest.approx(9 / 7)
    assert acceptance.tokens_per_decode_step(9, 9) == 1.0
    assert acceptance.tokens_per_decode_step(0, 0) is None
    # One step that accepted 2 draft tokens plus the bonus token: 3 tokens in 1 step.
    assert acceptance.tokens_per_decode_step(3, 1) == 3.0


def test_decode_step_tokens_of_plain_decoding_are_one_a_step():
    # 5 tokens: 4 decode steps of one token, even where the client saw merged chunks.
    assert acceptance.decode_step_tokens(5, None, [1, 2, 2], speculative=False) == [1, 1, 1, 1]
    assert acceptance.decode_step_tokens(1, None, [1], speculative=False) == []
    assert acceptance.decode_step_tokens(0, None, [], speculative=False) == []


def test_decode_step_tokens_from_the_per_step_counts_when_they_cover_every_step():
    def steps(output_tokens, accepted, chunks):
        return acceptance.decode_step_tokens(output_tokens, accepted, chunks, speculative=True)

    # Draft model, 8 tokens: 7 after the first. per_step_accepted [2, 3, 1]: steps emit 3
    # and 4 tokens, which complete the 7; the third step came after the output was complete.
    # The chunks merged (2 chunks after the first) and are not needed.
    assert steps(8, [2, 3, 1], [1, 7]) == [3, 4]
    # 7 tokens (6 after the first): 3, then a step of 4 cut to the 3 left at max_tokens.
    assert steps(7, [2, 3], [1, 6]) == [3, 3]
    # A one-token output has no decode step, whatever vLLM counted after it.
    assert steps(1, [3], [1]) == []


def test_decode_step_tokens_from_unmerged_chunks_when_the_counts_miss_steps():
    def steps(output_tokens, accepted, chunks):
        return acceptance.decode_step_tokens(output_tokens, accepted, chunks, speculative=True)

    # n-gram, 10 tokens: [2, 0] accounts for 4 of the 9 later tokens; the 5 steps that
    # drafted nothing are not in the list, so where they fell is read from the chunks:
    # 7 chunks after the first for 7 steps (decode_steps), one per step.
    assert steps(10, [2, 0], [1, 1, 3, 1, 1, 1, 1, 1]) == [1, 3, 1, 1, 1, 1, 1]
    # The same request with two steps' chunks merged: neither tells the steps apart.
    assert steps(10, [2, 0], [1, 1, 4, 1, 1, 1, 1]) is None
    # A speculative record without per-step counts (vLLM did not report them): the chunks
    # when they number the steps (one token each then), else nothing.
    assert steps(4, None, [1, 1, 1, 1]) == [1, 1, 1]
    assert steps(4, None, [1, 2, 1]) is None
    assert steps(4, [], [1, 2, 1]) is None
    # A one-token output has no decode step; no chunks at all tell nothing.
    assert steps(1, None, [1]) == []
    assert steps(3, None, []) is None


def test_tokens_per_step_along_the_output():
    # Bucket 4. Request A: steps of 3, 1 and 2 tokens, starting at output indices 1 (bucket
    # 0), 4 and 5 (bucket 4). Request B: steps of 1 and 1 at indices 1 and 2 (bucket 0).
    # Request C's steps could not be told apart: left out.
    # Bucket 0: (3 + 1 + 1) / 3 steps; bucket 4: (1 + 2) / 2 steps.
    buckets, left_out = acceptance.tokens_per_step_along_output([[3, 1, 2], [1, 1], None], 4)
    assert [(start, n) for start, _, n in buckets] == [(0, 3), (4, 2)]
    assert [mean for _, mean, _ in buckets] == pytest.approx([5 / 3, 1.5])
    assert left_out == 1
    with pytest.raises(ValueError, match=r"^bucket_tokens must be at least 1$"):
        acceptance.tokens_per_step_along_output([], 0)


def test_tokens_per_step_along_the_output_in_buckets_of_one():
    # A step at output index 1 (2 tokens) and one at index 3 (1 token); with buckets of 1
    # token each step has its own bucket.
    buckets, left_out = acceptance.tokens_per_step_along_output([[2, 1]], 1)
    assert (buckets, left_out) == ([(1, 2.0, 1), (3, 1.0, 1)], 0)


def test_tokens_per_step_along_the_output_after_requests_left_out():
    # Bucket 4. Two requests left out and a one-token output (no steps) before one whose
    # steps of 4 and 1 tokens start at output indices 1 (bucket 0) and 5 (bucket 4).
    requests = [None, None, [], [4, 1]]
    assert acceptance.tokens_per_step_along_output(requests, 4) == ([(0, 4.0, 1), (4, 1.0, 1)], 2)


# ---------------------------------------------------------------- Leviathan et al. 2023


def test_expected_tokens_per_step_from_conditional_rates():
    # Positions 0-2 accepted with 0.75, then 0.8 given 0, then 0.5 given 0 and 1:
    # 1 + 0.75 + 0.75*0.8 + 0.75*0.8*0.5 = 1 + 0.75 + 0.6 + 0.3 = 2.65.
    assert prediction.expected_tokens_per_step([0.75, 0.8, 0.5]) == pytest.approx(2.65)
    # Equal rates give Leviathan's (1 - a^(g+1)) / (1 - a): a 0.5, g 2 -> 1.75.
    assert prediction.expected_tokens_per_step([0.5, 0.5]) == pytest.approx(1.75)
    # Nothing drafted or nothing accepted: the bonus token only.
    assert prediction.expected_tokens_per_step([]) == 1.0
    assert prediction.expected_tokens_per_step([0.0, 0.9]) == 1.0
    # Every draft accepted: g + 1.
    assert prediction.expected_tokens_per_step([1.0, 1.0, 1.0]) == 4.0


def test_expected_tokens_per_step_stops_where_a_position_was_never_reached():
    # per_position_conditional gives None after a position never accepted: nothing beyond it.
    assert prediction.expected_tokens_per_step([0.5, None, None]) == pytest.approx(1.5)
    with pytest.raises(ValueError, match=r"^an acceptance rate must be in \[0, 1\], got 1.5$"):
        prediction.expected_tokens_per_step([1.5])


def test_expected_tokens_per_step_equals_tau_from_the_counters():
    # 10 drafts, accepted at positions 0-2: 8, 6, 3. Conditional 0.8, 0.75, 0.5; the product
    # chain gives 1 + 0.8 + 0.6 + 0.3 = 2.7 = 1 + (8 + 6 + 3) / 10, vLLM's tau.
    conditional = acceptance.per_position_conditional([8, 6, 3], 10)
    assert prediction.expected_tokens_per_step(conditional) == pytest.approx(acceptance.acceptance_length(17, 10))


def test_predicted_speedup():
    # E 2.65 tokens per step, gamma 3, c 0.1: 2.65 / (3 * 0.1 + 1) = 2.0385...
    assert prediction.predicted_speedup(2.65, 3, 0.1) == pytest.approx(2.65 / 1.3)
    # Every draft accepted, gamma 3, c 0.5: 4 / 2.5 = 1.6
    assert prediction.predicted_speedup(4.0, 3, 0.5) == pytest.approx(1.6)
    # Nothing accepted: only the bonus token, pure overhead: 1 / (4 * 0.25 + 1) = 0.5
    assert prediction.predicted_speedup(1.0, 4, 0.25) == pytest.approx(0.5)


def test_predicted_speedup_edges():
    # Free drafting (c = 0): the speedup is the tokens per step.
    assert prediction.predicted_speedup(1.75, 2, 0.0) == pytest.approx(1.75)
    with pytest.raises(ValueError, match=r"^a step yields at least one token, got 0.5$"):
        prediction.predicted_speedup(0.5, 2, 0.1)
    with pytest.raises(ValueError, match=r"^cost ratio c must be >= 0, got -0.1$"):
        prediction.predicted_speedup(1.5, 2, -0.1)
    with pytest.raises(ValueError, match=r"^gamma \(draft length\) must be at least 1$"):
        prediction.predicted_speedup(1.5, 0, 0.1)


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


# ---------------------------------------------------------------- break-even


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


# ---------------------------------------------------------------- output fidelity


def test_first_divergence():
    assert output_fidelity.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert output_fidelity.first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert output_fidelity.first_divergence([1, 2, 3], [1, 2]) == 2
    assert output_fidelity.first_divergence([], [5]) == 0


def test_diverges_more_is_a_one_sided_fisher_test():
    # Arm: 8 of 10 differ; replicate: 1 of 10. Hypergeometric tail P(X >= 8) with 9
    # "differ" among 20, 10 drawn: [C(9,8)C(11,2) + C(9,9)C(11,1)] / C(20,10)
    # = (9*55 + 11) / 184756 = 506 / 184756 = 0.0027387.
    assert output_fidelity.diverges_more(8, 10, 1, 10) == pytest.approx(506 / 184756)
    # The other way round it is no evidence at all.
    assert output_fidelity.diverges_more(1, 10, 8, 10) > 0.99
    assert output_fidelity.diverges_more(1, 0, 1, 10) is None
