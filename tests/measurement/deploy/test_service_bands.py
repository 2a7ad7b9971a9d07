"""The recommendation per concurrency band of a service's load, on hand-computed cases."""

import math

import pytest

from experiments.measurement.deploy import service_bands as sb

NGRAM = '{"method": "ngram", "num_speculative_tokens": 4}'
DRAFT = '{"method": "draft_model", "num_speculative_tokens": 3}'


def _cell(level, outcome, speedup, *, arm=1, experiment=10, config=NGRAM, **fields):
    return sb.Cell(experiment=experiment, arm=arm, label=f"arm {arm}", method="ngram", k=4, config=config,
                   level=level, outcome=outcome, speedup=speedup, blocks=6, **fields)  # fmt: skip


def _bands(cells, low, high, baselines=None, **load):
    return sb.bands(cells, sb.Load(low, high, **load), baselines or {})


def _shape(bands):
    return [(b.low, b.high, b.word, [level.level for level in b.levels]) for b in bands]


def test_a_range_is_split_at_the_measured_levels_and_unmeasured_gaps_are_not_guessed():
    cells = [
        _cell(1, "faster", 1.4),
        _cell(4, "faster", 1.2),
        _cell(16, "not worth it", 1.01),
        _cell(64, "slower", 0.8),
    ]
    bands = _bands(cells, 1, 64)
    # 1 and 4 agree, so 2–3 take their answer; 4 and 16 disagree, so 5–15 are not measured.
    assert _shape(bands) == [
        (1, 4, "run arm", [1, 4]), (5, 15, "not measured", []), (16, 64, "no speculation", [16, 64]),
    ]  # fmt: skip
    assert bands[0].chosen is not None
    assert (bands[0].chosen.cell.arm, bands[0].chosen.cell.level) == (1, 4)
    assert sb.proposal(bands) == sb.Proposal("deploy", bands[0].chosen, 4)


def test_below_the_lowest_and_above_the_highest_measured_level_is_not_measured():
    bands = _bands([_cell(2, "faster", 1.3), _cell(8, "faster", 1.1)], 1, 100)
    assert _shape(bands) == [(1, 1, "not measured", []), (2, 8, "run arm", [2, 8]), (9, 100, "not measured", [])]
    # The lowest band is not measured: deploying from concurrency 1 up would be a guess.
    assert sb.proposal(bands).kind == "needs_more_data"


def test_levels_outside_the_range_are_left_out_and_no_level_inside_is_one_unmeasured_band():
    bands = _bands([_cell(2, "faster", 1.3), _cell(128, "slower", 0.7)], 16, 64)
    assert _shape(bands) == [(16, 64, "not measured", [])]
    assert sb.proposal(bands) == sb.Proposal("needs_more_data")


def test_every_band_without_speculation_proposes_not_deploying():
    bands = _bands([_cell(4, "slower", 0.9), _cell(8, "equivalent", 1.0)], 4, 8)
    assert _shape(bands) == [(4, 8, "no speculation", [4, 8])]
    assert sb.proposal(bands) == sb.Proposal("do_not_deploy")


def test_two_arms_faster_at_neighbouring_levels_leave_the_gap_not_measured():
    cells = [_cell(1, "faster", 1.5), _cell(1, "slower", 0.9, arm=2, config=DRAFT),
             _cell(8, "slower", 0.9), _cell(8, "faster", 1.2, arm=2, config=DRAFT)]  # fmt: skip
    bands = _bands(cells, 1, 8)
    assert [(b.low, b.high, b.word, b.chosen and b.chosen.cell.arm) for b in bands] == [
        (1, 1, "run arm", 1), (2, 7, "not measured", None), (8, 8, "run arm", 2),
    ]  # fmt: skip
    assert sb.proposal(bands).max_concurrency == 1


def test_an_undecided_level_has_no_neighbours_that_take_its_answer():
    bands = _bands([_cell(2, "open", 1.1), _cell(3, "inconclusive", 1.0), _cell(8, "open", 1.2)], 2, 8)
    # 2 and 3 are next to each other: one undecided band; 4–7 lie between undecided levels.
    assert _shape(bands) == [(2, 3, "undecided", [2, 3]), (4, 7, "not measured", []), (8, 8, "undecided", [8])]


def test_the_same_config_in_two_experiments_is_one_band_named_by_the_experiment_at_its_top():
    cells = [_cell(1, "faster", 1.4, arm=1, experiment=10), _cell(16, "faster", 1.1, arm=7, experiment=11)]
    bands = _bands(cells, 1, 16)
    assert _shape(bands) == [(1, 16, "run arm", [1, 16])]
    assert bands[0].chosen is not None
    assert (bands[0].chosen.cell.experiment, bands[0].chosen.cell.arm) == (11, 7)


def test_a_daily_curve_counts_the_hours_of_each_band():
    # 8 hours at 2, 6 hours at 6, 10 hours at 24: the curve's range is 2–24.
    curve = [2] * 8 + [24] * 10 + [6] * 6
    cells = [_cell(2, "faster", 1.4), _cell(6, "faster", 1.2), _cell(24, "slower", 0.85)]
    bands = _bands(cells, 2, 24, curve=curve)
    assert [(b.low, b.high, b.word, b.hours) for b in bands] == [
        (2, 6, "run arm", 14), (7, 23, "not measured", 0), (24, 24, "no speculation", 10),
    ]  # fmt: skip
    assert sb.paying_hours(bands) == 14
    assert sb.paying_hours(_bands(cells, 2, 24)) is None


def test_an_arm_above_an_slo_at_a_level_is_not_run_there():
    # TPOT p90 per run 55, 60, 70: the median, 60, is above 50.
    breaking = _cell(4, "faster", 1.5, run_p90_ms={"TPOT": [55.0, 70.0, 60.0], "TTFT": [900.0]})
    within = _cell(4, "faster", 1.2, arm=2, config=DRAFT, run_p90_ms={"TPOT": [40.0, 45.0, 52.0]})
    slos = {"TPOT": 50.0, "TTFT": 1000.0}
    [band] = _bands([breaking, within], 4, 4, slos=slos)
    assert (band.word, band.chosen and band.chosen.cell.arm) == ("run arm", 2)
    assert [e.breaches for e in band.levels[0].evidence] == [("TPOT p90 60.0 ms > 50 ms",), ()]
    # Alone, the faster arm that breaks the SLO leaves no speculation; its word stays "faster".
    [alone] = _bands([breaking], 4, 4, slos=slos)
    assert alone.word == "no speculation"
    assert alone.levels[0].evidence[0].cell.outcome == "faster"


def test_plain_decoding_above_an_slo_is_said():
    bands = _bands([_cell(8, "slower", 0.9)], 8, 8, {(10, 8): {"E2E": [2100.0, 1900.0]}}, slos={"E2E": 1500.0})
    assert bands[0].levels[0].baseline_breaches == ("#10: E2E p90 2000.0 ms > 1500 ms",)


def test_the_mix_weighted_speedup_is_an_estimate_that_changes_no_word():
    cells = [_cell(4, "not worth it", 1.02, by_category={"chat": 1.5, "code": 1.1, "summary": 0.7})]
    [band] = _bands(cells, 4, 4, mix={"chat": 0.6, "code": 0.4})
    # 1.5 ** 0.6 * 1.1 ** 0.4 = 1.27542 * 1.03886
    assert band.levels[0].evidence[0].mix_speedup == pytest.approx(1.32498, abs=1e-5)
    assert band.word == "no speculation"


def test_no_estimate_without_every_category_of_the_mix():
    assert sb.mix_speedup({"chat": 1.5}, {"chat": 0.6, "code": 0.4}) is None
    assert sb.mix_speedup({"chat": 1.5}, {}) is None
    assert sb.mix_speedup({"chat": 1.2, "code": 0.8}, {"chat": 0.5, "code": 0.5}) == pytest.approx(math.sqrt(0.96))


def test_mix_difference_is_the_share_of_requests_that_change_category():
    assert sb.mix_difference({"chat": 1.0}, {"chat": 0.6, "code": 0.4}) == pytest.approx(0.4)
    assert sb.mix_difference({"chat": 0.55, "code": 0.45}, {"chat": 0.6, "code": 0.4}) < sb.MIX_DIFFERS


def test_the_chosen_configs_other_verdict_in_another_experiment_is_shown():
    cells = [_cell(4, "faster", 1.3, experiment=10), _cell(4, "slower", 0.9, arm=5, experiment=11)]
    [band] = _bands(cells, 4, 4)
    assert band.word == "run arm"
    assert [e.cell.experiment for e in band.levels[0].contradicted_by] == [11]
