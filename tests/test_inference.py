"""From runs to speedups, verdicts, break-even and fidelity, on hand-made runs. No database."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from experiments import inference, verdicts
from experiments.inference import RunData

BASE, REPLICATE, ARM = 10, 11, 12


def _run(arm, block, tpot, *, level=1, throughput=100.0, failed=0, outputs=None):
    return RunData(
        arm=arm,
        level=level,
        block=block,
        latencies={"tpot": dict(enumerate(tpot))},
        throughputs={"output_throughput": throughput},
        failed=failed,
        outputs=outputs or {},
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


def test_failed_requests_are_counted_and_block_a_verdict_when_they_differ():
    # The arm fails its slowest request in each block: the remaining pairs look 2x faster,
    # but the failures differ, so there is no verdict.
    runs = []
    for block in (1, 2, 3):
        runs += [_run(BASE, block, [10, 10], failed=0), _run(ARM, block, [5], failed=1)]
    cell = _cells(runs, metrics=["tpot"])[(ARM, 1, "tpot")]
    assert (cell.failed_baseline, cell.failed_arm) == (0, 3)
    assert cell.outcome == verdicts.FAILURES_DIFFER


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


def test_break_evens_per_arm_and_metric():
    runs = []
    for block, (fast, slow) in enumerate([(5.0, 12.0), (5.5, 12.5), (4.5, 13.0)], start=1):
        runs += [_run(BASE, block, [10], level=1), _run(ARM, block, [fast], level=1)]
        runs += [_run(BASE, block, [10], level=4), _run(ARM, block, [slow], level=4)]
    cells = inference.speedup_cells(runs, baseline=BASE, arms=[ARM], levels=[1, 4], margin=0.02, metrics=["tpot"])
    even = inference.break_evens(cells)[(ARM, "tpot")]
    assert even.state == "crosses"
    assert 1 < even.level < 4


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
    assert sorted(arm_cell.divergence_at) == [0, 1, 2]
    assert arm_cell.median_divergence == 1
    # Fisher: 3 of 4 differ against 0 of 4: P = C(3,3)C(5,1)/C(8,4) = 5/70.
    assert arm_cell.p_more_than_replicate == pytest.approx(5 / 70)
    assert not arm_cell.warn


# ---------------------------------------------------------------- the simulation, small


def _check_verdicts():
    path = Path(__file__).resolve().parent.parent / "scripts" / "check_verdicts.py"
    spec = importlib.util.spec_from_file_location("check_verdicts", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_simulated_no_effect_is_rarely_called_faster_or_slower():
    # 300 experiments with no effect at the default design: about 5 % false calls per
    # cell. A normal instead of a t quantile, or the prompts as the unit, give 20-90 %.
    check = _check_verdicts()
    counts = check.simulate(np.random.default_rng(1), effect=0.0, blocks=3, noise=check.TYPICAL, n=300)
    for counter in counts.values():
        false = counter[verdicts.FASTER] + counter[verdicts.SLOWER]
        assert false / sum(counter.values()) < 0.10, counter


def test_simulated_large_effect_is_found_and_never_reversed():
    check = _check_verdicts()
    counts = check.simulate(np.random.default_rng(2), effect=0.20, blocks=5, noise=check.TYPICAL, n=100)
    assert counts[("arm", "tpot")][verdicts.FASTER] >= 90
    assert counts[("arm", "tpot")][verdicts.SLOWER] == 0
