"""experiments/measurement/stats/acceptance.py against hand-computed cases. No database."""

import pytest

from experiments.measurement.stats import acceptance


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
