"""experiments.measurement.engine.stream_fidelity on hand-made streams. No database."""

import pytest

from experiments.measurement.engine import stream_fidelity as sf
from experiments.measurement.engine.stream_fidelity import RequestTiming, StreamCheck


def _timing(times, *, tokens=None, steps=None, decode=None, queue=None, ttft=None):
    tokens = len(times) if tokens is None else tokens
    return RequestTiming(
        chunk_times_ms=times,
        output_tokens=tokens,
        decode_steps=tokens - 1 if steps is None else steps,
        server_decode_ms=decode,
        server_queue_ms=queue,
        server_ttft_ms=ttft,
    )


def test_a_clean_stream_is_not_distorted():
    # 11 tokens, one chunk every 4 ms after the first at 20 ms; the engine decoded them in 40 ms.
    times = [20.0 + 4.0 * i for i in range(11)]
    check = sf.request_check(_timing(times, decode=40.0, queue=1.0, ttft=17.0))
    assert check.span_ratio == pytest.approx(1.0)  # (60 - 20) / 40
    assert check.longest_wait_steps == pytest.approx(1.0)  # every gap is one 4 ms step
    assert check.first_token_lag_ms == pytest.approx(2.0)  # 20 - 1 - 17
    assert check.first_token_lag_steps == pytest.approx(0.5)
    assert not check.distorted
    assert not check.stalled
    assert not check.burst


def test_a_burst_at_the_end_is_distorted():
    # The engine took 156 ms over 47 steps; all 48 chunks reached the client at 173.9 ms.
    check = sf.request_check(_timing([173.9] * 48, decode=156.0, queue=0.5, ttft=15.0))
    assert check.span_ratio == 0.0
    assert check.burst
    assert check.distorted
    # The first token waited 173.9 - 15.5 = 158.4 ms beyond the engine's account: 158.4 / (156 / 47) steps.
    assert check.first_token_lag_ms == pytest.approx(158.4)
    assert check.first_token_lag_steps == pytest.approx(158.4 / (156.0 / 47))
    assert check.longest_wait_steps == check.first_token_lag_steps
    assert check.stalled
    assert check.late_first_token


def test_a_stall_in_the_middle_is_counted_but_bends_neither_tpot_nor_ttft():
    # 15 tokens at 3.4 ms a step, nothing for 110 ms, then the other 33 at once: the span
    # (47.6 + 110 = 157.6 ms from the first chunk) matches the engine's 156 ms, so the TPOT is
    # right; the first token was on time, so the TTFT is too. Only the wait is off.
    first = [10.0 + 3.4 * i for i in range(15)]
    times = first + [first[-1] + 110.0] * 33
    check = sf.request_check(_timing(times, decode=156.0, queue=1.0, ttft=7.0))
    assert check.span_ratio == pytest.approx((first[-1] + 110.0 - 10.0) / 156.0)
    assert not check.span_off
    assert check.longest_wait_steps == pytest.approx(110.0 / (156.0 / 47))  # 33.1 steps
    assert check.stalled
    assert not check.late_first_token
    assert not check.distorted


def test_a_late_first_token_with_the_stream_on_time_is_counted_not_distorted():
    # The engine made the first token at 1 + 7 = 8 ms; it reached the client at 40, then the
    # stream kept pace: 32 ms is 8 steps of 4 ms beyond the engine's account, taken before the
    # stream started (the front end taking the request in), so the span is whole.
    times = [40.0 + 4.0 * i for i in range(11)]
    check = sf.request_check(_timing(times, decode=40.0, queue=1.0, ttft=7.0))
    assert not check.span_off
    assert check.first_token_lag_steps == pytest.approx(8.0)
    assert check.late_first_token
    assert not check.distorted
    # Held back with the chunks behind it instead, the first chunk comes with the next three at
    # 52 ms: the span is 12 ms short of the engine's 40 (0.7, off by more than 10 % + 1 step of 10).
    held = [52.0] * 4 + times[4:]
    assert sf.request_check(_timing(held, decode=40.0, queue=1.0, ttft=7.0)).distorted
    # Without the engine's queue and first-token times the lag cannot be told.
    assert sf.request_check(_timing(times, decode=40.0)).first_token_lag_steps is None


def test_the_span_tolerance_allows_one_engine_step_more():
    # 5 decode steps of 10 ms: 10 % + one step (20 %) = 30 % of slack on the 50 ms span.
    assert not sf.request_check(_timing([0.0, 10, 20, 30, 40, 64.0], decode=50.0)).span_off  # 1.28
    assert sf.request_check(_timing([0.0, 10, 20, 30, 40, 66.0], decode=50.0)).span_off  # 1.32
    assert not sf.request_check(_timing([0.0, 10, 20, 30, 34, 36.0], decode=50.0)).span_off  # 0.72
    assert sf.request_check(_timing([0.0, 10, 20, 30, 32, 34.0], decode=50.0)).span_off  # 0.68


def test_a_wait_of_exactly_five_steps_is_not_a_stall():
    times = [0.0, 10.0, 20.0, 70.0]  # the last gap is 50 ms, 5 steps of 10 ms (decode 30 ms over 3 steps)
    assert sf.request_check(_timing(times, decode=30.0)).longest_wait_steps == pytest.approx(5.0)
    assert not sf.request_check(_timing(times, decode=30.0)).stalled
    assert sf.request_check(_timing([0.0, 10.0, 20.0, 70.1], decode=30.0)).stalled


def test_speculative_steps_count_as_steps_not_tokens():
    # 9 tokens in 3 chunks after the first (3 steps of 3 tokens, 12 ms each): no wait beyond one step.
    check = sf.request_check(_timing([5.0, 17.0, 29.0, 41.0], tokens=10, steps=3, decode=36.0))
    assert check.span_ratio == pytest.approx(1.0)
    assert check.longest_wait_steps == pytest.approx(1.0)
    assert not check.distorted


def test_what_cannot_be_checked():
    assert sf.request_check(_timing([12.0], decode=0.0)) == StreamCheck()  # one token
    assert sf.request_check(_timing([1.0, 2.0, 3.0], decode=None)) == StreamCheck()  # no engine time
    assert sf.request_check(_timing([1.0, 2.0, 3.0], decode=0.0)) == StreamCheck()
    assert not StreamCheck().checked
    assert not StreamCheck().distorted


def test_run_stream_counts_and_flags_above_five_percent():
    clean = StreamCheck(1.0, 1.0, 1.0, 0.25, 10)
    burst = StreamCheck(0.0, 40.0, 160.0, 40.0, 10)  # late first token too
    stall = StreamCheck(1.0, 9.0, 1.0, 0.25, 10)  # between chunks: not distorted
    late = StreamCheck(1.0, 6.0, 24.0, 6.0, 10)  # taken in late, then on time: not distorted
    off = StreamCheck(0.7, 2.0, 1.0, 0.25, 10)  # off by 30 %, more than 10 % + 1 step of 10
    summary = sf.run_stream([clean] * 15 + [burst, stall, late, off] + [StreamCheck()])
    assert (summary.checked, summary.distorted, summary.stalled, summary.bursts) == (19, 2, 3, 1)
    assert summary.late_first_tokens == 2
    assert summary.span_ratio_p50 == 1.0
    assert summary.distorted_share == pytest.approx(2 / 19)
    assert summary.flagged
    # 1 of 20 (5 %) is within the tolerance; 2 of 39 (5.1 %) is not.
    assert not sf.run_flagged(20, 1)
    assert sf.run_flagged(39, 2)
    assert not sf.run_flagged(0, 0)
    assert not sf.run_flagged(None, None)


def test_server_tpot():
    assert sf.server_tpot_ms(156.0, 48) == pytest.approx(156.0 / 47)
    assert sf.server_tpot_ms(0.0, 1) is None
    assert sf.server_tpot_ms(None, 48) is None
