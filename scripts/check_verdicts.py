"""How often the page's verdicts are wrong: experiments with known effects, simulated and
pushed through the same inference code the page uses (experiments/measurement/stats/inference.py and
experiments/measurement/stats/verdicts.py), in the execution order the worker uses
(experiments/measurement/planning/schedule.py).

Each simulated experiment has a baseline, an A/A replicate (no effect by construction) and
one arm whose true speedup is 1 + effect, at one concurrency level. A request's TPOT is

    prompt's own cost × arm effect × server start × run × drift(t) × request noise

with lognormal server-start, run and request factors (the spreads below), and a drift of
the host that grows linearly over the experiment's execution order (t from 0 to 1).
A run's output throughput is proportional to 1 / (its mean TPOT), with its own run
noise. Blocks follow the worker's randomised schedule; the contrast row "one server per
arm" runs every arm through all its blocks back to back, as the option does.

Prints tables of the share of experiments called faster / slower / equivalent /
inconclusive, and as its last line the false-call rate under no effect at the default
design (3 blocks, 2 % margin), pooled over every spread setting and both metrics.

    ./dev manage shell -c "exec(open('scripts/check_verdicts.py').read())"   # or:
    .venv/bin/python scripts/check_verdicts.py [--simulations N] [--seed S]

Runs in about five minutes on one core at the default size.
"""

import argparse
import itertools
import math
import os
import sys
from collections import Counter
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.measurement.planning.schedule import schedule
from experiments.measurement.stats import inference, verdicts

BASELINE, REPLICATE, ARM = 0, 1, 2
LEVEL = 4
PROMPTS = 40
PROMPT_SPREAD = 0.3  # lognormal sd of the prompts' own cost
MARGIN = 0.02
DEFAULT_BLOCKS = 3
METRICS = ("tpot", "output_throughput")


@dataclass(frozen=True)
class Noise:
    start: float  # lognormal sd of a server start
    run: float  # lognormal sd of a run on a server
    request: float  # lognormal sd of one request
    drift: float  # total drift of the host over the experiment, as a fraction

    def __str__(self) -> str:
        return f"start {self.start:.0%} run {self.run:.0%} request {self.request:.0%} drift {self.drift:+.0%}"


NOISE_GRID = [
    Noise(start, run, request, drift)
    for start, run, request, drift in itertools.product((0.01, 0.03, 0.05), (0.01, 0.03), (0.02, 0.10), (0.0, 0.10))
]
TYPICAL = Noise(0.03, 0.02, 0.05, 0.10)


def _runs(rng, *, effect: float, blocks: int, noise: Noise, server_per_block: bool) -> list[inference.RunData]:
    slots = schedule(
        n_arms=3, levels=[LEVEL], blocks=blocks, seed=int(rng.integers(1 << 31)), server_per_block=server_per_block
    )
    prompt_cost = rng.lognormal(0.0, PROMPT_SPREAD, PROMPTS) * 20.0
    true_factor = {BASELINE: 1.0, REPLICATE: 1.0, ARM: 1.0 / (1.0 + effect)}
    session_factor = {}
    runs = []
    for position, slot in enumerate(slots):
        session = (slot.block, slot.arm_index) if server_per_block else slot.arm_index
        if session not in session_factor:
            session_factor[session] = rng.lognormal(0.0, noise.start)
        drift = 1.0 + noise.drift * position / max(1, len(slots) - 1)
        run_factor = rng.lognormal(0.0, noise.run) * session_factor[session] * drift * true_factor[slot.arm_index]
        tpot = prompt_cost * run_factor * rng.lognormal(0.0, noise.request, PROMPTS)
        throughput = 1000.0 * LEVEL / float(np.mean(tpot)) * rng.lognormal(0.0, noise.run / 2)
        runs.append(
            inference.RunData(
                arm=slot.arm_index,
                level=slot.level,
                block=slot.block,
                latencies={"tpot": dict(enumerate(tpot.tolist()))},
                throughputs={"output_throughput": throughput},
                # Outputs of equal length: the pooled per-token TPOT ratio is then the ratio of means.
                output_tokens=dict.fromkeys(range(PROMPTS), 64),
            )
        )
    return runs


def simulate(rng, *, effect: float, blocks: int, noise: Noise, n: int, server_per_block: bool = True) -> dict:
    """Outcome counts per compared arm ("arm", "replicate") and metric over n experiments."""
    counts = {(who, metric): Counter() for who in ("arm", "replicate") for metric in METRICS}
    for _ in range(n):
        runs = _runs(rng, effect=effect, blocks=blocks, noise=noise, server_per_block=server_per_block)
        cells = inference.speedup_cells(
            runs, baseline=BASELINE, arms=[REPLICATE, ARM], levels=[LEVEL], margin=MARGIN, metrics=METRICS
        )
        for cell in cells:
            counts[("arm" if cell.arm == ARM else "replicate", cell.metric)][cell.outcome] += 1
    return counts


def _shares(counter: Counter) -> str:
    total = sum(counter.values())
    columns = (verdicts.FASTER, verdicts.SLOWER, verdicts.EQUIVALENT, verdicts.INCONCLUSIVE, verdicts.TOO_FEW_BLOCKS)
    return " ".join(f"{counter[c] / total:>8.1%}" for c in columns)


HEADER = f"{'faster':>8} {'slower':>8} {'equiv.':>8} {'inconcl.':>8} {'no call':>8}"


def effects_table(rng, n: int) -> None:
    print(f"\n## Effects × blocks, typical spreads ({TYPICAL}), {n} experiments per row, arm's TPOT / throughput")
    print(f"{'effect':>7} {'blocks':>6} {'metric':>18}  {HEADER}")
    for effect, blocks in itertools.product((0.0, 0.05, 0.10, 0.20), (2, 3, 5, 8)):
        counts = simulate(rng, effect=effect, blocks=blocks, noise=TYPICAL, n=n)
        for metric in METRICS:
            print(f"{effect:>7.0%} {blocks:>6} {metric:>18}  {_shares(counts[('arm', metric)])}")


def noise_table(rng, n: int) -> tuple[int, int]:
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


def contrast_table(rng, n: int) -> None:
    print(f"\n## Contrast: one server per arm for all blocks (no interleaving), no effect, {n} experiments per row")
    print(f"{'spreads':>48} {'metric':>18}  {HEADER}")
    for noise in (Noise(0.03, 0.02, 0.05, 0.0), Noise(0.03, 0.02, 0.05, 0.10)):
        counts = simulate(rng, effect=0.0, blocks=DEFAULT_BLOCKS, noise=noise, n=n, server_per_block=False)
        for metric in METRICS:
            print(f"{noise!s:>48} {metric:>18}  {_shares(counts[('arm', metric)])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--simulations", type=int, default=2000, help="experiments per row of the no-effect table")
    parser.add_argument("--seed", type=int, default=20261130)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    effects_table(rng, max(200, args.simulations // 4))
    contrast_table(rng, max(200, args.simulations // 4))
    false_calls, total = noise_table(rng, args.simulations)
    rate = false_calls / total
    se = math.sqrt(rate * (1 - rate) / total)
    print(f"\n{total} no-effect comparisons (arm and replicate, TPOT and output throughput); standard error {se:.2%}")
    print(f"false calls under no effect at the default design: {rate:.1%}")


if __name__ == "__main__":
    main()
