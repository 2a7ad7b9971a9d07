"""The tables of scripts/bench_planner.py: per scenario (search.SCENARIOS) and rule, the mean
device-minutes, blocks and levels, the share of experiments that found their answer, found it
right and made a false call, the device-minutes per experiment that found its answer, and
"saved": the fixed grid's mean device-minutes over the rule's."""

import time

import numpy as np

from experiments.measurement.planning import planner
from experiments.simulation.decisions import design_of
from experiments.simulation.search import SCENARIOS, Costs, RuleTally, adaptive, fixed
from experiments.simulation.simulator import Shape, simulate_experiment
from experiments.simulation.speed import forget, memoised

RULES = ("adaptive", "fixed grid", "fixed, bracket stop")
SEARCHES = (planner.SearchRange(1, 64, 2.0), planner.SearchRange(1, 64, 1.41))


def scenario_rows(rng: np.random.Generator, n: int, search: planner.SearchRange, costs: Costs,
                  disturbance: str = "normal", max_blocks: int = 10) -> None:  # fmt: skip
    grid = list(search.grid())
    shape = Shape("search", 1, tuple(grid))
    design = design_of(max_blocks)
    print(f"\n## {search.low}-{search.high} at resolution {search.resolution:g}: grid {grid}, family "
          f"{search.family_size}; {n} experiments per row, {disturbance} host, at most {max_blocks} blocks, start "
          f"{costs[0]:g} and run {costs[1]:g} device-minutes")  # fmt: skip
    head = f"{'dev-min':>8} {'blocks':>6} {'levels':>6} {'found':>7} {'right':>7} {'false':>7} {'per found':>9}"
    print(f"{'scenario':>24} {'rule':>20} {head} {'saved':>6}")
    for name, truth in SCENARIOS.items():
        tallies = {rule: RuleTally() for rule in RULES}
        gains = [[truth(level) - 1 for level in grid]]
        for _ in range(n):
            sim = simulate_experiment(rng, shape, gain=0.0, blocks=design.max_blocks, disturbance=disturbance,
                                      level_gains=gains)  # fmt: skip
            tallies["adaptive"].add(adaptive(sim, search, design, costs), grid, truth)
            tallies["fixed grid"].add(fixed(sim, grid, design, costs, bracket_stop=False), grid, truth)
            tallies["fixed, bracket stop"].add(fixed(sim, grid, design, costs, bracket_stop=True), grid, truth)
            forget()
        base = tallies["fixed grid"].minutes
        for rule, tally in tallies.items():
            saved = base / tally.minutes if tally.minutes else float("nan")
            print(f"{name if rule == 'adaptive' else '':>24} {rule:>20} {tally.line()} {saved:>5.2f}×")


def print_tables(*, experiments: int, seed: int, costs: Costs, disturbance: str = "normal",
                 max_blocks: int = 10) -> None:  # fmt: skip
    """The rows of every scenario for a doubling grid and one of resolution 1.41 over 1-64."""
    rng = np.random.default_rng(seed)
    began = time.monotonic()
    with memoised():
        for search in SEARCHES:
            scenario_rows(rng, experiments, search, costs, disturbance, max_blocks)
    print(f"\n{time.monotonic() - began:.0f} s; seed {seed}")
