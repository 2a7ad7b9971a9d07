"""A deploy decision's rules from blocks measured by hand: the thresholds are the lowest
figure any block had for any category, rounded away from firing, and every annotation names
where its numbers came from."""

from experiments.measurement.deploy import alert_rules, guardrails
from experiments.measurement.deploy.alert_rules import GaugeAbove, RatioBelow
from experiments.measurement.deploy.guardrails import BreakEven, Counts, Deployment, Measured
from experiments.measurement.engine import vllm_metrics

DEPLOYMENT = Deployment(
    decision=3, service="chat", arm="n-gram k=3", positions=3, max_concurrency=16, metric="Engine-timed TPOT"
)


def _block(block: int, group: str, counts: Counts, experiment: int = 7) -> Measured:
    return Measured(experiment, "n-gram k=3", block, (1, 4), group, counts)


# rate, then acceptance at positions 0, 1, 2 (accepted at the position / drafts):
MEASURED = [
    _block(1, "code", Counts(10, 30, 15, (8, 5, 2))),  # 0.5; 0.8, 0.5, 0.2
    _block(2, "code", Counts(10, 30, 12, (7, 4, 1))),  # 0.4; 0.7, 0.4, 0.1
    _block(1, "prose", Counts(20, 60, 21, (12, 6, 3))),  # 0.35; 0.6, 0.3, 0.15
    _block(2, "prose", Counts(20, 60, 27, (14, 9, 4))),  # 0.45; 0.7, 0.45, 0.2
]
BREAK_EVENS = [BreakEven(7, "n-gram k=3", 11.34, 8.2, 14.9), BreakEven(9, "n-gram k=3 again", 13.0, None, None)]


def _rules(measured=MEASURED, break_evens=BREAK_EVENS, deployment=DEPLOYMENT) -> dict:
    return {rule.alert: rule for rule in guardrails.guardrail_rules(deployment, measured, break_evens)}


def test_a_requests_steps_count_as_vllms_counters_would():
    # Steps accepting 2, 0 and 3 of 3 drafted: position 0 in two steps, 1 in two, 2 in one.
    assert Counts.of_steps([2, 0, 3], [3, 3, 3]) == Counts(3, 9, 5, (2, 2, 1))
    assert Counts(1, 3, 2, (1, 1)) + Counts(2, 4, 1, (1, 0, 0)) == Counts(3, 7, 3, (2, 1, 0))


def test_the_thresholds_are_the_lowest_block_of_any_category():
    rules = _rules()

    assert list(rules) == [
        "SpeculativeAcceptanceLow",
        "SpeculativeAcceptanceLowAtPosition0",
        "SpeculativeAcceptanceLowAtPosition1",
        "SpeculativeAcceptanceLowAtPosition2",
        "SpeculativeConcurrencyAboveDecision",
        "SpeculativeConcurrencyAboveBreakEven",
    ]
    thresholds = [rule.condition.threshold for rule in rules.values()]
    # prose block 1's rate and positions 0, 1; code block 2's position 2; the decision's 16; 11.34 up to 11.4
    assert thresholds == [0.35, 0.6, 0.3, 0.1, 16, 11.4]
    position_1 = rules["SpeculativeAcceptanceLowAtPosition1"].condition
    assert isinstance(position_1, RatioBelow)
    assert position_1.numerator.promql() == f'{vllm_metrics.ACCEPTED_PER_POS}{{job="chat",position="1"}}'
    assert position_1.denominator.promql() == f'{vllm_metrics.NUM_DRAFTS}{{job="chat"}}'
    assert isinstance(rules["SpeculativeConcurrencyAboveBreakEven"].condition, GaugeAbove)
    assert rules["SpeculativeConcurrencyAboveBreakEven"].labels["severity"] == "critical"


def test_the_annotations_say_where_each_number_came_from():
    rules = _rules([*MEASURED, _block(1, "code", Counts(5, 15, 9, (4, 3, 2)), experiment=9)])
    acceptance = rules["SpeculativeAcceptanceLow"].annotations

    assert acceptance["measured"] == "code: 40.0% to 60.0% over 3 block(s); prose: 35.0% to 45.0% over 2 block(s)"
    assert acceptance["source"] == (
        "experiment #7, arm “n-gram k=3”, blocks 1, 2 at concurrency 1, 4; "
        "experiment #9, arm “n-gram k=3”, blocks 1 at concurrency 1, 4"
    )
    assert rules["SpeculativeConcurrencyAboveBreakEven"].annotations["source"] == (
        "experiment #7, arm “n-gram k=3”: the Engine-timed TPOT speedup falls to 1 at concurrency 11.3 "
        "(its interval reaches 1 between 8.2 and 14.9); experiment #9, arm “n-gram k=3 again”: the Engine-timed TPOT "
        "speedup falls to 1 at concurrency 13.0"
    )
    assert rules["SpeculativeConcurrencyAboveDecision"].annotations["source"] == (
        "decision #3: deploy n-gram k=3 up to concurrency 16"
    )


def test_thresholds_round_away_from_firing_on_a_measured_block():
    # 20 / 30 = 0.6667: down to 0.666 (not 0.667, which the block itself would have fired at)
    rules = _rules([_block(1, "code", Counts(10, 30, 20, (9, 7, 4)))], [BreakEven(7, "n-gram k=3", 4.01, None, None)])

    assert rules["SpeculativeAcceptanceLow"].condition.threshold == 0.666
    assert rules["SpeculativeConcurrencyAboveBreakEven"].condition.threshold == 4.1


def test_what_was_not_measured_gets_no_rule():
    # position 2 was never accepted (a lowest of 0: nothing falls below it); no break-even found
    only_two = [_block(1, "all prompts", Counts(10, 30, 9, (6, 3)))]

    assert list(_rules(only_two, [])) == [
        "SpeculativeAcceptanceLow",
        "SpeculativeAcceptanceLowAtPosition0",
        "SpeculativeAcceptanceLowAtPosition1",
        "SpeculativeConcurrencyAboveDecision",
    ]
    assert list(_rules([], [])) == ["SpeculativeConcurrencyAboveDecision"]
    # a block that accepted nothing: a lowest rate of 0
    nothing = [_block(1, "code", Counts(10, 30, 0, (0, 0, 0))), *MEASURED]
    assert "SpeculativeAcceptanceLow" not in _rules(nothing, [])


def test_the_file_reads_back_as_the_rules_it_was_written_from():
    text = guardrails.rules_file(DEPLOYMENT, MEASURED, BREAK_EVENS)

    assert text.startswith("# specdash guardrails of decision #3: deploy n-gram k=3 for chat up to concurrency 16.")
    assert "\ngroups:\n- name: specdash-decision-3-chat\n" in text
    assert alert_rules.read_rules(text) == guardrails.guardrail_rules(DEPLOYMENT, MEASURED, BREAK_EVENS)
