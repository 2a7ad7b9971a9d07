"""The batch-size schedule derived from an arm's settled verdicts per level, computed by hand,
and every derived schedule one the installed vLLM runs as written."""

import pytest

from experiments.measurement.deploy import batch_schedule
from experiments.measurement.stats.sequential import EQUIVALENT, FASTER, INCONCLUSIVE, NOT_WORTH_IT, OPEN, SLOWER
from tests.test_vllm_config_keys import expected_lookup, vllm_lookups

# (outcomes per level, k, max batch, the schedule worked out by hand)
CASES = {
    # isqrt(4 * 16) = 8
    "faster up to 4, slower from 16": ({1: FASTER, 4: FASTER, 16: SLOWER, 64: SLOWER}, 4, 64, [(1, 8, 4), (9, 64, 0)]),
    # isqrt(1 * 2) = 1; equivalent and not worth it both mean no speculation
    "equivalent and not worth it": ({1: FASTER, 2: EQUIVALENT, 8: NOT_WORTH_IT}, 3, 8, [(1, 1, 3), (2, 8, 0)]),
    # isqrt(4) = 2, isqrt(64) = 8, isqrt(512) = 22
    "non-monotone": (
        {1: FASTER, 4: SLOWER, 16: FASTER, 32: SLOWER},
        2,
        32,
        [(1, 2, 2), (3, 8, 0), (9, 22, 2), (23, 32, 0)],
    ),
    # the open level is left out: isqrt(1 * 16) = 4
    "an open level between": ({1: FASTER, 4: OPEN, 16: SLOWER}, 4, 16, [(1, 4, 4), (5, 16, 0)]),
    # isqrt(8) = 2; the top band runs to max_num_seqs, beyond the top level
    "max_num_seqs above the top level": ({1: FASTER, 8: SLOWER}, 5, 256, [(1, 2, 5), (3, 256, 0)]),
    # the lowest level's answer holds from batch size 1; isqrt(4 * 16) = 8
    "lowest level above 1": ({4: FASTER, 16: NOT_WORTH_IT}, 4, 16, [(1, 8, 4), (9, 16, 0)]),
    # slower first, faster above: isqrt(2 * 8) = 4
    "slower at small batches": ({2: SLOWER, 8: FASTER}, 1, 8, [(1, 4, 0), (5, 8, 1)]),
}


@pytest.mark.parametrize(("outcomes", "k", "max_batch", "expected"), CASES.values(), ids=CASES.keys())
def test_the_schedule_is_the_hand_computed_one_and_passes_specdashs_rule(outcomes, k, max_batch, expected):
    derived = batch_schedule.derive(outcomes, k=k, max_batch=max_batch)

    assert derived == expected
    assert batch_schedule.problem(batch_schedule.stored(expected), k=k) is None


@pytest.mark.parametrize(
    "outcomes",
    [
        {},
        {1: OPEN, 4: INCONCLUSIVE},
        {1: FASTER, 4: FASTER, 16: OPEN},  # every settled level faster: plain k
        {1: SLOWER, 4: EQUIVALENT, 16: NOT_WORTH_IT},  # none faster: no speculation
    ],
)
def test_no_schedule_when_one_k_everywhere_or_none_is_the_answer(outcomes):
    assert batch_schedule.derive(outcomes, k=4, max_batch=16) is None


def test_levels_beyond_the_max_batch_and_a_k_below_1_are_refused():
    with pytest.raises(ValueError, match="every level must be from 1 to the max batch size"):
        batch_schedule.derive({1: FASTER, 32: SLOWER}, k=4, max_batch=16)
    with pytest.raises(ValueError, match="must be at least 1"):
        batch_schedule.derive({1: FASTER, 8: SLOWER}, k=0, max_batch=16)


@pytest.mark.vllm
def test_every_derived_schedule_runs_in_the_installed_vllm_as_derived():
    asked = [
        {"schedule": batch_schedule.stored(expected), "max": max_batch, "k": k}
        for _, k, max_batch, expected in CASES.values()
    ]

    answers = vllm_lookups(asked)

    for question, answer in zip(asked, answers, strict=True):
        assert answer == {"lookup": expected_lookup(question["schedule"], max_batch=question["max"])}, question
