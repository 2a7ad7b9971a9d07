"""What the break-even search saves: device-minutes, break-evens found and family-wise false
calls of the adaptive plan (experiments/measurement/planning/planner.py) against a fixed grid of the
same resolution, on simulated experiments with known break-even points, pushed through the
code the worker and the page use (inference.speedup_cells, question.question_decisions with
each cell's entry block, planner.plan).

Each simulated experiment is scripts/check_decisions.py's: request by request, a baseline, an
A/A replicate and one candidate arm whose gain depends on the concurrency level (SCENARIOS),
every arm on a fresh server per block, the server-start factor shared by a server's levels.

- adaptive: the search as the worker runs it. Block 1 runs the range's ends; after each block
  every arm's search names the levels it runs next (planner.plan, on the primary cells'
  decisions so far, each cell tested from the block it entered, Holm over the search's family);
  the baseline and the replicate run their union. It stops when no arm has a level left to run,
  or at the maximum.
- fixed grid: every grid level on every server, blocks added while a primary cell is open, as
  specdash runs an experiment of listed levels (Holm over every level).
- fixed, bracket stop: the same grid, stopped as soon as its words bracket the break-even at the
  resolution (or show the range holds none): a rule specdash does not offer for listed levels,
  shown to separate what the search saves by running fewer levels from what it saves by stopping.

Device-minutes: every server session costs a start (--start-minutes) and each run on it
(--run-minutes); the defaults are the GPU-like model of the issue (3 and 1). "found" counts
experiments whose words settle the answer at the resolution (a bracket of neighbours, or none in
the range); "right" those whose answer has no false word in it; "false" any primary cell called
faster or slower against its true speedup (at no gain, any call): the family-wise false calls;
"per found" the device-minutes spent per experiment that found its answer; "saved" the fixed
grid's mean device-minutes over the rule's.

    .venv/bin/python scripts/bench_planner.py [--experiments N] [--seed S] [--start-minutes M] [--run-minutes M]

About 10 minutes at the default size on one core.
"""

import argparse
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.measurement.planning import planner
from experiments.measurement.stats import inference, question, sequential
from scripts.check_decisions import (
    BASELINE,
    METRIC,
    REPLICATE,
    Shape,
    design_of,
    forget,
    memoised,
    simulate_experiment,
)

CANDIDATE = 2
CALLED = (sequential.FASTER, sequential.SLOWER)


def smooth(at_one: float, break_even: float) -> Callable[[float], float]:
    """A speedup linear in log concurrency, `at_one` at 1, 1 at `break_even`."""
    return lambda level: math.exp(math.log(at_one) * (1 - math.log(level) / math.log(break_even)))


SCENARIOS: dict[str, Callable[[float], float]] = {
    "crosses at 12": smooth(1.5, 12),
    "crosses at 3": smooth(1.3, 3),
    "crosses at 40": smooth(1.4, 40),
    "step: 1.3 to 4, then 1": lambda level: 1.3 if level <= 4 else 1.0,
    "non-monotone": lambda level: {1: 1.4, 2: 1.25, 4: 1.15, 8: 0.95, 16: 1.1}.get(int(level), 0.8),
    "none: 0.9 everywhere": lambda level: 0.9,
    "none: 1.2 everywhere": lambda level: 1.2,
    "no effect anywhere": lambda level: 1.0,
}


@dataclass
class Tally:
    experiments: int = 0
    minutes: float = 0.0
    blocks: int = 0
    found: int = 0
    right: int = 0
    false: int = 0
    levels: int = 0

    def line(self) -> str:
        n = max(1, self.experiments)
        per_found = f"{self.minutes / self.found:>9.1f}" if self.found else f"{'–':>9}"
        return (
            f"{self.minutes / n:>8.1f} {self.blocks / n:>6.2f} {self.levels / n:>6.2f} {self.found / n:>7.1%}"
            f" {self.right / n:>7.1%} {self.false / n:>7.1%} {per_found}"
        )


@dataclass
class Plan:
    """One simulated experiment under one rule: its final decisions, what it cost, its levels."""

    decided: question.QuestionDecisions
    blocks: int
    minutes: float
    levels: set[int] = field(default_factory=set)


def _decide(runs: list[inference.RunData], levels: list[int], design: sequential.Design, *, final: bool,
            entered: dict | None = None, family: int | None = None) -> question.QuestionDecisions:  # fmt: skip
    cells = inference.speedup_cells(
        runs, baseline=BASELINE, arms=[REPLICATE, CANDIDATE], levels=levels, margin=design.margin, metrics=(METRIC,)
    )
    asked = question.Question(METRIC, tuple(levels), design, family)
    return question.question_decisions(
        runs, cells, baseline=BASELINE, candidates=[CANDIDATE], replicate=REPLICATE, question=asked, final=final,
        entered=entered,
    )  # fmt: skip


def _words(decided: question.QuestionDecisions) -> dict[int, planner.Word]:
    return {d.key[1]: planner.Word(d.outcome, d.estimate.point) for d in decided.candidates}


def adaptive(sim, search: planner.SearchRange, design: sequential.Design, costs: tuple[float, float]) -> Plan:
    """The search as the worker runs it (experiments/analysis/continuation.py, without a budget)."""
    start, run = costs
    levels = {CANDIDATE: set(search.ends)}
    entered: dict[tuple[int, int], int] = {}
    runs: list[inference.RunData] = []
    minutes, measured, block = 0.0, set(search.ends), 0
    for block in range(1, design.max_blocks + 1):
        union = set().union(*levels.values())
        plan = {BASELINE: union, REPLICATE: union, **levels}
        for arm, arm_levels in plan.items():
            for level in arm_levels:
                entered.setdefault((arm, level), block)
        runs += [r for r in sim.runs[block] if r.level in plan.get(r.arm, ())]
        minutes += sum(start + run * len(arm_levels) for arm_levels in plan.values())
        decided = _decide(runs, sorted(measured), design, final=False, entered=entered, family=search.family_size)
        step = planner.plan(
            search, _words(decided), blocks_run=block, max_blocks=design.max_blocks, lean=1 + design.worthwhile_gain
        )
        if not step.run:
            break
        levels = {CANDIDATE: set(step.run)}
        measured |= step.run
    final = _decide(runs, sorted(measured), design, final=True, entered=entered, family=search.family_size)
    return Plan(final, block, minutes, measured)


def fixed(sim, grid: list[int], design: sequential.Design, costs: tuple[float, float], *, bracket_stop: bool) -> Plan:
    """Every grid level on every server, blocks added while a cell is open (or, with
    `bracket_stop`, until the words bracket the break-even)."""
    start, run = costs
    runs: list[inference.RunData] = []
    minutes, block = 0.0, 0
    for block in range(1, design.max_blocks + 1):
        runs += sim.runs[block]
        minutes += 3 * (start + run * len(grid))
        decided = _decide(runs, grid, design, final=False)
        if not decided.unsettled:
            break
        if bracket_stop and planner.state_of(grid, _words(decided))[0] in planner.DONE:
            break
    return Plan(_decide(runs, grid, design, final=True), block, minutes, set(grid))


def _false(decision: question.Decision, truth: Callable[[float], float]) -> bool:
    """Called faster where the arm gains nothing, or slower where it loses nothing."""
    speedup = truth(decision.key[1])
    return (decision.outcome == sequential.FASTER and speedup <= 1) or (
        decision.outcome == sequential.SLOWER and speedup >= 1
    )


def _score(tally: Tally, plan: Plan, grid: list[int], truth: Callable[[float], float]) -> None:
    state, _ = planner.state_of(grid, _words(plan.decided))
    false = [decision for decision in plan.decided.candidates if _false(decision, truth)]
    tally.experiments += 1
    tally.minutes += plan.minutes
    tally.blocks += plan.blocks
    tally.levels += len(plan.levels)
    tally.found += state in planner.DONE
    tally.right += state in planner.DONE and not false
    tally.false += bool(false)


def scenario_rows(rng: np.random.Generator, n: int, search: planner.SearchRange, costs: tuple[float, float],
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
        tallies = {rule: Tally() for rule in ("adaptive", "fixed grid", "fixed, bracket stop")}
        gains = [[truth(level) - 1 for level in grid]]
        for _ in range(n):
            sim = simulate_experiment(rng, shape, gain=0.0, blocks=design.max_blocks, disturbance=disturbance,
                                      level_gains=gains)  # fmt: skip
            _score(tallies["adaptive"], adaptive(sim, search, design, costs), grid, truth)
            _score(tallies["fixed grid"], fixed(sim, grid, design, costs, bracket_stop=False), grid, truth)
            _score(tallies["fixed, bracket stop"], fixed(sim, grid, design, costs, bracket_stop=True), grid, truth)
            forget()
        base = tallies["fixed grid"].minutes
        for rule, tally in tallies.items():
            saved = base / tally.minutes if tally.minutes else float("nan")
            print(f"{name if rule == 'adaptive' else '':>24} {rule:>20} {tally.line()} {saved:>5.2f}×")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", type=int, default=100, help="simulated experiments per row")
    parser.add_argument("--seed", type=int, default=20261203)
    parser.add_argument("--start-minutes", type=float, default=3.0, help="device-minutes of one server start")
    parser.add_argument("--run-minutes", type=float, default=1.0, help="device-minutes of one run")
    parser.add_argument("--disturbance", default="normal", help="a host disturbance of scripts/check_decisions.py")
    parser.add_argument("--max-blocks", type=int, default=10, help="the design's most blocks (the form's default 10)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    costs = (args.start_minutes, args.run_minutes)
    began = time.monotonic()
    with memoised():
        for search in (planner.SearchRange(1, 64, 2.0), planner.SearchRange(1, 64, 1.41)):
            scenario_rows(rng, args.experiments, search, costs, args.disturbance, args.max_blocks)
    print(f"\n{time.monotonic() - began:.0f} s; seed {args.seed}")


if __name__ == "__main__":
    main()
