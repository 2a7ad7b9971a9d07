"""The per-cell verdicts on simulated experiments, small (scripts/check_verdicts.py in full):
at no effect about 5 % false calls per cell, a large effect found and never reversed."""

import numpy as np

from experiments.measurement.stats import verdicts
from experiments.simulation import cell_verdict_tables, cell_verdicts


def test_simulated_no_effect_is_rarely_called_faster_or_slower():
    # 300 experiments with no effect at the default design: about 5 % false calls per
    # cell. A normal instead of a t quantile, or the prompts as the unit, give 20-90 %.
    rng = np.random.default_rng(1)
    counts = cell_verdicts.simulate(rng, effect=0.0, blocks=3, noise=cell_verdicts.TYPICAL, n=300)
    for counter in counts.values():
        false = counter[verdicts.FASTER] + counter[verdicts.SLOWER]
        assert false / sum(counter.values()) < 0.10, counter


def test_simulated_large_effect_is_found_and_never_reversed():
    rng = np.random.default_rng(2)
    counts = cell_verdicts.simulate(rng, effect=0.20, blocks=5, noise=cell_verdicts.TYPICAL, n=100)
    assert counts[("arm", "tpot")][verdicts.FASTER] >= 90
    assert counts[("arm", "tpot")][verdicts.SLOWER] == 0


def test_the_no_effect_table_pools_every_spread_setting(capsys):
    false_calls, total = cell_verdict_tables.noise_table(np.random.default_rng(3), 2)
    out = capsys.readouterr().out
    # Both compared arms, both metrics, two experiments, every setting of the grid.
    assert total == 2 * 2 * 2 * len(cell_verdicts.NOISE_GRID)
    assert 0 <= false_calls <= total
    assert out.count(" tpot ") == out.count(" output_throughput ") == len(cell_verdicts.NOISE_GRID)
