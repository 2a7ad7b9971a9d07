"""The audit of the verdict statistics (issue 36; docs/verdicts.md, "The audit"): today's method
(each primary cell's t on its own blocks) beside the block model (experiments/measurement/stats/
block_decisions.py), on simulated experiments that break the i.i.d. lognormal assumption, decided
as the page and the worker decide them (decisions.run_sequential → question.question_decisions).

Every scenario is run in the demo's shape (A/A replicate + 2 arms × 2 levels) with at most 4
blocks (3, and a 4th while a cell is open), 8 and 10, at no effect and at gains of 10, 20 and 50 %
(the TPOT speedup is 1 + gain exactly). A row prints:

- false: the experiments with a false word on a candidate cell — faster or slower where the truth
  is no effect, slower or not worth it (or equivalent) where the truth is a gain of at least the
  worthwhile one (7 %), faster where it is slower; the family's error;
- faster: candidate cells called faster (power); blocks: mean blocks run;
- cover: the shown interval holds the truth, over all candidate cells with an interval and over
  the cells called faster or slower; point/truth: the mean over the cells called faster of the
  shown point over the true speedup;
- crashes: experiments whose analysis raised (then left out of the rest); A/A ok: experiments
  whose replicate was equivalent (today) or quiet enough (block model) at every level.

Today's method runs with the interval's ends uncapped, as it was before the fix of the overflow in
block_interval, so that its crashes are counted. Plain Python and numpy, no Django.
"""

import contextlib
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from experiments.measurement.stats import block_decisions, intervals, sequential
from experiments.simulation.decisions import DEFAULT_WORTHWHILE, Result, decisions, design_of
from experiments.simulation.simulator import BASELINE, DEMO, MARGIN, REPLICATE, Experiment, Noise, simulate_experiment
from experiments.simulation.speed import memoised, patched

GAINS = (0.0, 0.10, 0.20, 0.50)
MAX_BLOCKS = (4, 8, 10)
METHODS = {sequential.PER_CELL_T: "today", sequential.BLOCK_MODEL: "new"}
CROSSING = (0.5, -0.2)  # the crossing arm's gain at c=1 and at c=4


@dataclass(frozen=True)
class Scenario:
    """A host and what happens to its runs: a simulator disturbance and Noise, runs missing
    (`missing`: the share of runs lost; `failed_starts`: the share of blocks in which one arm's
    server failed to start, so all its runs of the block are lost), and `crossing`: the
    candidates gain 50 % at concurrency 1 and lose 20 % at 4 (the truth per level)."""

    name: str
    text: str
    disturbance: str = "normal"
    noise: Noise | None = None
    missing: float = 0.0
    failed_starts: float = 0.0
    crossing: bool = False


SCENARIOS = (
    Scenario("quiet host", "lognormal starts (3 %) and runs (2.4 %): block log-ratio sd ≈ 5.5 %"),
    Scenario(
        "shared heavy starts",
        "server starts t(3) on the log scale, shared by a start's levels",
        disturbance="heavy starts",
    ),
    Scenario(
        "shocks and drift",
        "the host a random walk, and in 1 block in 5 a stretch of runs 10–40 % slower",
        disturbance="drift",
        noise=Noise(shocks=0.2),
    ),
    Scenario(
        "baseline outliers",
        "in 1 block in 10 the baseline's server 30–60 % slower at every level",
        noise=Noise(baseline_outliers=0.1),
    ),
    Scenario(
        "missing runs",
        "1 run in 10 lost, and in 1 block in 10 one arm's server failed to start",
        missing=0.1,
        failed_starts=0.1,
    ),
    Scenario(
        "missing runs, noisy host",
        "the runs lost as above, on the noisy host below",
        noise=Noise(scale=4.5),
        missing=0.1,
        failed_starts=0.1,
    ),
    Scenario(
        "heteroscedastic arms",
        "the second candidate's starts and runs spread 2.5× the others'",
        noise=Noise(arm_scale=(1.0, 1.0, 1.0, 2.5)),
    ),
    Scenario(
        "noisy host",
        "every start and run spread × 4.5: block log-ratio sd ≈ 0.25 (a CPU host's)",
        noise=Noise(scale=4.5),
    ),
    Scenario("crossing", "the candidates 1.5× at c=1 and 0.8× at c=4 (quiet host)", crossing=True),
)


def truths(scenario: Scenario, gain: float) -> dict[int, float]:
    """{level: the candidates' true speedup}."""
    if scenario.crossing:
        return {level: 1 + g for level, g in zip(DEMO.levels, CROSSING, strict=True)}
    return dict.fromkeys(DEMO.levels, 1 + gain)


def simulate(rng: np.random.Generator, scenario: Scenario, gain: float, blocks: int) -> Experiment:
    """One experiment of the scenario, with its lost runs taken out."""
    level_gains = [list(CROSSING)] * DEMO.candidates if scenario.crossing else None
    experiment = simulate_experiment(
        rng, DEMO, gain=gain, blocks=blocks, disturbance=scenario.disturbance, noise=scenario.noise,
        level_gains=level_gains,
    )  # fmt: skip
    runs = {}
    for block, block_runs in experiment.runs.items():
        failed = int(rng.integers(1, DEMO.arms)) if rng.random() < scenario.failed_starts else None
        runs[block] = [
            run for run in block_runs
            if run.arm != failed and (run.arm == BASELINE or rng.random() >= scenario.missing)
        ]  # fmt: skip
    return replace(experiment, runs=runs)


def run(experiment: Experiment, design: sequential.Design) -> Result:
    """The experiment as the worker runs it (decisions.run_sequential, with the first look's
    blocks queued at submission for every arm): after each block from the first look on, the
    arms without an open cell are left out of the next."""
    running = set(range(DEMO.arms))
    runs = []
    minutes = 0.0
    block = 0
    for block in range(1, design.max_blocks + 1):
        runs += [r for r in experiment.runs[block] if r.arm in running]
        minutes += sum(experiment.minutes[(block, arm)] for arm in running)
        if block < sequential.FIRST_LOOK:
            continue
        decided = decisions(runs, DEMO, design, final=False)
        if not decided.unsettled:
            break
        running = {BASELINE, REPLICATE, *decided.open_arms()}
    return Result(decisions(runs, DEMO, design, final=True), block, minutes)


def false_word(outcome: str, truth: float, worthwhile: float) -> bool:
    """Whether a candidate's word is wrong about its true speedup."""
    if outcome == sequential.FASTER:
        return truth <= 1
    if outcome == sequential.SLOWER:
        return truth >= 1
    if outcome in (sequential.NOT_WORTH_IT, sequential.EQUIVALENT):
        return truth >= 1 + worthwhile
    return False


@dataclass
class Row:
    """Counts over the experiments of one row of the audit."""

    experiments: int = 0
    crashes: int = 0
    false: int = 0
    cells: int = 0
    faster: int = 0
    blocks: int = 0
    with_interval: int = 0
    covered: int = 0
    called: int = 0
    called_covered: int = 0
    point_over_truth: list[float] = field(default_factory=list)
    replicate_ok: int = 0
    crossings: int = 0

    def add(self, result: Result, truth: dict[int, float], worthwhile: float) -> None:
        candidates = result.decided.candidates
        self.experiments += 1
        self.blocks += result.blocks
        self.false += any(false_word(d.outcome, truth[d.key[1]], worthwhile) for d in candidates)
        ok = (block_decisions.QUIET, sequential.EQUIVALENT)
        self.replicate_ok += bool(result.decided.replicate) and all(d.outcome in ok for d in result.decided.replicate)
        for decision in candidates:
            self._cell(decision, truth[decision.key[1]])
        arms = {d.key[0] for d in candidates}
        words = {d.key: d.outcome for d in candidates}
        low, high = DEMO.levels[0], DEMO.levels[-1]
        self.crossings += sum(
            words.get((arm, low)) == sequential.FASTER and words.get((arm, high)) == sequential.SLOWER for arm in arms
        )

    def _cell(self, decision: sequential.Decision[tuple[int, int]], truth: float) -> None:
        estimate = decision.estimate
        self.cells += 1
        self.faster += decision.outcome == sequential.FASTER
        if estimate.lo is None or estimate.hi is None:
            return
        inside = estimate.lo <= truth <= estimate.hi
        self.with_interval += 1
        self.covered += inside
        if decision.outcome in (sequential.FASTER, sequential.SLOWER):
            self.called += 1
            self.called_covered += inside
        if decision.outcome == sequential.FASTER and estimate.point is not None:
            self.point_over_truth.append(estimate.point / truth)

    def figures(self) -> list[str]:
        def share(count: int, of: int) -> str:
            return f"{count / of:.1%}" if of else "–"

        ratio = f"{float(np.mean(self.point_over_truth)):.3f}" if self.point_over_truth else "–"
        return [
            share(self.false, self.experiments), share(self.faster, self.cells),
            f"{self.blocks / max(1, self.experiments):.2f}", share(self.covered, self.with_interval),
            share(self.called_covered, self.called), ratio, str(len(self.point_over_truth)), str(self.crashes),
            share(self.replicate_ok, self.experiments),
        ]  # fmt: skip


HEAD = ("false", "faster", "blocks", "cover", "cover called", "point/truth", "called", "crashes", "A/A ok")


@contextlib.contextmanager
def method_of(method: str) -> Iterator[None]:
    """Today's method with the interval's ends as they were before the overflow's fix."""
    if method != sequential.PER_CELL_T:
        yield
        return
    with patched(intervals, "capped_exp", math.exp):
        yield


def audit_row(
    scenario: Scenario, gain: float, max_blocks: int, method: str, *, experiments: int, seed: int
) -> Row:  # fmt: skip
    """One row: the same experiments (one seed per row of a scenario) for either method."""
    rng = np.random.default_rng(seed)
    design = replace(design_of(max_blocks, DEFAULT_WORTHWHILE), method=method)
    row, truth = Row(), truths(scenario, gain)
    with memoised(), method_of(method):
        for _ in range(experiments):
            experiment = simulate(rng, scenario, gain, max_blocks)
            try:
                result = run(experiment, design)
            except (OverflowError, ValueError, ZeroDivisionError):
                row.crashes += 1
                row.experiments += 1
                continue
            row.add(result, truth, design.worthwhile_gain)
    return row


def audit(scenarios: Sequence[Scenario], *, experiments: int, seed: int, gains: Sequence[float] = GAINS,
          max_blocks: Sequence[int] = MAX_BLOCKS) -> None:  # fmt: skip
    """Print the audit's table of each scenario."""
    started = time.monotonic()
    print(f"# The verdict audit: demo shape, margin {MARGIN:.0%}, worth it from {DEFAULT_WORTHWHILE:.0%}, "
          f"{experiments} experiments a row (a third of that at gains of 20 and 50 %), seed {seed}")  # fmt: skip
    for number, scenario in enumerate(scenarios):
        print(f"\n## {scenario.name}: {scenario.text}")
        print(f"{'gain':>5} {'max':>4} {'method':>6} " + " ".join(f"{h:>12}" for h in HEAD), flush=True)
        for gain in (GAINS[1],) if scenario.crossing else gains:
            size = experiments if gain <= 0.1 else max(30, experiments // 3)
            for blocks in max_blocks:
                for method, name in METHODS.items():
                    row_seed = seed + 1000 * number + 10 * blocks + round(100 * gain)
                    row = audit_row(scenario, gain, blocks, method, experiments=size, seed=row_seed)
                    label = "cross" if scenario.crossing else f"{gain:.0%}"
                    extra = f"  crossings {row.crossings / max(1, row.experiments * DEMO.candidates):.1%}"
                    print(f"{label:>5} {blocks:>4} {name:>6} " + " ".join(f"{f:>12}" for f in row.figures())
                          + (extra if scenario.crossing else ""), flush=True)  # fmt: skip
    print(f"\n{time.monotonic() - started:.0f} s")
