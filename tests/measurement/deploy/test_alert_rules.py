"""The rule shapes: the PromQL written, the same rule read back from its file, refusals of
anything else, and the evaluation on two readings of a server's /metrics (vLLM 0.32's format,
as tests/fixtures/vllm_metrics_preempting.txt has it), worked out by hand."""

import pytest

from experiments.measurement.deploy import alert_rules
from experiments.measurement.deploy.alert_rules import (
    FIRING,
    NO_DATA,
    OK,
    AlertRule,
    GaugeAbove,
    RatioBelow,
    RuleFileError,
    Selector,
)
from experiments.measurement.engine import vllm_metrics

JOB = (("job", "chat"),)
ACCEPTANCE = RatioBelow(
    Selector(vllm_metrics.NUM_ACCEPTED_TOKENS, JOB), Selector(vllm_metrics.NUM_DRAFT_TOKENS, JOB), 0.4, "10m"
)
POSITION_0 = RatioBelow(
    Selector(vllm_metrics.ACCEPTED_PER_POS, (*JOB, ("position", "0"))),
    Selector(vllm_metrics.NUM_DRAFTS, JOB),
    0.6,
    "10m",
)
RUNNING = GaugeAbove(Selector(vllm_metrics.REQUESTS_RUNNING, JOB), 4.0)


def _rule(alert: str, condition) -> AlertRule:
    return AlertRule(
        alert, condition, "15m", {"severity": "warning"}, {"summary": "{{ $value }} on {{ $labels.instance }}"}
    )


RULES = [
    _rule("Acceptance", ACCEPTANCE),
    _rule("Position0", POSITION_0),
    _rule("Running", RUNNING),
    _rule("RunningAboveOne", GaugeAbove(Selector(vllm_metrics.REQUESTS_RUNNING, JOB), 1.0)),
]


def test_the_promql_is_written_as_prometheus_reads_it():
    assert ACCEPTANCE.promql() == (
        'sum without (engine, position) (rate(vllm:spec_decode_num_accepted_tokens_total{job="chat"}[10m])) / '
        'sum without (engine, position) (rate(vllm:spec_decode_num_draft_tokens_total{job="chat"}[10m])) < 0.4'
    )
    assert POSITION_0.promql() == (
        'sum without (engine, position) (rate(vllm:spec_decode_num_accepted_tokens_per_pos_total{job="chat",'
        'position="0"}[10m])) / sum without (engine, position) (rate(vllm:spec_decode_num_drafts_total{job="chat"}'
        "[10m])) < 0.6"
    )
    assert RUNNING.promql() == 'sum without (engine, position) (vllm:num_requests_running{job="chat"}) > 4'


def test_a_written_file_reads_back_as_the_same_rules():
    text = alert_rules.rules_yaml("specdash-decision-3-chat", RULES, "line one\n\nline three")

    assert text.startswith("# line one\n#\n# line three\ngroups:\n- name: specdash-decision-3-chat\n")
    assert alert_rules.read_rules(text) == RULES


def test_edited_matchers_and_thresholds_are_read_as_written():
    expr = (
        'sum without (engine, position) (rate(vllm:spec_decode_num_accepted_tokens_total{namespace="prod", '
        'job="chat-v2"}[5m])) / sum without (engine, position) (rate(vllm:spec_decode_num_draft_tokens_total'
        '{namespace="prod", job="chat-v2"}[5m])) < 0.25'
    )

    [rule] = alert_rules.read_rules(f"groups:\n- name: g\n  rules:\n  - alert: A\n    expr: '{expr}'\n")

    assert rule.condition == RatioBelow(
        Selector(vllm_metrics.NUM_ACCEPTED_TOKENS, (("namespace", "prod"), ("job", "chat-v2"))),
        Selector(vllm_metrics.NUM_DRAFT_TOKENS, (("namespace", "prod"), ("job", "chat-v2"))),
        0.25,
        "5m",
    )
    assert rule.for_ == "0s"


REFUSED = {
    "not YAML": ("groups: [", "not YAML"),
    "no groups": ("rules: []", "no rule groups"),
    "a group without rules": ("groups:\n- name: g\n", "a group without `rules:`"),
    "a recording rule": ("groups:\n- name: g\n  rules:\n  - record: r\n    expr: up\n", "not an alerting rule"),
    "another expression": (
        "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n",
        "rule 'A': the expression has none of the shapes specdash writes: up == 0",
    ),
    "a threshold that is no number": (
        "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: sum without (engine, position) "
        "(vllm:num_requests_running) > many\n",
        "rule 'A': the threshold 'many' is not a number",
    ),
    "a regex matcher": (
        "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: sum without (engine, position) "
        '(vllm:num_requests_running{job=~"chat.*"}) > 4\n',
        'only name="value" matchers are read',
    ),
    "a rate window that is no duration": (
        "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: sum without (engine, position) (rate(a[ten])) "
        "/ sum without (engine, position) (rate(b[ten])) < 0.5\n",
        "the rate window 'ten' is not a Prometheus duration",
    ),
    "rate windows that differ": (
        "groups:\n- name: g\n  rules:\n  - alert: A\n    expr: sum without (engine, position) (rate(a[5m])) "
        "/ sum without (engine, position) (rate(b[10m])) < 0.5\n",
        "none of the shapes",
    ),
}


@pytest.mark.parametrize(("text", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_a_file_of_other_rules_is_refused_in_one_line(text, message):
    with pytest.raises(RuleFileError) as refused:
        alert_rules.read_rules(text)

    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


# ---------------------------------------------------------------- evaluation on two readings


def _page(drafts: int, draft_tokens: int, accepted: int, per_pos: list[int], running: int, engines: int = 1) -> str:
    """A vLLM /metrics page with these totals, split evenly over `engines` (even totals: they sum back)."""
    lines = []
    for engine in range(engines):
        labels = f'engine="{engine}",model_name="target"'
        lines += [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {running / engines}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{labels}}} 0.0",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{labels}}} 0.1",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{{{labels}}} 0.0",
            "# TYPE vllm:spec_decode_num_drafts_total counter",
            f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts / engines}",
            "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
            f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {draft_tokens / engines}",
            "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
            f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted / engines}",
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
        ]
        lines += [
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} {n / engines}'
            for i, n in enumerate(per_pos)
        ]
    return "\n".join(lines) + "\n"


# The window adds 20 drafts, 60 draft tokens, 21 accepted (12, 7, 2 by position); running 2 then 6.
BEFORE = _page(4, 12, 5, [3, 1, 1], running=2)
AFTER = _page(24, 72, 26, [15, 8, 3], running=6)


def test_each_rule_is_evaluated_on_what_the_counters_added():
    checks = [rule.check(alert_rules.window(BEFORE, AFTER)) for rule in RULES]

    # 21 / 60 = 0.35 < 0.4; 12 / 20 = 0.6 is not below 0.6; the lower reading 2 is not above 4, but above 1
    assert [(check.value, check.state) for check in checks] == [(0.35, FIRING), (0.6, OK), (2, OK), (2, FIRING)]


def test_the_engines_of_one_server_are_summed():
    # Twice the counts of BEFORE and AFTER, half on each engine: the same ratios.
    before, after = _page(8, 24, 10, [6, 2, 2], 2, engines=2), _page(48, 144, 52, [30, 16, 6], 6, engines=2)
    window = alert_rules.window(before, after)

    assert [rule.check(window).value for rule in RULES] == [0.35, 0.6, 2, 2]


def test_a_window_without_drafts_has_no_data_and_a_missing_position_too():
    idle_page = _page(24, 72, 26, [15, 8, 3], running=0)
    idle = alert_rules.window(idle_page, idle_page)
    assert [rule.check(idle).state for rule in RULES] == [NO_DATA, NO_DATA, OK, OK]

    position_5 = RatioBelow(
        Selector(vllm_metrics.ACCEPTED_PER_POS, (("position", "5"),)), Selector(vllm_metrics.NUM_DRAFTS), 0.1, "1m"
    )
    assert _rule("Position5", position_5).check(alert_rules.window(BEFORE, AFTER)).state == NO_DATA
