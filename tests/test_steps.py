"""Step accounting against hand-computed cases: the pure computation on hand-made records,
then what the analysis stores, what the experiment page shows and what the API returns."""

import math

import pytest

from experiments import stats, steps
from experiments.steps import RequestSteps

BASE, NGRAM = 1, 2


def _request(arm, block, output_tokens, ttft, e2e, accepted=None, *, level=1):
    return RequestSteps(arm, level, block, output_tokens, ttft, e2e, accepted, speculative=arm != BASE)


# Block 1: the baseline's two requests emit 10 + 5 tokens after the first in 100 + 50 ms, one
# token a step: 15 steps, 10 ms a step. A one-token request has no decode phase.
# The n-gram arm drafts on two of the first request's steps (accepting 2, then 1: 3 + 2
# tokens) and nothing on the other five (one token each): 7 steps in 84 ms. Its second
# request takes its 5 tokens in one step (4 accepted + bonus) in 24 ms.
# Arm: 15 tokens in 8 steps (1.875 a step), 108 ms (13.5 ms a step): 1.35 baseline steps.
# Block 2: baseline 10 tokens in 10 steps, 200 ms (20 ms a step); the arm's first request
# again, 7 steps in 168 ms (24 ms a step, 10/7 tokens a step): 1.2 baseline steps.
RECORDS = [
    _request(BASE, 1, 11, 50.0, 150.0),
    _request(BASE, 1, 6, 40.0, 90.0),
    _request(BASE, 1, 1, 30.0, 30.0),
    _request(NGRAM, 1, 11, 50.0, 134.0, [2, 1]),
    _request(NGRAM, 1, 6, 40.0, 64.0, [4]),
    _request(NGRAM, 1, 1, 30.0, 30.0, []),
    _request(BASE, 2, 11, 50.0, 250.0),
    _request(NGRAM, 2, 11, 50.0, 218.0, [2, 1]),
    # A speculative request that did not report its steps: unknown, left out.
    _request(NGRAM, 2, 11, 50.0, 999.0, None),
]


def _rows():
    return {(row.arm, row.level): row for row in steps.step_accounting(RECORDS, baseline=BASE, arms=[NGRAM])}


def test_decode_phase_of_one_request():
    assert steps.decode_phase(_request(NGRAM, 1, 11, 50.0, 134.0, [2, 1])) == (10, 7, 84.0)
    assert steps.decode_phase(_request(BASE, 1, 11, 50.0, 150.0)) == (10, 10, 100.0)
    assert steps.decode_phase(_request(BASE, 1, 1, 30.0, 30.0)) is None
    assert steps.decode_phase(_request(NGRAM, 1, 11, 50.0, 134.0, None)) is None
    assert steps.decode_phase(_request(BASE, 1, 11, None, None)) is None


def test_baseline_row():
    row = _rows()[(BASE, 1)]
    assert (row.blocks, row.requests, row.steps) == (2, 3, 25)
    assert row.tokens_per_step == pytest.approx(1.0)
    assert row.step_ms == pytest.approx(math.sqrt(10 * 20))
    assert row.relative_cost is None
    assert row.margin is None


def test_arm_row_per_block_then_geometric_mean():
    row = _rows()[(NGRAM, 1)]
    assert (row.blocks, row.requests, row.steps) == (2, 3, 15)
    assert row.tokens_per_step == pytest.approx(math.sqrt(1.875 * 10 / 7))
    assert row.step_ms == pytest.approx(math.sqrt(13.5 * 24))
    assert row.baseline_step_ms == pytest.approx(math.sqrt(10 * 20))
    assert row.relative_cost.block_ratios == pytest.approx((1.35, 1.2))
    assert row.relative_cost.point == pytest.approx(math.sqrt(1.35 * 1.2))
    assert row.margin.block_ratios == pytest.approx((1.875 / 1.35, 10 / 7 / 1.2))
    # The columns divide exactly: cost = step / baseline step, margin = tokens per step / cost.
    assert row.relative_cost.point == pytest.approx(row.step_ms / row.baseline_step_ms)
    assert row.margin.point == pytest.approx(row.tokens_per_step / row.relative_cost.point)
    # The same block-level t-interval as the speedups.
    expected = stats.block_interval([1.35, 1.2])
    assert (row.relative_cost.lo, row.relative_cost.hi) == pytest.approx((expected.lo, expected.hi))


def test_one_block_is_a_point_without_interval():
    records = [r for r in RECORDS if r.block == 1]
    row = {r.arm: r for r in steps.step_accounting(records, baseline=BASE, arms=[NGRAM])}[NGRAM]
    assert row.margin.point == pytest.approx(1.875 / 1.35)
    assert not row.margin.has_interval
    assert row.margin.note == "one block, no interval"
    assert "(one block: no interval)" in steps.sentence("n-gram", [row])


def test_only_blocks_the_baseline_also_ran_are_compared():
    records = [*RECORDS, _request(NGRAM, 3, 11, 50.0, 90.0, [9])]
    row = {r.arm: r for r in steps.step_accounting(records, baseline=BASE, arms=[NGRAM])}[NGRAM]
    assert (row.blocks, row.steps) == (2, 15)


def test_a_level_without_baseline_has_no_cost():
    records = [*RECORDS, _request(NGRAM, 1, 11, 50.0, 90.0, [9], level=4)]
    row = {(r.arm, r.level): r for r in steps.step_accounting(records, baseline=BASE, arms=[NGRAM])}[(NGRAM, 4)]
    assert (row.steps, row.tokens_per_step, row.step_ms) == (1, pytest.approx(10.0), pytest.approx(40.0))
    assert (row.baseline_step_ms, row.margin) == (None, None)
    assert steps.sentence("n-gram", [row]) == "n-gram: no level where both it and the baseline recorded decode steps."


def test_sentence_says_by_how_much_the_yield_exceeds_the_cost():
    row = _rows()[(NGRAM, 1)]
    text = steps.sentence("n-gram k=4", [row])
    assert text.startswith("n-gram k=4: at concurrency 1 a step costs 1.27× [")
    assert "a baseline step and yields 1.64 tokens, 29% more than its cost [" in text


def test_sentence_when_the_yield_falls_short():
    records = [_request(BASE, 1, 11, 50.0, 150.0), _request(NGRAM, 1, 11, 50.0, 330.0, [2, 1])]
    row = {r.arm: r for r in steps.step_accounting(records, baseline=BASE, arms=[NGRAM])}[NGRAM]
    # 7 steps in 280 ms: 40 ms a step, 4 baseline steps, for 10/7 tokens a step.
    assert row.margin.point == pytest.approx(10 / 7 / 4)
    assert "a step costs 4.00× a baseline step and yields 1.43 tokens, 64% less than its cost" in steps.sentence(
        "n-gram", [row]
    )


def test_json_round_trip_of_a_row():
    data = _rows()[(NGRAM, 1)].as_json()
    assert data["relative_cost"]["point"] == pytest.approx(math.sqrt(1.62))
    assert data["margin"]["block_ratios"] == pytest.approx([1.875 / 1.35, 10 / 7 / 1.2])
    assert _rows()[(BASE, 1)].as_json()["relative_cost"] is None
