"""The guard metrics a service's objective may name (experiments/measurement/stats/inference.py):
the tail of end-to-end latency (p95) and goodput, each block's ratio hand-computed."""

import pytest

from experiments.measurement.stats import inference

BASELINE, ARM = 1, 2


def _run(arm: int, block: int, e2e: dict[int, float | None], goodput: float | None = None) -> inference.RunData:
    return inference.RunData(arm=arm, level=4, block=block, latencies={"e2e": e2e}, throughputs={"goodput": goodput})


def test_the_p95_of_e2e_is_the_baselines_tail_over_the_arms_over_the_same_prompts():
    """Baseline 100, 110, …, 190 ms (p95 between the 9th and 10th: 100 + 0.95·9·10 = 185.5);
    the arm the same but its slowest request 300 ms (p95 180 + 0.55·120 = 246); prompt 10, which
    only the arm answered, is left out."""
    base = {i: 100.0 + 10 * i for i in range(10)}
    arm = dict(base) | {9: 300.0, 10: 5.0}
    runs = [_run(BASELINE, 1, base), _run(ARM, 1, arm)]

    ratios = inference.block_ratios(runs, "e2e_p95", baseline=BASELINE, arm=ARM, level=4)

    assert ratios == {1: pytest.approx(185.5 / 246.0)}


def test_goodput_is_arm_over_baseline_and_stays_applicable_at_a_fixed_arrival_rate():
    runs = [_run(BASELINE, b, {0: 1.0}, goodput=g) for b, g in ((1, 2.0), (2, 2.0), (3, 2.0))] + [
        _run(ARM, b, {0: 1.0}, goodput=g) for b, g in ((1, 1.0), (2, 1.2), (3, 1.1))
    ]

    (cell,) = inference.speedup_cells(runs, baseline=BASELINE, arms=[ARM], levels=[4], margin=0.02,
                                      metrics=["goodput"], fixed_arrival_rate=True)  # fmt: skip

    assert cell.estimate.block_ratios == pytest.approx((0.5, 0.6, 0.55))
    assert cell.outcome != "not applicable"


def test_a_run_without_goodput_has_no_ratio():
    runs = [_run(BASELINE, 1, {0: 1.0}), _run(ARM, 1, {0: 1.0})]
    assert inference.block_ratios(runs, "goodput", baseline=BASELINE, arm=ARM, level=4) == {}
