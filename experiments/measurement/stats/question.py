"""An experiment's question: its primary cells, taken from the recorded runs, and the
decision on each (experiments/measurement/stats/sequential.py).

The page (experiments/analysis/services.py), the worker deciding whether to add a block
(experiments/analysis/continuation.py) and the simulation (scripts/check_verdicts.py) all
call `question_decisions` on inference.RunData, so they decide alike. Django-free.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from experiments.measurement.stats import block_decisions, inference, objective, sequential, verdicts

CellKey = tuple[int, int]  # (arm, level)
Decision = sequential.Decision[CellKey]


@dataclass(frozen=True)
class Question:
    """What the experiment asked at submission: the metric its verdict rests on and the
    concurrency levels that matter, with the design that tests them."""

    metric: str
    levels: tuple[int, ...]
    design: sequential.Design
    # A break-even search (experiments/measurement/planning/planner.py): the cells each arm's family counts,
    # measured or not; its primary cells are the (arm, level) pairs it has measured. None: every
    # arm at every level of `levels`.
    family_per_arm: int | None = None
    # The service's objective (experiments/measurement/stats/objective.py): the metrics that must not
    # get worse, and the preset they came from ("" for an experiment from before objectives, whose
    # question is its primary metric alone).
    guards: tuple[objective.Guard, ...] = ()
    objective: str = objective.SINGLE_METRIC


@dataclass(frozen=True)
class QuestionDecisions:
    """The decisions on the candidates' primary cells (one family), on the A/A replicate's (a
    family of its own: a check of the host, not a candidate) and on the confirmation arms'
    (a family of their own: each confirms a schedule derived from the candidates' words)."""

    candidates: list[Decision]
    replicate: list[Decision]
    confirmation: list[Decision] = field(default_factory=list)
    # The joint word of each candidate cell, in the candidates' order: the primary called faster
    # and every guard shown non-inferior (objective.py).
    joint: list[objective.JointDecision] = field(default_factory=list)

    @property
    def unsettled(self) -> bool:
        """Some candidate cell is open, or ended inconclusive: more blocks could settle it. With
        guards, a cell whose primary is faster stays open until its guards are settled too."""
        unsettled = (sequential.OPEN, sequential.INCONCLUSIVE)
        if self.joint:
            return any(j.word in unsettled for j in self.joint)
        return any(d.outcome in unsettled for d in self.candidates)

    def joint_by_key(self) -> dict[CellKey, objective.JointDecision]:
        return {j.key: j for j in self.joint}

    def by_key(self) -> dict[CellKey, Decision]:
        """{(arm, level): decision} over the families."""
        return {decision.key: decision for decision in (*self.candidates, *self.replicate, *self.confirmation)}

    def for_cell(self, arm: int, level: int, metric: str, primary_metric: str) -> Decision | None:
        """The decision on a cell when it is a primary one, else None."""
        return self.by_key().get((arm, level)) if metric == primary_metric else None

    def open_arms(self) -> list[int]:
        """The arms with a primary cell not settled (candidates, then confirmations), in arm
        order of first appearance; a candidate's cell counts by its joint word where it has one."""
        unsettled = (sequential.OPEN, sequential.INCONCLUSIVE)
        joint = self.joint_by_key()
        words = [joint[d.key].word if d.key in joint else d.outcome for d in self.candidates]
        words += [d.outcome for d in self.confirmation]
        keys = [d.key for d in (*self.candidates, *self.confirmation)]
        return list(dict.fromkeys(key[0] for key, word in zip(keys, words, strict=True) if word in unsettled))


def _blocked(cell: inference.CellResult) -> str | None:
    """The cell's no-call reason from the per-cell rules (failures, stream, applicability,
    data), or None when more blocks could settle it."""
    if cell.outcome in verdicts.CALLS or cell.outcome == verdicts.TOO_FEW_BLOCKS:
        return None
    return cell.outcome


def primary_cells(
    runs: Sequence[inference.RunData], cells: Sequence[inference.CellResult], *, baseline: int, arms: Sequence[int],
    question: Question, entered: Mapping[CellKey, int] | None = None, replicate: int | None = None,
) -> list[sequential.PrimaryCell[CellKey]]:  # fmt: skip
    """The arms' cells on the question's metric at its levels, with their block ratios by
    block number (the looks replay blocks in order) and the block each was first scheduled in
    (`entered`; 1 where it has no entry). In a break-even search only the cells with an entry
    (levels the arm was scheduled at) are cells. On the block model an arm's ratio is over the
    baseline and the A/A `replicate` together where the replicate ran (inference.block_ratios_over)."""
    by_key = {(c.arm, c.level): c for c in cells if c.metric == question.metric}
    entered = entered or {}
    result = []
    for arm in arms:
        for level in question.levels:
            if question.family_per_arm is not None and (arm, level) not in entered:
                continue
            references = [baseline]
            if question.design.method == sequential.BLOCK_MODEL and replicate is not None and arm != replicate:
                references.append(replicate)
            ratios = inference.block_ratios_over(runs, question.metric, references=references, arm=arm, level=level)
            cell = by_key.get((arm, level))
            blocked = _blocked(cell) if cell is not None else verdicts.NO_DATA
            result.append(sequential.PrimaryCell((arm, level), ratios, blocked, entered.get((arm, level), 1)))
    return result


def question_decisions(
    runs: Sequence[inference.RunData], cells: Sequence[inference.CellResult], *, baseline: int,
    candidates: Sequence[int], replicate: int | None, question: Question, final: bool,
    entered: Mapping[CellKey, int] | None = None, confirmations: Sequence[int] = (),
    capacity_differs: frozenset[CellKey] = frozenset(),
) -> QuestionDecisions:  # fmt: skip
    """Decide the primary cells after the blocks run so far (the highest block number of
    any run). `cells` are inference.speedup_cells' results over the same runs; `entered` the
    block each cell was first scheduled in (a break-even search adds levels, the search adds
    confirmation arms, later); `capacity_differs` the cells where the arm queued or was preempted
    and the baseline was not, or the reverse (there the capacity guard must hold for "pays";
    not for an experiment from before objectives, which replays its single-metric question)."""
    blocks_run = max((run.block for run in runs), default=0)
    every_arm = [*candidates, *confirmations, *([replicate] if replicate is not None else [])]
    every_cell = primary_cells(
        runs, cells, baseline=baseline, arms=every_arm, question=question, entered=entered, replicate=replicate
    )
    spreads = block_decisions.Spreads(every_cell)  # the block model pools over every family's cells

    def family(arms: Sequence[int], *, futility: bool, searched: bool = False, quiet: bool = False) -> list[Decision]:
        primary = primary_cells(
            runs, cells, baseline=baseline, arms=arms, question=question, entered=entered, replicate=replicate
        )
        unmeasured = 0
        if searched and question.family_per_arm is not None:
            unmeasured = max(0, question.family_per_arm * len(arms) - len(primary))
        if question.design.method == sequential.BLOCK_MODEL:
            return block_decisions.decide(
                primary, question.design, blocks_run=blocks_run, final=final, futility=futility,
                unmeasured=unmeasured, spreads=spreads, quiet=quiet,
            )  # fmt: skip
        return sequential.decide(
            primary, question.design, blocks_run=blocks_run, final=final, futility=futility, unmeasured=unmeasured
        )

    # The replicate is no candidate: "not worth it" means nothing for it; on the block model it
    # asks whether the host was quiet enough for the question. Only the candidates' family
    # counts the levels a search could have measured for them.
    replicated = family([replicate], futility=False, quiet=True) if replicate is not None else []
    confirmed = family(confirmations, futility=True) if confirmations else []
    decided = family(candidates, futility=True, searched=True)
    primary = primary_cells(runs, cells, baseline=baseline, arms=candidates, question=question, entered=entered)
    guard_ratios = {
        cell.key: {
            metric: inference.block_ratios(runs, metric, baseline=baseline, arm=cell.key[0], level=cell.key[1])
            for metric in {*(g.metric for g in question.guards), objective.CAPACITY_METRIC}
        }
        for cell in primary
    }
    joint = objective.joint_decisions(
        primary, decided, question.guards, guard_ratios, design=question.design, blocks_run=blocks_run, final=final,
        capacity_differs=capacity_differs if question.objective != objective.SINGLE_METRIC else frozenset(),
        primary_metric=question.metric,
    )  # fmt: skip
    return QuestionDecisions(decided, replicated, confirmed, joint)
