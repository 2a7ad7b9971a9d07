"""The tables of scripts/check_verdicts.py: the share of simulated experiments (cell_verdicts.py)
called faster / slower / equivalent / inconclusive, by effect and blocks, by the spreads of
the host, and against one server per arm; last, the false-call rate under no effect at the
default design (3 blocks, 2 % margin), pooled over every spread setting and both metrics."""

import itertools
import math
from collections import Counter

import numpy as np

from experiments.measurement.stats import verdicts
from experiments.simulation.cell_verdicts import DEFAULT_BLOCKS, MARGIN, METRICS, NOISE_GRID, TYPICAL, Noise, simulate

HEADER = f"{'faster':>8} {'slower':>8} {'equiv.':>8} {'inconcl.':>8} {'no call':>8}"


def _shares(counter: Counter[str]) -> str:
    total = sum(counter.values())
    columns = (verdicts.FASTER, verdicts.SLOWER, verdicts.EQUIVALENT, verdicts.INCONCLUSIVE, verdicts.TOO_FEW_BLOCKS)
    return " ".join(f"{counter[c] / total:>8.1%}" for c in columns)


def effects_table(rng: np.random.Generator, n: int) -> None:
    print(f"\n## Effects × blocks, typical spreads ({TYPICAL}), {n} experiments per row, arm's TPOT / throughput")
    print(f"{'effect':>7} {'blocks':>6} {'metric':>18}  {HEADER}")
    for effect, blocks in itertools.product((0.0, 0.05, 0.10, 0.20), (2, 3, 5, 8)):
        counts = simulate(rng, effect=effect, blocks=blocks, noise=TYPICAL, n=n)
        for metric in METRICS:
            print(f"{effect:>7.0%} {blocks:>6} {metric:>18}  {_shares(counts[('arm', metric)])}")


def noise_table(rng: np.random.Generator, n: int) -> tuple[int, int]:
    """No effect at the default design over the spread grid; returns (false calls, cells)."""
    print(f"\n## No effect, default design ({DEFAULT_BLOCKS} blocks, margin {MARGIN:.0%}), {n} experiments per row")
    print(f"{'spreads':>48} {'metric':>18}  {HEADER}")
    false_calls = total = 0
    for noise in NOISE_GRID:
        counts = simulate(rng, effect=0.0, blocks=DEFAULT_BLOCKS, noise=noise, n=n)
        for metric in METRICS:
            pooled = counts[("arm", metric)] + counts[("replicate", metric)]
            print(f"{noise!s:>48} {metric:>18}  {_shares(pooled)}")
            false_calls += pooled[verdicts.FASTER] + pooled[verdicts.SLOWER]
            total += sum(pooled.values())
    return false_calls, total


def contrast_table(rng: np.random.Generator, n: int) -> None:
    print(f"\n## Contrast: one server per arm for all blocks (no interleaving), no effect, {n} experiments per row")
    print(f"{'spreads':>48} {'metric':>18}  {HEADER}")
    for noise in (Noise(0.03, 0.02, 0.05, 0.0), Noise(0.03, 0.02, 0.05, 0.10)):
        counts = simulate(rng, effect=0.0, blocks=DEFAULT_BLOCKS, noise=noise, n=n, server_per_block=False)
        for metric in METRICS:
            print(f"{noise!s:>48} {metric:>18}  {_shares(counts[('arm', metric)])}")


def print_tables(*, simulations: int, seed: int) -> None:
    """Every table, `simulations` experiments per row of the no-effect one, and the pooled rate."""
    rng = np.random.default_rng(seed)
    effects_table(rng, max(200, simulations // 4))
    contrast_table(rng, max(200, simulations // 4))
    false_calls, total = noise_table(rng, simulations)
    rate = false_calls / total
    se = math.sqrt(rate * (1 - rate) / total)
    print(f"\n{total} no-effect comparisons (arm and replicate, TPOT and output throughput); standard error {se:.2%}")
    print(f"false calls under no effect at the default design: {rate:.1%}")
