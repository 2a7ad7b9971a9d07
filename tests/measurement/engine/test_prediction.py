"""Leviathan's prediction from the measured draft cost (experiments/measurement/engine/prediction.py), on
hand-computed cases."""

import pytest

from experiments.measurement.engine import prediction
from experiments.measurement.engine.prediction import Counters, Interval, SpeculativeArm
from experiments.measurement.engine.steps import StepRow
from experiments.measurement.stats import acceptance, intervals

DRAFT = SpeculativeArm(id=1, label="draft k=3", method="draft_model", gamma=3, draft_model="/m/draft")


def _cost_row(level: int, costs: list[float]) -> StepRow:
    """A calibration arm's step row whose per-block relative costs are `costs`."""
    estimate = intervals.block_interval(costs)
    return StepRow(
        arm=9, level=level, blocks=len(costs), requests=8, steps=80, tokens_per_step=1.0,
        step_ms=estimate.point * 20.0, baseline_step_ms=20.0, relative_cost=estimate, margin=estimate,
    )  # fmt: skip


def _predict(arm=DRAFT, *, levels=(1,), counters=None, calibration=None, measured=None) -> dict:
    return prediction.arm_prediction(
        arm,
        list(levels),
        counters=counters if counters is not None else {1: Counters(drafts=100, accepted_per_pos=[75, 60, 30])},
        calibration=calibration if calibration is not None else {"/m/draft": {1: _cost_row(1, [0.1, 0.1])}},
        measured=measured if measured is not None else {1: Interval(2.0, 1.9, 2.1)},
    )


def test_prediction_from_the_acceptance_by_position_and_the_measured_cost():
    [point] = _predict()["points"]
    # Conditional 0.75, 0.8, 0.5: E = 1 + 0.75 + 0.6 + 0.3 = 2.65; c = 0.1; 2.65 / (3 * 0.1 + 1) = 2.0385.
    assert point["conditional"] == pytest.approx([0.75, 0.8, 0.5])
    assert point["tokens_per_step"] == pytest.approx(2.65)
    assert point["cost_ratio"] == pytest.approx(0.1)
    assert point["predicted"] == pytest.approx(2.65 / 1.3)
    assert point["cost_source"] == prediction.MEASURED
    assert point["agreement"] == "agree"  # 2.0385 inside [1.9, 2.1]


def test_the_cost_interval_gives_the_prediction_interval_with_its_ends_swapped():
    # Blocks at c 0.1 and 0.2: geometric mean sqrt(0.02) = 0.1414; the interval on the log scale
    # with 1 degree of freedom is wide. A dearer draft (c high) gives the lower prediction.
    row = _cost_row(1, [0.1, 0.2])
    [point] = _predict(calibration={"/m/draft": {1: row}})["points"]
    c = row.relative_cost
    assert point["cost_ratio"] == pytest.approx(0.02**0.5)
    assert point["predicted_lo"] == pytest.approx(2.65 / (3 * c.hi + 1))
    assert point["predicted_hi"] == pytest.approx(2.65 / (3 * c.lo + 1))
    assert point["predicted_lo"] < point["predicted"] < point["predicted_hi"]


def test_no_prediction_without_a_calibration_arm():
    [point] = _predict(calibration={})["points"]
    assert point["cost_source"] == prediction.NO_CALIBRATION
    assert (point["predicted"], point["cost_ratio"], point["agreement"]) == (None, None, None)
    assert point["tokens_per_step"] == pytest.approx(2.65)  # the acceptance side is still shown
    assert point["measured"] == 2.0


def test_no_prediction_at_a_level_the_calibration_did_not_measure():
    points = _predict(levels=(1, 4), counters={1: Counters(100, [75, 60, 30]), 4: Counters(100, [50, 25, 0])})
    first, second = points["points"]
    assert first["predicted"] is not None
    assert second["cost_source"] == prediction.NO_CALIBRATION_AT_LEVEL
    assert second["predicted"] is None
    assert second["tokens_per_step"] == pytest.approx(1.75)  # 1 + 0.5 + 0.25 + 0


@pytest.mark.parametrize(
    ("method", "start"),
    [
        ("eagle", "not measured: an EAGLE head"),
        ("eagle3", "not measured: an EAGLE-3 head"),
        ("mtp", "not measured: MTP layers"),
        ("ngram", "not measured: n-gram lookup"),
        ("ngram_gpu", "not measured: n-gram lookup on the GPU"),
        ("suffix", "not measured: suffix decoding"),
    ],
)
def test_other_methods_have_no_draft_model_to_calibrate(method, start):
    arm = SpeculativeArm(id=2, label=method, method=method, gamma=3, draft_model=None)
    [point] = _predict(arm)["points"]
    assert point["cost_source"].startswith(start)
    assert point["predicted"] is None


def test_agreement_compares_the_predicted_interval_with_the_measured_one():
    measured = Interval(1.6, 1.5, 1.7)
    assert prediction.agreement(Interval(1.45, 1.4, 1.5), measured) == "agree"  # touching ends overlap
    assert prediction.agreement(Interval(1.45, 1.3, 1.55), measured) == "agree"  # the point outside, the interval in
    assert prediction.agreement(Interval(1.35, 1.3, 1.49), measured) == "part"
    assert prediction.agreement(Interval(1.8, 1.71, 1.9), measured) == "part"


def test_a_measured_interval_that_holds_1_and_the_whole_prediction_is_not_testable():
    wide = Interval(1.2, 0.9, 2.0)
    assert prediction.agreement(Interval(1.5, 1.4, 1.6), wide) == "not testable"
    assert prediction.agreement(Interval(1.5, 0.9, 2.0), wide) == "not testable"  # equal ends count as held
    # It holds 1 but not the whole prediction (1.9 to 2.2): it rules out part of it, a test.
    assert prediction.agreement(Interval(2.0, 1.9, 2.2), wide) == "agree"
    # It holds the whole prediction but not 1: it tells the model from no speedup.
    assert prediction.agreement(Interval(1.5, 1.4, 1.6), Interval(1.5, 1.1, 2.0)) == "agree"
    # A prediction of a slowdown, 0.8 [0.7, 0.9], inside [0.5, 1.2]: holds 1 and all of it.
    assert prediction.agreement(Interval(0.8, 0.7, 0.9), Interval(0.9, 0.5, 1.2)) == "not testable"


def test_no_test_without_an_interval_on_either_side():
    measured = Interval(1.6, 1.5, 1.7)
    assert prediction.agreement(Interval(1.6), measured) is None  # c from one block
    assert prediction.agreement(Interval(1.6, 1.5, 1.7), Interval(1.6)) is None  # measured in one block
    assert prediction.agreement(None, measured) is None
    assert prediction.agreement(Interval(1.6, 1.5, 1.7), None) is None


def test_the_cost_interval_decides_the_test():
    # c per block 0.1, 0.12, 0.14: logs -2.302585, -2.120264, -1.966113, mean -2.129654, sd
    # 0.168433; half-width t(2) * sd / sqrt(3) = 4.302653 * 0.168433 / 1.732051 = 0.418410, so
    # c = 0.11888 [0.07823, 0.18064]. Predicted 2.65 / (3c + 1) = 1.9534 [1.7186, 2.1463].
    # Against 2.3 [2.0, 2.6] the point lies below the measured interval, but c's interval
    # reaches into it: they agree.
    cost = {"/m/draft": {1: _cost_row(1, [0.1, 0.12, 0.14])}}
    [point] = _predict(calibration=cost, measured={1: Interval(2.3, 2.0, 2.6)})["points"]
    assert (point["predicted"], point["predicted_lo"], point["predicted_hi"]) == pytest.approx(
        (1.9534, 1.7186, 2.1463), abs=1e-4
    )
    assert point["agreement"] == "agree"
    # The measured interval, [0.089, 6.574], holds 1 and all of [1.72, 2.15]: not testable.
    [wide] = _predict(calibration=cost, measured={1: Interval(1.46, 0.089, 6.574)})["points"]
    assert wide["agreement"] == "not testable"
    assert prediction.sentence("d", {"points": [wide]}) == (
        "d: at concurrency 1 predicted 1.95 [1.72, 2.15] (c = 0.119 [0.078, 0.181]), measured 1.46 [0.09, 6.57]: "
        "not testable, the measured interval holds 1 and the whole predicted interval, so it cannot tell the model "
        "from a speculation that changes nothing."
    )


def test_a_cost_from_one_block_gives_a_prediction_without_an_interval_and_no_test():
    # 2.0385 lies inside [1.9, 2.1], but without c's spread the prediction's is unknown.
    [point] = _predict(calibration={"/m/draft": {1: _cost_row(1, [0.1])}})["points"]
    assert point["predicted"] == pytest.approx(2.65 / 1.3)
    assert (point["predicted_lo"], point["predicted_hi"], point["agreement"]) == (None, None, None)
    assert prediction.sentence("d", {"points": [point]}) == (
        "d: at concurrency 1 predicted 2.04 (c = 0.100), measured 2.00 [1.90, 2.10] "
        "(c from one block: the prediction has no interval, so it is not tested)."
    )


def test_no_counters_at_a_level_gives_no_yield_and_no_prediction():
    [point] = _predict(counters={})["points"]
    assert (point["tokens_per_step"], point["predicted"]) == (None, None)
    assert point["cost_ratio"] == pytest.approx(0.1)


def test_sentence_per_level():
    levels = {1: _cost_row(1, [0.1, 0.1]), 4: _cost_row(4, [0.25, 0.25])}
    result = _predict(
        levels=(1, 4, 8),
        counters={1: Counters(100, [75, 60, 30]), 4: Counters(100, [75, 60, 30]), 8: Counters(100, [75, 60, 30])},
        calibration={"/m/draft": levels},
        measured={1: Interval(2.0, 1.9, 2.1), 4: Interval(1.2, 1.1, 1.3), 8: Interval(1.0)},
    )
    # At 4: 2.65 / (3 * 0.25 + 1) = 1.514, above [1.1, 1.3].
    assert prediction.sentence("draft k=3", result) == (
        "draft k=3: at concurrency 1 predicted 2.04 [2.04, 2.04] (c = 0.100 [0.100, 0.100]), measured 2.00 "
        "[1.90, 2.10]: the intervals overlap, so this measurement does not contradict the model; "
        "at concurrency 4 predicted 1.51 [1.51, 1.51] (c = 0.250 [0.250, 0.250]), measured 1.20 [1.10, 1.30]: "
        "they part, the predicted interval lies above the measured one; "
        "at concurrency 8 no prediction (c not measured at this level)."
    )


def test_sentence_with_one_block_or_no_measurement():
    result = _predict(levels=(1, 2), counters={1: Counters(100, [75, 60, 30]), 2: Counters(100, [75, 60, 30])},
                      calibration={"/m/draft": {1: _cost_row(1, [0.1]), 2: _cost_row(2, [0.1])}},
                      measured={1: Interval(2.0)})  # fmt: skip
    assert prediction.sentence("d", result) == (
        "d: at concurrency 1 predicted 2.04 (c = 0.100), measured 2.00 (one block: no interval to test against); "
        "at concurrency 2 predicted 2.04 (c = 0.100), no measured engine-timed TPOT speedup."
    )


def test_the_cost_ratio_carries_its_interval_and_blocks_only_when_measured_in_several_blocks():
    row = _cost_row(1, [0.1, 0.2])
    [point] = _predict(calibration={"/m/draft": {1: row}})["points"]
    assert (point["cost_ratio_lo"], point["cost_ratio_hi"]) == (row.relative_cost.lo, row.relative_cost.hi)
    assert point["cost_ratio_lo"] < point["cost_ratio"] < point["cost_ratio_hi"]
    assert point["cost_blocks"] == 2
    assert (point["draft_step_ms"], point["baseline_step_ms"]) == (row.step_ms, 20.0)

    [one_block] = _predict(calibration={"/m/draft": {1: _cost_row(1, [0.1])}})["points"]
    assert (one_block["cost_ratio_lo"], one_block["cost_ratio_hi"], one_block["cost_blocks"]) == (None, None, 1)

    [uncalibrated] = _predict(calibration={})["points"]
    assert (uncalibrated["cost_ratio_lo"], uncalibrated["cost_blocks"], uncalibrated["draft_step_ms"]) == (
        None, None, None,
    )  # fmt: skip


def test_a_method_without_its_own_reason_is_not_measured_and_the_result_names_its_method():
    other = SpeculativeArm(id=2, label="new method", method="some_future_method", gamma=2, draft_model=None)
    result = _predict(other)
    [point] = result["points"]
    assert point["cost_source"] == "not measured"
    assert point["predicted"] is None
    assert (result["method"], result["gamma"]) == ("some_future_method", 2)


def test_a_prediction_below_the_measured_interval_says_below():
    # c = 1.0: 2.65 / (3 * 1.0 + 1) = 0.6625, below [1.9, 2.1].
    result = _predict(calibration={"/m/draft": {1: _cost_row(1, [1.0, 1.0])}})
    assert "they part, the predicted interval lies below the measured one" in prediction.sentence("d", result)


# ---------------------------------------------------------------- Leviathan et al.'s formula


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
