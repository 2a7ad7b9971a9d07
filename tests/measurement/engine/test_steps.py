"""Step accounting (experiments/measurement/engine/steps.py) against hand-computed cases on
hand-made records. No database: what the analysis stores of it, the page shows and the API
returns is tested in tests/analysis/test_step_accounting.py."""

import math
from dataclasses import replace

import pytest

from experiments.measurement.engine import steps
from experiments.measurement.engine.steps import RequestSteps
from experiments.measurement.stats import intervals

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
    assert steps.decode_phase(_request(BASE, 1, 11, None, 150.0)) is None
    assert steps.decode_phase(_request(BASE, 1, 11, 50.0, None)) is None
    assert steps.decode_phase(_request(BASE, 1, 2, 50.0, 60.0)) == (1, 1, 10.0)


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
    expected = intervals.block_interval([1.35, 1.2])
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


def test_a_run_without_decode_time_has_nothing_to_divide():
    # Every token of block 2's requests arrived in the first chunk: E2E = TTFT, 0 ms of decoding.
    records = [r for r in RECORDS if r.block == 1] + [
        _request(BASE, 2, 11, 50.0, 50.0),
        _request(NGRAM, 2, 11, 50.0, 50.0, [2, 1]),
        _request(BASE, 3, 11, 50.0, 50.5),
        _request(NGRAM, 3, 11, 50.0, 50.7, [2, 1]),
    ]
    rows = {r.arm: r for r in steps.step_accounting(records, baseline=BASE, arms=[NGRAM])}
    assert rows[NGRAM].relative_cost.block_ratios == pytest.approx((1.35, (0.7 / 7) / (0.5 / 10)))
    assert steps.step_accounting(records[-4:-2], baseline=BASE, arms=[]) == []


def test_levels_in_order_each_arm_after_the_baseline():
    records = [*RECORDS, *(_request(arm, 1, 11, 50.0, 90.0, [9], level=4) for arm in (NGRAM, BASE))]
    rows = steps.step_accounting(records, baseline=BASE, arms=[NGRAM])
    assert [(row.arm, row.level) for row in rows] == [(BASE, 1), (BASE, 4), (NGRAM, 1), (NGRAM, 4)]
    text = steps.sentence("n-gram", [row for row in rows if row.arm == NGRAM])
    assert "break-even; at concurrency 4 a step costs 1.00 baseline steps and yields 10.00 tokens, 900% more" in text


def test_sentence_says_by_how_much_the_yield_exceeds_the_cost():
    row = _rows()[(NGRAM, 1)]
    text = steps.sentence("n-gram k=4", [row])
    assert text == (
        "n-gram k=4: at concurrency 1 a step costs 1.27 baseline steps [0.60, 2.69] and yields 1.64 tokens, "
        "29% more than it costs [−52%, +242%], not told apart from break-even."
    )


def test_sentence_when_the_yield_falls_short():
    records = [_request(BASE, 1, 11, 50.0, 150.0), _request(NGRAM, 1, 11, 50.0, 330.0, [2, 1])]
    row = {r.arm: r for r in steps.step_accounting(records, baseline=BASE, arms=[NGRAM])}[NGRAM]
    # 7 steps in 280 ms: 40 ms a step, 4 baseline steps, for 10/7 tokens a step.
    assert row.margin.point == pytest.approx(10 / 7 / 4)
    assert steps.sentence("n-gram", [row]) == (
        "n-gram: at concurrency 1 a step costs 4.00 baseline steps and yields 1.43 tokens, 64% less than it costs "
        "(one block: no interval)."
    )


def test_json_round_trip_of_a_row():
    data = _rows()[(NGRAM, 1)].as_json()
    assert data["relative_cost"]["point"] == pytest.approx(math.sqrt(1.62))
    assert data["margin"]["block_ratios"] == pytest.approx([1.875 / 1.35, 10 / 7 / 1.2])
    assert _rows()[(BASE, 1)].as_json()["relative_cost"] is None


@pytest.mark.parametrize(
    ("arm_decode_ms", "outcome"),
    [
        ((70.0, 72.0, 74.0), ", so the extra tokens pay for the dearer step."),
        ((140.0, 150.0, 160.0), ", so they do not pay for it."),
        ((90.0, 100.0, 110.0), ", not told apart from break-even."),
    ],
)
def test_sentence_says_whether_the_interval_clears_break_even(arm_decode_ms, outcome):
    # Every block: the baseline's 10 steps take 100 ms; the arm's 7 steps (10/7 tokens a step) take arm_decode_ms.
    records = [_request(BASE, block, 11, 50.0, 150.0) for block in (1, 2, 3)] + [
        _request(NGRAM, block, 11, 50.0, 50.0 + ms, [2, 1]) for block, ms in zip((1, 2, 3), arm_decode_ms, strict=True)
    ]
    row = {r.arm: r for r in steps.step_accounting(records, baseline=BASE, arms=[NGRAM])}[NGRAM]
    assert row.relative_cost.block_ratios == pytest.approx(tuple(ms / 7 / 10 for ms in arm_decode_ms))
    assert steps.sentence("n-gram", [row]).endswith(outcome)


def test_a_plain_request_times_only_the_steps_after_its_first_chunk():
    # 11 tokens, the first chunk carried 3 (the client fell behind a fast server): E2E - TTFT
    # = 80 ms covers the 8 steps after it, 10 ms each, not 10 steps of 8 ms.
    request = RequestSteps(2, 1, 1, 11, 100.0, 180.0, None, speculative=False, first_chunk_tokens=3)
    assert steps.decode_phase(request) == (8, 8, 80.0)
    # Every token in the first chunk: no decode phase to time.
    whole = RequestSteps(2, 1, 1, 11, 100.0, 100.0, None, speculative=False, first_chunk_tokens=11)
    assert steps.decode_phase(whole) is None
    # The usual one-token first chunk: output tokens - 1 steps.
    usual = RequestSteps(2, 1, 1, 11, 100.0, 200.0, None, speculative=False)
    assert steps.decode_phase(usual) == (10, 10, 100.0)


def test_the_engines_decode_time_is_used_where_the_server_reported_it():
    # 11 tokens, of which the client read all but the last in its first chunk (TTFT 100 ms,
    # E2E 101 ms): timed at the client that is 1 step in 1 ms. The engine timed its first and
    # last token 90 ms apart: all 10 steps after the first token, 9 ms each.
    late = RequestSteps(
        2, 1, 1, 11, 100.0, 101.0, None, speculative=False, server_decode_ms=90.0, first_chunk_tokens=10
    )
    assert steps.decode_phase(late) == (10, 10, 90.0)
    # The whole output in one chunk: no decode time at the client, the engine's 90 ms still count.
    whole = RequestSteps(
        2, 1, 1, 11, 100.0, 100.0, None, speculative=False, server_decode_ms=90.0, first_chunk_tokens=11
    )
    assert steps.decode_phase(whole) == (10, 10, 90.0)
    # Speculative: the steps still come from vLLM's per-step counts (2 + 1 accepted, 5 plain: 7).
    spec = RequestSteps(3, 1, 1, 11, 50.0, 134.0, [2, 1], speculative=True, server_decode_ms=70.0)
    assert steps.decode_phase(spec) == (10, 7, 70.0)
    # Without its per-step counts a speculative request's steps are unknown, timed or not.
    assert (
        steps.decode_phase(RequestSteps(3, 1, 1, 11, 50.0, 134.0, None, speculative=True, server_decode_ms=70.0))
        is None
    )
    # One token: nothing to decode whatever the server says.
    assert (
        steps.decode_phase(RequestSteps(2, 1, 1, 1, 50.0, 50.0, None, speculative=False, server_decode_ms=0.0)) is None
    )
    # No client timings (they are not needed): the engine's time still counts.
    assert steps.decode_phase(RequestSteps(2, 1, 1, 3, None, None, None, speculative=False, server_decode_ms=8.0)) == (
        2, 2, 8.0,
    )  # fmt: skip


def test_the_cost_ratio_uses_the_engines_time_when_the_client_read_a_calibration_run_at_once():
    # A draft model served alone outruns the client: every output arrives in one chunk, so at
    # the client it has no decode phase and no step time. With the engine's time: 10 steps in
    # 20 ms (2 ms a step) against the baseline's 10 steps in 100 ms: c = 0.2.
    records = [
        RequestSteps(BASE, 1, 1, 11, 50.0, 150.0, None, speculative=False, server_decode_ms=100.0),
        RequestSteps(9, 1, 1, 11, 30.0, 30.0, None, speculative=False, server_decode_ms=20.0, first_chunk_tokens=11),
    ]
    rows = {row.arm: row for row in steps.step_accounting(records, baseline=BASE, arms=[9])}
    assert rows[9].step_ms == pytest.approx(2.0)
    assert rows[9].relative_cost.point == pytest.approx(0.2)
    # The same records without the engine's time: the calibration arm has no row.
    without = [replace(r, server_decode_ms=None) for r in records]
    assert 9 not in {row.arm for row in steps.step_accounting(without, baseline=BASE, arms=[9])}
