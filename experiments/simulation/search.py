"""The break-even search (experiments/measurement/planning/planner.py) against a fixed grid of the
same resolution, on simulated experiments (simulator.py: a baseline, an A/A replicate and one
candidate arm whose gain depends on the concurrency level, every arm on a fresh server per
block, the server-start factor shared by a server's levels), pushed through the code the
worker and the page use (inference.speedup_cells, question.question_decisions with each
cell's entry block, planner.plan).

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

Device-minutes: every server session costs a start and each run on it (`costs`).
"""

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from experiments.measurement.planning import planner
from experiments.measurement.stats import inference, question, sequential
from experiments.simulation.simulator import BASELINE, METRIC, REPLICATE, Experiment

CANDIDATE = 2
Truth = Callable[[float], float]  # the arm's true speedup at a level
Costs = tuple[float, float]  # device-minutes of a server start, of a run


def smooth(at_one: float, break_even: float) -> Truth:
    """A speedup linear in log concurrency, `at_one` at 1, 1 at `break_even`."""
    return lambda level: math.exp(math.log(at_one) * (1 - math.log(level) / math.log(break_even)))


_NON_MONOTONE = {1: 1.4, 2: 1.25, 4: 1.15, 8: 0.95, 16: 1.1}
SCENARIOS: dict[str, Truth] = {
    "crosses at 12": smooth(1.5, 12),
    "crosses at 3": smooth(1.3, 3),
    "crosses at 40": smooth(1.4, 40),
    "step: 1.3 to 4, then 1": lambda level: 1.3 if level <= 4 else 1.0,
    "non-monotone": lambda level: _NON_MONOTONE.get(int(level), 0.8),
    "none: 0.9 everywhere": lambda level: 0.9,
    "none: 1.2 everywhere": lambda level: 1.2,
    "no effect anywhere": lambda level: 1.0,
}


@dataclass
class Plan:
    """One simulated experiment under one rule: its final decisions, what it cost, its levels."""

    decided: question.QuestionDecisions
    blocks: int
    minutes: float
    levels: set[int] = field(default_factory=set)


def _decide(runs: list[inference.RunData], levels: list[int], design: sequential.Design, *, final: bool,
            entered: Mapping[tuple[int, int], int] | None = None,
            family: int | None = None) -> question.QuestionDecisions:  # fmt: skip
    cells = inference.speedup_cells(
        runs, baseline=BASELINE, arms=[REPLICATE, CANDIDATE], levels=levels, margin=design.margin, metrics=(METRIC,)
    )
    asked = question.Question(METRIC, tuple(levels), design, family)
    return question.question_decisions(
        runs, cells, baseline=BASELINE, candidates=[CANDIDATE], replicate=REPLICATE, question=asked, final=final,
        entered=entered,
    )  # fmt: skip


def words(decided: question.QuestionDecisions) -> dict[int, planner.Word]:
    """The candidate's words by level, as the planner reads them."""
    return {d.key[1]: planner.Word(d.outcome, d.estimate.point) for d in decided.candidates}


def adaptive(sim: Experiment, search: planner.SearchRange, design: sequential.Design, costs: Costs) -> Plan:
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
            search, words(decided), blocks_run=block, max_blocks=design.max_blocks, lean=1 + design.worthwhile_gain
        )
        if not step.run:
            break
        levels = {CANDIDATE: set(step.run)}
        measured |= step.run
    final = _decide(runs, sorted(measured), design, final=True, entered=entered, family=search.family_size)
    return Plan(final, block, minutes, measured)


def fixed(sim: Experiment, grid: list[int], design: sequential.Design, costs: Costs, *, bracket_stop: bool) -> Plan:
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
        if bracket_stop and planner.state_of(grid, words(decided))[0] in planner.DONE:
            break
    return Plan(_decide(runs, grid, design, final=True), block, minutes, set(grid))


def is_false(decision: question.Decision, truth: Truth) -> bool:
    """Called faster where the arm gains nothing, or slower where it loses nothing."""
    speedup = truth(decision.key[1])
    return (decision.outcome == sequential.FASTER and speedup <= 1) or (
        decision.outcome == sequential.SLOWER and speedup >= 1
    )


@dataclass
class RuleTally:
    """One rule's counts over the experiments of a scenario: "found" counts experiments whose words
    settle the answer at the resolution (a bracket of neighbours, or none in the range); "right"
    those whose answer has no false word in it; "false" any primary cell called faster or slower
    against its true speedup (at no gain, any call): the family-wise false calls."""

    experiments: int = 0
    minutes: float = 0.0
    blocks: int = 0
    found: int = 0
    right: int = 0
    false: int = 0
    levels: int = 0

    def add(self, plan: Plan, grid: list[int], truth: Truth) -> None:
        state, _ = planner.state_of(grid, words(plan.decided))
        false = [decision for decision in plan.decided.candidates if is_false(decision, truth)]
        self.experiments += 1
        self.minutes += plan.minutes
        self.blocks += plan.blocks
        self.levels += len(plan.levels)
        self.found += state in planner.DONE
        self.right += state in planner.DONE and not false
        self.false += bool(false)

    def line(self) -> str:
        n = max(1, self.experiments)
        per_found = f"{self.minutes / self.found:>9.1f}" if self.found else f"{'–':>9}"
        return (
            f"{self.minutes / n:>8.1f} {self.blocks / n:>6.2f} {self.levels / n:>6.2f} {self.found / n:>7.1%}"
            f" {self.right / n:>7.1%} {self.false / n:>7.1%} {per_found}"
        )
