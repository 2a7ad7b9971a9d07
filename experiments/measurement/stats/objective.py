"""The service's objective: the metric an arm must be faster on (the primary) and the metrics
that must not get worse (the guards), and the joint word per arm and level that a team acts on
(docs/verdicts.md, "The service's objective").

Faster per token is not "pays": a draft model's weights and KV cache come out of the memory
the target's requests need, so at high concurrency its running requests can decode faster
(engine TPOT "faster") while its requests queue and its throughput drops. An arm *pays* at a
level when its primary cell is called faster by the family-wise rule
(experiments/measurement/stats/sequential.py) AND every guard is shown non-inferior there:
the guard's speedup interval lies above 1 − the guard's margin.

The error of the joint claim: "pays" is an intersection of claims, so it needs no alpha of its
own for the primary (a false "pays" with nothing differing is a false "faster", which the
family holds at 5 %; intersection–union). A guard that truly loses more than its margin while
the primary truly gains must not be shown non-inferior either: each guard is tested one-sided
at the family's alpha shared over the family's cells (Bonferroni) on the design's own spending
boundary over the looks, so over every cell and look a false "non-inferior" has at most alpha.
One test per guard and cell suffices for all the guards of a cell: "pays" needs every one.
On the block model (sequential.BLOCK_MODEL) a guard's interval takes the spread of that guard
metric's block ratios pooled over the primary cells, as the primary's test does
(experiments/measurement/stats/block_model.py); on the per-cell method, its own blocks'.

The words:
- PAYS: faster on the primary, every guard non-inferior.
- COSTS: a guard shown worse than its margin (its interval below 1 − margin), whatever the
  primary said; with a faster primary this is "faster per token but costs capacity".
- NOT_WORTH_IT: the primary settled otherwise (slower, equivalent or not worth it).
- OPEN: more blocks may settle it (the primary open, or faster with a guard not yet shown).
- INCONCLUSIVE: the design's last look left it unsettled.
- a no-call reason of the primary cell (failures differ, …) is passed through.

Plain Python, no Django.
"""

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from experiments.measurement.stats import block_decisions, block_model, sequential
from experiments.measurement.stats.intervals import RatioEstimate, block_interval

PAYS = "pays"
COSTS = "costs"
NOT_WORTH_IT = "not worth it"
INCONCLUSIVE = sequential.INCONCLUSIVE
OPEN = sequential.OPEN
JOINT_SETTLED = (PAYS, COSTS, NOT_WORTH_IT)

# A guard's default margin: a loss the team accepts on a guard while the primary gains. Below
# the 7 % gain worth deploying by default, so "pays" never trades a gain for an equal loss.
GUARD_MARGIN = 0.05

# The guard statuses at a look.
SHOWN = "non-inferior"
WORSE = "worse"
UNSURE = "not shown"

# The metric that stands for capacity: where an arm queued or was preempted and the baseline
# was not (or the reverse), an arm pays only if its output throughput is shown non-inferior.
CAPACITY_METRIC = "output_throughput"
# The guards whose loss is a loss of capacity (the others are of latency).
CAPACITY_GUARDS = ("output_throughput", "request_throughput", "goodput")


@dataclass(frozen=True)
class Guard:
    """A metric that must not get worse: its speedup must be shown above 1 − margin."""

    metric: str
    margin: float = GUARD_MARGIN


@dataclass(frozen=True)
class Preset:
    """An objective a team recognises: the primary metric, the guards, and what it is for."""

    name: str
    label: str
    primary: str
    guards: tuple[Guard, ...]
    explanation: str


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            "interactive", "Interactive (a person waits for each reply)", "server_tpot",
            (Guard("e2e"), Guard("output_throughput")),
            "Per-token latency at low concurrency, measured by the engine (what speculation changes), with the "
            "end-to-end latency a user sees and the output throughput guarded: faster tokens that make a reply "
            "slower to finish, or the server slower overall, do not pay.",
        ),
        Preset(
            "shared", "Shared service under concurrency", "e2e",
            (Guard("e2e_p95"), Guard("goodput")),
            "The end-to-end latency of a service many users share, with its tail (p95) and the goodput under the "
            "SLOs guarded: a gain in the typical request that leaves the slowest ones slower, or fewer requests "
            "within the SLOs, does not pay. Goodput is guarded when the experiment sets an SLO.",
        ),
        Preset(
            "capacity", "Capacity (throughput per server)", "output_throughput",
            (Guard("e2e_p95"), Guard("goodput")),
            "Output tokens per second per server, with the tail latency (p95) and the goodput under the SLOs "
            "guarded: more tokens per second bought with requests that wait longer does not pay.",
        ),
    )
}  # fmt: skip
CUSTOM = "custom"
SINGLE_METRIC = ""  # an experiment from before objectives: its primary metric alone, no guards


@dataclass(frozen=True)
class GuardLook:
    """A guard of one cell at the look that fixed it (or the last look): its status and interval."""

    metric: str
    margin: float
    status: str
    estimate: RatioEstimate
    confidence: float
    blocks: int
    implied: bool = False  # added for capacity: the arm queued or was preempted and the baseline not


@dataclass(frozen=True)
class JointDecision:
    """An arm at a level: the joint word, the primary's decision beside it, and its guards."""

    key: tuple[int, int]
    word: str
    primary: sequential.Decision[tuple[int, int]]
    guards: tuple[GuardLook, ...] = field(default_factory=tuple)

    @property
    def blocking(self) -> tuple[GuardLook, ...]:
        """The guards that keep the cell from paying: worse, or not (yet) shown non-inferior."""
        return tuple(g for g in self.guards if g.status != SHOWN)

    @property
    def settled(self) -> bool:
        return self.word in JOINT_SETTLED


def guards_for(guards: Sequence[Guard], *, primary: str, has_slo: bool) -> tuple[Guard, ...]:
    """The guards an experiment tests: none on its primary metric itself, goodput only with an SLO."""
    return tuple(g for g in guards if g.metric != primary and (g.metric != "goodput" or has_slo))


def _own_looks(
    cell: sequential.PrimaryCell[tuple[int, int]], design: sequential.Design, blocks_run: int, final: bool
) -> tuple[list[tuple[int, int]], tuple[int, ...]]:
    """The experiment's looks this cell is tested at, as (experiment blocks, the cell's own look)."""
    looks = cell.own_looks(design)
    offset = cell.entered - 1
    taken = [(n + offset, n) for n in looks if n + offset <= blocks_run]
    if final and not taken and blocks_run - offset >= sequential.FIRST_LOOK:
        taken = [(blocks_run, blocks_run - offset)]
    return taken, looks


def guard_look(
    ratios: Mapping[int, float], guard: Guard, *, design: sequential.Design, family: int, blocks: int,
    own_look: int, looks: tuple[int, ...], spread: block_model.Spread | None = None,
) -> GuardLook:  # fmt: skip
    """A guard's one-sided test at one look: its interval from the blocks up to `blocks`, at the
    level the family's alpha shared over `family` cells allows at this look of the boundary; on
    `spread` (the block model's) where given, else on its own blocks'."""
    values = [ratio for block, ratio in sorted(ratios.items()) if block <= blocks]
    normal = design.method == sequential.BLOCK_MODEL
    level = sequential.nominal_level(design.alpha / max(1, family), looks, own_look, design.spending, normal=normal)
    confidence = 1 - 2 * level  # a one-sided bound at `level` is the two-sided interval's end
    if spread is not None and len(values) >= 2:
        estimate = block_decisions.estimate_on_spread(values, spread, confidence=confidence)
    elif len(values) >= 2:
        estimate = block_interval(values, confidence=confidence)
    else:
        estimate = block_interval(values)
    status = UNSURE
    if estimate.has_interval:
        lo, hi = estimate.interval.lo, estimate.interval.hi
        if lo > 1 - guard.margin:
            status = SHOWN
        elif hi < 1 - guard.margin:
            status = WORSE
    return GuardLook(guard.metric, guard.margin, status, estimate, confidence, len(values))


def _guards_over_looks(
    cell: sequential.PrimaryCell[tuple[int, int]], guards: Sequence[Guard],
    ratios: Mapping[str, Mapping[int, float]], *, design: sequential.Design, family: int, blocks_run: int,
    final: bool, implied: frozenset[str], pooled: Callable[[str, int], Mapping[tuple[int, int], block_model.Spread]],
) -> tuple[GuardLook, ...]:  # fmt: skip
    """Each guard at the first look that settled it (shown or worse), else at the last look taken."""
    taken, looks = _own_looks(cell, design, blocks_run, final)
    result = []
    for guard in guards:
        series = ratios.get(guard.metric, {})
        found = None
        for blocks, own in taken:
            spread = pooled(guard.metric, blocks).get(cell.key)
            found = guard_look(
                series, guard, design=design, family=family, blocks=blocks, own_look=own, looks=looks, spread=spread
            )
            if found.status != UNSURE:
                break
        if found is None:
            found = GuardLook(guard.metric, guard.margin, UNSURE, block_interval(list(series.values())), 0.0, 0)
        result.append(GuardLook(found.metric, found.margin, found.status, found.estimate, found.confidence,
                                found.blocks, implied=guard.metric in implied))  # fmt: skip
    return tuple(result)


def joint_word(primary: sequential.Decision[tuple[int, int]], guards: Sequence[GuardLook], *, more_blocks: bool) -> str:
    """The word for an arm at a level from its primary decision and its guards (module docstring)."""
    if primary.outcome not in (*sequential.SETTLED, OPEN, INCONCLUSIVE):
        return primary.outcome  # a no-call reason: failures differ, stream distorted, no data
    if any(g.status == WORSE for g in guards):
        return COSTS
    if primary.outcome == sequential.FASTER:
        if all(g.status == SHOWN for g in guards):
            return PAYS
        return OPEN if more_blocks else INCONCLUSIVE
    if primary.outcome in sequential.SETTLED:
        return NOT_WORTH_IT
    return primary.outcome


def joint_decisions(
    cells: Sequence[sequential.PrimaryCell[tuple[int, int]]], decisions: Sequence[sequential.Decision[tuple[int, int]]],
    guards: Sequence[Guard], guard_ratios: Mapping[tuple[int, int], Mapping[str, Mapping[int, float]]], *,
    design: sequential.Design, blocks_run: int, final: bool, capacity_differs: frozenset[tuple[int, int]] = frozenset(),
    primary_metric: str = "",
) -> list[JointDecision]:  # fmt: skip
    """The joint word of every primary cell. `guard_ratios[(arm, level)][metric]` are the guard
    metrics' block ratios; `capacity_differs` the cells where the arm queued or was preempted and
    the baseline was not (or the reverse): there output throughput is a guard too."""
    by_key = {decision.key: decision for decision in decisions}
    family = sum(1 for cell in cells if cell.blocked is None)
    pooled = _guard_spreads(cells, guard_ratios, design)
    more_blocks = not final and blocks_run < design.max_blocks
    result = []
    for cell in cells:
        primary = by_key[cell.key]
        implied: frozenset[str] = frozenset()
        tested = list(guards)
        needs_capacity = primary_metric != CAPACITY_METRIC and all(g.metric != CAPACITY_METRIC for g in guards)
        if cell.key in capacity_differs and needs_capacity:
            tested.append(Guard(CAPACITY_METRIC))
            implied = frozenset({CAPACITY_METRIC})
        looked = _guards_over_looks(
            cell, tested, guard_ratios.get(cell.key, {}), design=design, family=family, blocks_run=blocks_run,
            final=final, implied=implied, pooled=pooled,
        )  # fmt: skip
        result.append(JointDecision(cell.key, joint_word(primary, looked, more_blocks=more_blocks), primary, looked))
    return result


def _guard_spreads(
    cells: Sequence[sequential.PrimaryCell[tuple[int, int]]],
    guard_ratios: Mapping[tuple[int, int], Mapping[str, Mapping[int, float]]], design: sequential.Design,
) -> Callable[[str, int], Mapping[tuple[int, int], block_model.Spread]]:  # fmt: skip
    """(guard metric, experiment blocks) → each primary cell's spread of that metric's block log
    ratio on the block model, pooled over the measured primary cells up to those blocks; nothing
    on the per-cell method (each guard then takes its own blocks' spread)."""
    if design.method != sequential.BLOCK_MODEL:
        return lambda metric, blocks: {}
    measured = [cell.key for cell in cells if cell.blocked is None]

    @functools.cache
    def spreads(metric: str, blocks: int) -> Mapping[tuple[int, int], block_model.Spread]:
        ratios = {key: guard_ratios[key][metric] for key in measured if metric in guard_ratios.get(key, {})}
        return block_model.fit(ratios, block_model.arm_and_level, upto=blocks)

    return spreads


# The primary word a deployment rule reads for each joint word: "pays" is the only "faster".
_DEPLOY_OUTCOME = {PAYS: sequential.FASTER, COSTS: sequential.NOT_WORTH_IT, NOT_WORTH_IT: sequential.NOT_WORTH_IT}


def deploy_outcome(cell: Mapping[str, object]) -> str:
    """The word a rule that deploys reads for a stored question cell (experiments/analysis/
    primary.py): its joint word as a primary word, so that only an arm that pays is run and one
    that costs is settled against; an analysis from before objectives gives its primary word."""
    joint = cell.get("joint")
    outcome = str(cell["outcome"])
    if not isinstance(joint, Mapping):
        return outcome
    word = str(joint["word"])
    return _DEPLOY_OUTCOME.get(word, word)
