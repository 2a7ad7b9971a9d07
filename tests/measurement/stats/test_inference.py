"""From runs to speedups, verdicts, break-even and fidelity, on hand-made runs. No database."""

from dataclasses import replace

import pytest

from experiments.measurement.stats import break_even, inference, intervals, verdicts
from experiments.measurement.stats.inference import RunData

BASE, REPLICATE, ARM = 10, 11, 12


def _run(arm, block, tpot, *, level=1, throughput=100.0, failed=0, outputs=None, tokens=None):
    """A run whose requests have the TPOTs `tpot` and `tokens` output tokens each (11 by
    default: equal lengths, so the pooled TPOT ratio is the ratio of means), plus `failed` more."""
    return RunData(
        arm=arm,
        level=level,
        block=block,
        latencies={"tpot": dict(enumerate(tpot))},
        throughputs={"output_throughput": throughput},
        failed=failed,
        outputs=outputs or {},
        output_tokens=dict(enumerate(tokens or [11] * len(tpot))),
        requests=len(tpot) + failed,
    )


def _cells(runs, **kwargs):
    options = {"baseline": BASE, "arms": [ARM], "levels": [1], "margin": 0.02} | kwargs
    return {(c.arm, c.level, c.metric): c for c in inference.speedup_cells(runs, **options)}


def test_one_ratio_per_block_from_prompts_paired_inside_the_block():
    # Block 1: baseline (10 + 30) / arm (5 + 15) = 2.0; block 2: (12 + 28) / (8 + 12) = 2.0;
    # block 3: (11 + 29) / (10 + 10) = 2.0 -> exactly 2 with a zero-width interval.
    runs = [
        _run(BASE, 1, [10, 30], throughput=100),
        _run(ARM, 1, [5, 15], throughput=150),
        _run(BASE, 2, [12, 28], throughput=110),
        _run(ARM, 2, [8, 12], throughput=165),
        _run(BASE, 3, [11, 29], throughput=90),
        _run(ARM, 3, [10, 10], throughput=135),
    ]
    cells = _cells(runs, metrics=["tpot", "output_throughput"])
    tpot = cells[(ARM, 1, "tpot")]
    assert tpot.estimate.block_ratios == (2.0, 2.0, 2.0)
    assert (tpot.estimate.point, tpot.estimate.lo, tpot.estimate.hi) == pytest.approx((2.0, 2.0, 2.0))
    assert (tpot.outcome, tpot.n_pairs) == (verdicts.FASTER, 6)
    # Throughput ratios 150/100, 165/110, 135/90 = 1.5 each.
    assert cells[(ARM, 1, "output_throughput")].estimate.block_ratios == (1.5, 1.5, 1.5)


def test_only_blocks_both_sides_ran_count():
    runs = [_run(BASE, 1, [10]), _run(ARM, 1, [5]), _run(BASE, 2, [10]), _run(ARM, 3, [5])]
    cell = _cells(runs, metrics=["tpot"])[(ARM, 1, "tpot")]
    assert cell.estimate.block_ratios == (2.0,)
    assert cell.outcome == verdicts.TOO_FEW_BLOCKS


def test_failed_requests_are_counted_and_block_a_verdict_when_their_rates_differ():
    # 40 requests a run. The arm fails its 4 slowest requests in each block: the remaining pairs
    # look 2x faster, but it failed 12 of 120 against the baseline's 0 of 120 (Fisher's p =
    # 2 * C(120, 12) / C(240, 12) = 0.00037 < 0.05), so there is no verdict.
    runs = []
    for block in (1, 2, 3):
        runs += [_run(BASE, block, [10] * 40), _run(ARM, block, [5] * 36, failed=4)]
    cell = _cells(runs, metrics=["tpot"])[(ARM, 1, "tpot")]
    assert (cell.failed_baseline, cell.failed_arm) == (0, 12)
    assert cell.outcome == verdicts.FAILURES_DIFFER


def test_one_failure_against_none_keeps_the_verdict():
    # The arm fails 1 of its 120 requests over the 3 blocks, the baseline none: Fisher's
    # two-sided p is 1 (the one failure is as likely on either side), so the unequal counts
    # keep the verdict, where counts required to be equal withheld it.
    runs = []
    for block in (1, 2, 3):
        failed = 1 if block == 2 else 0
        runs += [_run(BASE, block, [10] * 40), _run(ARM, block, [5] * (40 - failed), failed=failed)]
    cell = _cells(runs, metrics=["tpot"])[(ARM, 1, "tpot")]
    assert (cell.failed_baseline, cell.failed_arm, cell.outcome) == (0, 1, verdicts.FASTER)


def test_a_block_without_a_ratio_is_noted():
    runs = [_run(BASE, 1, [10]), _run(ARM, 1, [0.0]), _run(BASE, 2, [10]), _run(ARM, 2, [5])]
    cell = _cells(runs, metrics=["tpot"])[(ARM, 1, "tpot")]
    assert cell.estimate.block_ratios == (2.0,)
    assert cell.estimate.note == "1 block(s) without a ratio (no pairs or a zero value)"


def test_throughput_under_a_fixed_arrival_rate_gets_no_verdict():
    runs = [r for b in (1, 2, 3) for r in (_run(BASE, b, [10], throughput=100), _run(ARM, b, [5], throughput=99))]
    cells = _cells(runs, metrics=["tpot", "output_throughput"], fixed_arrival_rate=True)
    assert cells[(ARM, 1, "output_throughput")].outcome == verdicts.NOT_APPLICABLE
    assert cells[(ARM, 1, "tpot")].outcome == verdicts.FASTER


def test_a_distorted_stream_takes_the_client_timed_verdicts_only():
    # The arm is 2x faster on every metric in every block; in block 2 the baseline's stream was
    # distorted. TPOT and TTFT (timed from the chunks) get no word; the engine-timed TPOT, E2E and
    # throughput keep theirs, and every estimate is still computed.
    runs = []
    for block in (1, 2, 3, 4):
        for arm, value, throughput in ((BASE, 10.0, 100.0), (ARM, 5.0, 200.0)):
            latencies = {metric: {0: value, 1: value} for metric in ("tpot", "ttft", "server_tpot", "e2e")}
            runs.append(
                RunData(
                    arm,
                    1,
                    block,
                    latencies,
                    {"output_throughput": throughput},
                    stream_flagged=arm == BASE and block == 2,
                    output_tokens={0: 11, 1: 11},
                )
            )
    cells = _cells(runs, metrics=["server_tpot", "tpot", "ttft", "e2e", "output_throughput"])
    outcomes = {
        metric: cells[(ARM, 1, metric)].outcome
        for metric in ("server_tpot", "tpot", "ttft", "e2e", "output_throughput")
    }
    assert outcomes == {
        "server_tpot": verdicts.FASTER, "tpot": verdicts.STREAM_DISTORTED, "ttft": verdicts.STREAM_DISTORTED,
        "e2e": verdicts.FASTER, "output_throughput": verdicts.FASTER,
    }  # fmt: skip
    assert cells[(ARM, 1, "tpot")].estimate.point == pytest.approx(2.0)
    # A flagged run in a block the other side did not run does not count (3 blocks left).
    unmatched = [r for r in runs if not (r.arm == ARM and r.block == 2)]
    assert _cells(unmatched, metrics=["tpot"])[(ARM, 1, "tpot")].outcome == verdicts.FASTER


def _issue_example_run(arm, block):
    # Issue 21's example: 12 long code prompts (256 decode tokens) at 2.0x, 28 short chat prompts
    # (64 decode tokens) at 1.1x. Baseline TPOT 35 ms (code) and 33 ms (chat), the arm's 17.5 and 30.
    code, chat = (35.0, 33.0) if arm == BASE else (17.5, 30.0)
    return _run(arm, block, [code] * 12 + [chat] * 28, tokens=[257] * 12 + [65] * 28)


def test_the_tpot_verdict_pools_decode_time_over_decode_tokens():
    # Per-request (ratio of mean TPOTs): (12 * 35 + 28 * 33) / (12 * 17.5 + 28 * 30) = 1344 / 1050
    # = 1.28. Pooled per token: baseline (12 * 35 * 256 + 28 * 33 * 64) / 4864 = 166656 / 4864 ms,
    # the arm's (12 * 17.5 * 256 + 28 * 30 * 64) / 4864 = 107520 / 4864: 166656 / 107520 = 1.55.
    runs = [_issue_example_run(arm, block) for block in (1, 2, 3) for arm in (BASE, ARM)]
    cell = _cells(runs, metrics=["tpot", "e2e"])[(ARM, 1, "tpot")]
    assert cell.estimate.block_ratios == pytest.approx((1.55, 1.55, 1.55))
    assert cell.per_request.block_ratios == pytest.approx((1.28, 1.28, 1.28))
    assert (cell.outcome, cell.n_pairs) == (verdicts.FASTER, 120)
    # 1.28 / 1.55 is 17 % off, beyond the 2 % margin; within a 25 % margin.
    assert cell.estimands_differ(0.02)
    assert not cell.estimands_differ(0.25)


def test_both_tpot_metrics_pool_and_other_metrics_have_one_estimand():
    runs = []
    for block in (1, 2, 3):
        for arm in (BASE, ARM):
            run = _issue_example_run(arm, block)
            tpot = run.latencies["tpot"]
            latencies = {"tpot": tpot, "server_tpot": tpot, "e2e": tpot, "ttft": tpot}
            runs.append(replace(run, latencies=latencies))
    cells = _cells(runs, metrics=["server_tpot", "tpot", "e2e", "ttft", "output_throughput"])
    assert cells[(ARM, 1, "server_tpot")].estimate.point == pytest.approx(1.55)
    assert cells[(ARM, 1, "server_tpot")].per_request.point == pytest.approx(1.28)
    # E2E and TTFT stay ratios of means (1.28 on the same values), with no second estimand.
    for metric in ("e2e", "ttft", "output_throughput"):
        assert cells[(ARM, 1, metric)].per_request is None
        assert not cells[(ARM, 1, metric)].estimands_differ(0.02)
    assert cells[(ARM, 1, "e2e")].estimate.point == pytest.approx(1.28)
    assert cells[(ARM, 1, "ttft")].estimate.point == pytest.approx(1.28)


def test_estimands_that_agree_within_the_margin_do_not_differ():
    # Equal output lengths: the pooled ratio is the ratio of means, 2.0 either way.
    runs = [r for b in (1, 2, 3) for r in (_run(BASE, b, [10, 30]), _run(ARM, b, [5, 15]))]
    cell = _cells(runs, metrics=["tpot"])[(ARM, 1, "tpot")]
    assert cell.estimate.point == pytest.approx(2.0)
    assert cell.per_request.point == pytest.approx(2.0)
    assert not cell.estimands_differ(0.0)


def test_break_evens_per_arm_and_metric():
    runs = []
    for block, (fast, slow) in enumerate([(5.0, 12.0), (5.5, 12.5), (4.5, 13.0)], start=1):
        runs += [_run(BASE, block, [10], level=1), _run(ARM, block, [fast], level=1)]
        runs += [_run(BASE, block, [10], level=4), _run(ARM, block, [slow], level=4)]
    cells = inference.speedup_cells(runs, baseline=BASE, arms=[ARM], levels=[1, 4], margin=0.02, metrics=["tpot"])
    even = inference.break_evens(cells)[(ARM, "tpot")]
    assert even.state == "crosses"
    assert 1 < even.level < 4


def _level_cell(level, estimate, outcome):
    return inference.CellResult(ARM, level, "tpot", estimate, outcome, 0, 0, 3)


def test_break_evens_read_each_level_from_its_verdict():
    # Level 4's interval lies below 1 (0.8 [0.7, 0.9]): called slower it settles the crossing
    # from 1 (faster); the same interval without a verdict (failures differ) leaves 4 open.
    fast, slow = intervals.block_interval([1.5, 1.6, 1.4]), intervals.block_interval([0.8, 0.85, 0.75])
    assert (fast.lo > 1, slow.hi < 1) == (True, True)
    called = [_level_cell(1, fast, verdicts.FASTER), _level_cell(4, slow, verdicts.SLOWER)]
    assert inference.break_evens(called)[(ARM, "tpot")].state == break_even.CROSSES
    withheld = [_level_cell(1, fast, verdicts.FASTER), _level_cell(4, slow, verdicts.FAILURES_DIFFER)]
    assert inference.break_evens(withheld)[(ARM, "tpot")] == break_even.BreakEven(
        break_even.NOT_SETTLED, reason="faster at 1; open at 4"
    )
    slower = [_level_cell(1, slow, verdicts.SLOWER), _level_cell(4, slow, verdicts.SLOWER)]
    assert inference.break_evens(slower)[(ARM, "tpot")].state == break_even.PAYS_NOWHERE


def test_fidelity_against_the_baseline_and_the_replicate():
    base = {0: [1, 2, 3], 1: [4, 5, 6], 2: [7, 8, 9], 3: [1, 1, 1]}
    replicate = dict(base)
    arm = {0: [1, 2, 3], 1: [4, 9, 6], 2: [7, 8], 3: [2, 1, 1]}  # 1 equal; differ at 1, 2, 0
    runs = [_run(BASE, 1, [1], outputs=base), _run(REPLICATE, 1, [1], outputs=replicate)]
    runs += [_run(ARM, 1, [1], outputs=arm)]
    cells = inference.fidelity_cells(runs, baseline=BASE, arms=[REPLICATE, ARM], levels=[1], replicate=REPLICATE)
    by_arm = {cell.arm: cell for cell in cells}
    assert (by_arm[REPLICATE].compared, by_arm[REPLICATE].identical) == (4, 4)
    assert by_arm[REPLICATE].p_more_than_replicate is None
    arm_cell = by_arm[ARM]
    assert (arm_cell.compared, arm_cell.identical, arm_cell.identical_share) == (4, 1, 0.25)
    assert (arm_cell.prompts, arm_cell.prompts_differing) == (4, 3)  # one block: a prompt is an output
    assert sorted(arm_cell.divergence_at) == [0, 1, 2]
    assert arm_cell.median_divergence == 1
    # Fisher: 3 of 4 differ against 0 of 4: P = C(3,3)C(5,1)/C(8,4) = 5/70.
    assert arm_cell.p_more_than_replicate == pytest.approx(5 / 70)
    assert not arm_cell.warn


def test_throughput_cells_pair_no_requests_and_get_a_verdict_by_default():
    # Throughput ratios 150/100, 165/110, 135/90 = 1.5 in every block: called faster
    # without a fixed arrival rate, from one value per run (0 pairs).
    runs = []
    for block, (base, arm) in enumerate([(100, 150), (110, 165), (90, 135)], start=1):
        runs += [_run(BASE, block, [10], throughput=base), _run(ARM, block, [5], throughput=arm)]
    cell = _cells(runs, metrics=["output_throughput"])[(ARM, 1, "output_throughput")]
    assert (cell.outcome, cell.n_pairs) == (verdicts.FASTER, 0)


def test_a_metric_the_runs_did_not_record_has_no_data():
    # The runs hold TPOT only: E2E has no pairs in any of the 3 blocks.
    runs = [r for b in (1, 2, 3) for r in (_run(BASE, b, [10]), _run(ARM, b, [5]))]
    cell = _cells(runs, metrics=["e2e"])[(ARM, 1, "e2e")]
    assert (cell.estimate.point, cell.outcome, cell.n_pairs) == (None, verdicts.NO_DATA, 0)
    assert cell.estimate.note == "3 block(s) without a ratio (no pairs or a zero value)"


def test_a_level_without_runs_has_no_data():
    runs = [r for b in (1, 2, 3) for r in (_run(BASE, b, [10]), _run(ARM, b, [5]))]
    cell = _cells(runs, levels=[1, 4], metrics=["tpot"])[(ARM, 4, "tpot")]
    assert (cell.estimate.point, cell.outcome, cell.n_pairs) == (None, verdicts.NO_DATA, 0)
    assert (cell.failed_baseline, cell.failed_arm) == (0, 0)


def test_equal_failures_on_both_sides_allow_a_verdict():
    # One failed request on each side in each block: 3 and 3. The TPOT ratio is 10 / 5 = 2
    # in every block: faster.
    runs = [r for b in (1, 2, 3) for r in (_run(BASE, b, [10], failed=1), _run(ARM, b, [5], failed=1))]
    cell = _cells(runs, metrics=["tpot"])[(ARM, 1, "tpot")]
    assert (cell.failed_baseline, cell.failed_arm, cell.outcome) == (3, 3, verdicts.FASTER)


def test_break_even_pays_everywhere_when_faster_at_every_level():
    # Arm TPOT 5, 5.5, 4.5 against 10 at both levels: ratios 2, 1.818, 2.222; logs 0.6931,
    # 0.5978, 0.7985, mean 0.6965, sd 0.1004, half-width 4.3027 * 0.1004 / 1.7321 = 0.2494,
    # lower bound e^0.4471 = 1.56 > 1: faster at 1 and at 4.
    runs = []
    for block, arm_tpot in enumerate([5.0, 5.5, 4.5], start=1):
        for level in (1, 4):
            runs += [_run(BASE, block, [10], level=level), _run(ARM, block, [arm_tpot], level=level)]
    cells = inference.speedup_cells(runs, baseline=BASE, arms=[ARM], levels=[1, 4], margin=0.02, metrics=["tpot"])
    assert [c.outcome for c in cells] == [verdicts.FASTER, verdicts.FASTER]
    assert inference.break_evens(cells)[(ARM, "tpot")].state == "pays at every measured level"


def test_fidelity_when_the_replicate_differs_too():
    base = {0: [1, 2], 1: [3, 4], 2: [5, 6], 3: [7, 8]}
    replicate = {0: [1, 2], 1: [3, 4], 2: [5, 6], 3: [7, 9]}  # 3 of 4 equal
    arm = {0: [1, 2], 1: [3, 9], 2: [0, 6], 3: [7, 8, 1]}  # 1 of 4 equal; differ at 1, 0, 2
    runs = [_run(BASE, 1, [1], outputs=base), _run(REPLICATE, 1, [1], outputs=replicate)]
    runs += [_run(ARM, 1, [1], outputs=arm)]
    cells = inference.fidelity_cells(runs, baseline=BASE, arms=[REPLICATE, ARM], levels=[1], replicate=REPLICATE)
    by_arm = {cell.arm: cell for cell in cells}
    assert (by_arm[REPLICATE].level, by_arm[REPLICATE].compared, by_arm[REPLICATE].identical) == (1, 4, 3)
    assert (by_arm[ARM].level, by_arm[ARM].compared, by_arm[ARM].identical) == (1, 4, 1)
    assert sorted(by_arm[ARM].divergence_at) == [0, 1, 2]
    # Fisher, one-sided: [[3 differ, 1 equal], [1 differ, 3 equal]]. 4 of the 8 differ; the
    # arm's 4 hold at least 3 of them with P = [C(4,3)C(4,1) + C(4,4)C(4,0)] / C(8,4)
    # = (16 + 1) / 70.
    assert by_arm[ARM].p_more_than_replicate == pytest.approx(17 / 70)


def test_fidelity_tests_prompts_not_prompts_times_blocks():
    # 6 prompts, 5 blocks. The arm's prompts 0 and 1 differ from the baseline's in every block,
    # prompt 2 in block 3 only; the replicate's never. As outputs that is 11 of 30 against 0 of
    # 30 (one-sided Fisher p = C(30, 11) / C(60, 11) = 0.00016, flagged), but a prompt's blocks
    # differ together: on prompts it is 3 of 6 against 0 of 6 (a prompt differing in any block
    # counts), P(X >= 3) = C(3, 3) C(9, 3) / C(12, 6) = 84 / 924 = 1 / 11: not flagged.
    base = {prompt: [prompt, 1, 2] for prompt in range(6)}
    runs = []
    for block in range(1, 6):
        arm = base | {0: [0, 9, 9], 1: [1, 1, 9]} | ({2: [2, 1]} if block == 3 else {})
        runs += [_run(BASE, block, [1], outputs=base), _run(REPLICATE, block, [1], outputs=dict(base))]
        runs += [_run(ARM, block, [1], outputs=arm)]
    cells = inference.fidelity_cells(runs, baseline=BASE, arms=[REPLICATE, ARM], levels=[1], replicate=REPLICATE)
    by_arm = {cell.arm: cell for cell in cells}
    assert (by_arm[REPLICATE].prompts, by_arm[REPLICATE].prompts_differing) == (6, 0)
    arm_cell = by_arm[ARM]
    assert (arm_cell.compared, arm_cell.identical, arm_cell.prompts, arm_cell.prompts_differing) == (30, 19, 6, 3)
    assert sorted(arm_cell.divergence_at) == [1] * 5 + [2] * 5 + [2]
    assert arm_cell.p_more_than_replicate == pytest.approx(1 / 11)
    assert not arm_cell.warn


def test_fidelity_compares_only_the_blocks_and_prompts_both_sides_have():
    # Block 1: prompt 0 on both sides (equal); prompt 1 only in the baseline's run. Block 2:
    # only the baseline ran. Level 4: no runs at all. No replicate: no p-value.
    runs = [
        _run(BASE, 1, [1], outputs={0: [1, 2], 1: [3, 4]}),
        _run(ARM, 1, [1], outputs={0: [1, 2]}),
        _run(BASE, 2, [1], outputs={0: [5, 6]}),
    ]
    cells = inference.fidelity_cells(runs, baseline=BASE, arms=[ARM], levels=[4, 1], replicate=None)
    assert [(c.level, c.compared, c.identical, c.prompts, c.p_more_than_replicate) for c in cells] == [
        (1, 1, 1, 1, None),
        (4, 0, 0, 0, None),
    ]
    assert cells[1].identical_share is None
