"""Time the paired bootstrap at a realistic size: 4 arms x 8 levels x 3 repetitions x 500 requests.

Run: .venv/bin/python scripts/bench_stats.py
"""

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.stats import paired_bootstrap_speedup

ARMS, LEVELS, REPETITIONS, REQUESTS = 4, 8, 3, 500


def fake_tpots(rng, scale):
    return {(rep, prompt): rng.uniform(20, 80) * scale for rep in range(REPETITIONS) for prompt in range(REQUESTS)}


def main():
    rng = random.Random(0)
    baseline = [fake_tpots(rng, 1.0) for _ in range(LEVELS)]
    arms = [[fake_tpots(rng, 0.7) for _ in range(LEVELS)] for _ in range(ARMS)]
    first_rep = {key: value for key, value in baseline[0].items() if key[0] == 0}
    arm_first_rep = {key: value for key, value in arms[0][0].items() if key[0] == 0}
    one = time.perf_counter()
    paired_bootstrap_speedup(first_rep, arm_first_rep)
    one = time.perf_counter() - one
    start = time.perf_counter()
    for arm in arms:
        for level in range(LEVELS):
            paired_bootstrap_speedup(baseline[level], arm[level])
    total = time.perf_counter() - start
    cells = ARMS * LEVELS
    print(f"one cell, 1 repetition x {REQUESTS} pairs, 2000 resamples: {one:.2f} s")
    print(
        f"{ARMS} arms x {LEVELS} levels x {REPETITIONS} reps x {REQUESTS} requests: {total:.1f} s "
        f"({total / cells:.2f} s per cell)"
    )


if __name__ == "__main__":
    main()
