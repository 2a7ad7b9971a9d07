"""The decisions on an experiment's primary cells (its question, experiments/measurement/stats/question.py)
from its recorded runs: what the page shows and what decides whether a block is added."""

from collections.abc import Sequence
from dataclasses import dataclass, replace

from django.db.models import Min

from experiments.analysis import capacity, continuation, host_states, joint, search
from experiments.analysis.loader import block_order
from experiments.measurement.stats import block_decisions, inference, intervals, question, sequential, verdicts
from experiments.models import Experiment, SpeedupEstimate


@dataclass(frozen=True)
class PrimaryCells:
    """An experiment's primary cells over the runs recorded so far, ready to be decided."""

    runs: Sequence[inference.RunData]
    cells: list[inference.CellResult]
    baseline: int
    candidates: list[int]
    replicate: int | None
    asked: question.Question
    entered: dict[question.CellKey, int]
    confirmations: list[int]
    capacity_differs: frozenset[question.CellKey] = frozenset()

    def decide(self, *, final: bool) -> question.QuestionDecisions:
        return question.question_decisions(
            self.runs, self.cells, baseline=self.baseline, candidates=self.candidates, replicate=self.replicate,
            question=self.asked, final=final, entered=self.entered, confirmations=self.confirmations,
            capacity_differs=self.capacity_differs,
        )  # fmt: skip


def cells_entered(experiment: Experiment) -> dict[question.CellKey, int]:
    """{(arm, level): the first block it was scheduled in}, whatever became of that run: a
    cell's looks count from there (a break-even search adds levels and confirmation arms)."""
    order = block_order(experiment)
    if order is not None:  # on a fleet, in the completion order the looks count in (loader.BlockOrder)
        places: dict[question.CellKey, int] = {}
        for arm, level, block in experiment.runs.real().values_list("arm_id", "concurrency", "repetition"):
            places[(arm, level)] = min(places.get((arm, level), order.places[block]), order.places[block])
        return places
    firsts = experiment.runs.real().values("arm_id", "concurrency").annotate(first=Min("repetition"))
    return {(row["arm_id"], row["concurrency"]): row["first"] for row in firsts}


def primary_cells(experiment: Experiment, runs: Sequence[inference.RunData]) -> PrimaryCells:
    """The primary cells' block ratios from the runs recorded so far."""
    arms = list(experiment.arms.compared_or_baseline().order_by("position"))
    baseline = next(arm.id for arm in arms if arm.is_baseline)
    replicate = next((arm.id for arm in arms if arm.is_replicate), None)
    confirmations = [arm.id for arm in arms if arm.confirms_id is not None]
    candidates = [arm.id for arm in arms if not arm.is_baseline and not arm.is_replicate and arm.confirms_id is None]
    asked = experiment.question
    cells = inference.speedup_cells(
        runs,
        baseline=baseline,
        arms=[*candidates, *confirmations, *([replicate] if replicate is not None else [])],
        levels=list(asked.levels),
        margin=experiment.equivalence_margin,
        metrics=[asked.metric],
        fixed_arrival_rate=bool(experiment.request_rate),
    )
    differs = capacity.capacity_differs(experiment=experiment, baseline_id=baseline, arm_ids=candidates)
    return PrimaryCells(
        runs, cells, baseline, candidates, replicate, asked, cells_entered(experiment), confirmations, differs
    )


def primary_decisions(
    experiment: Experiment, runs: Sequence[inference.RunData], *, final: bool
) -> question.QuestionDecisions:
    """The primary cells' decisions from the runs recorded so far."""
    return primary_cells(experiment, runs).decide(final=final)


def with_decisions(
    cells: Sequence[inference.CellResult], decided: question.QuestionDecisions, metric: str
) -> list[inference.CellResult]:
    """The cells, each primary one with the estimate and outcome of its decision: the page's
    sentences, break-even and prediction then read what the question settled."""
    by_key = decided.by_key()
    return [
        replace(cell, estimate=by_key[(cell.arm, cell.level)].estimate, outcome=by_key[(cell.arm, cell.level)].outcome)
        if cell.metric == metric and (cell.arm, cell.level) in by_key
        else cell
        for cell in cells
    ]


def _why_block_model(d: question.Decision, design: sequential.Design) -> str | None:
    """Why a primary cell settled on the block model (None: as on the per-cell method)."""
    band = f"[{1 / (1 + design.worthwhile_gain):.3f}, {1 + design.worthwhile_gain:.3f})"
    spread = d.plain.note if d.plain is not None else ""
    if d.outcome in (sequential.FASTER, sequential.SLOWER):
        return (
            f"called {d.outcome} after {d.blocks} blocks: p = {d.p_value:.2g}, within the {1 - d.confidence:.2g} "
            f"that the primary cells' family-wise 5 % allows at this look (spread {spread})"
        )
    if d.outcome in (sequential.NOT_WORTH_IT, sequential.EQUIVALENT):
        equivalent = d.outcome == sequential.EQUIVALENT
        within = f" and its equivalence interval inside 1 ± {design.margin:.0%}" if equivalent else ""
        return (
            f"settled after {d.blocks} blocks: its interval at the family's one-sided {1 - d.confidence:.2g} a side "
            f"lies inside {band}{within}: shown to gain less than {design.worthwhile_gain:.0%}, the smallest gain "
            "worth deploying, and not to lose as much"
        )
    if d.outcome == block_decisions.QUIET:
        lo, hi = d.equivalence_interval or (0.0, 0.0)
        return (
            f"quiet enough for the question after {d.blocks} blocks: its equivalence interval [{lo:.3f}, {hi:.3f}] "
            f"lies inside {band}, so the spread between this host's blocks does not hide a gain worth deploying"
        )
    if d.outcome == sequential.OPEN and d.to_settle is not None:
        return f"open after {d.blocks} blocks: about {d.to_settle} blocks in all would settle it at its current spread"
    return None


def _why(decision: question.Decision, design: sequential.Design, stop: str) -> str:
    """Why a primary cell stopped where it did, as the page says it."""
    d = decision
    if design.method == sequential.BLOCK_MODEL and (said := _why_block_model(d, design)) is not None:
        return said
    lo, hi = d.equivalence_interval or (None, None)
    if d.outcome in (sequential.FASTER, sequential.SLOWER):
        return (
            f"called {d.outcome} after {d.blocks} blocks: p = {d.p_value:.2g}, within the {1 - d.confidence:.2g} "
            "that the primary cells' family-wise 5 % allows at this look"
        )
    if d.outcome == sequential.EQUIVALENT:
        return (
            f"settled after {d.blocks} blocks: its equivalence interval [{lo:.3f}, {hi:.3f}] lies inside "
            f"1 ± {design.margin:.0%}"
        )
    if d.outcome == sequential.NOT_WORTH_IT:
        return (
            f"stopped after {d.blocks} blocks: its equivalence interval reaches at most {hi:.3f}, below "
            f"1 + {design.worthwhile_gain:.0%}, the smallest gain worth deploying"
        )
    if d.outcome == sequential.INCONCLUSIVE:
        return f"still open after {d.blocks} blocks when the experiment stopped: {stop}"
    if d.outcome == sequential.OPEN:
        return f"open after {d.blocks} blocks: more blocks are due"
    return verdicts.NO_CALL_REASON.get(d.outcome, d.outcome)


def _cell_json(decision: question.Decision, design: sequential.Design, stop: str, labels: dict[int, str]) -> dict:
    arm, level = decision.key
    estimate = decision.estimate
    plain = decision.plain
    return {
        "arm_id": arm, "arm": labels.get(arm, ""), "level": level, "outcome": decision.outcome,
        "figure": verdicts.figure(estimate), "confidence": decision.confidence,
        "confidence_percent": f"{decision.confidence:.1%}", "blocks": decision.blocks,
        "p_value": decision.p_value, "why": _why(decision, design, stop),
        "stopping_aware": decision.stopping_aware,
        "plain_figure": verdicts.figure(plain) if decision.stopping_aware and plain is not None else "",
        "to_settle": decision.to_settle,
    }  # fmt: skip


UNSETTLED = (sequential.OPEN, sequential.INCONCLUSIVE, verdicts.TOO_FEW_BLOCKS)


def _to_settle(decision: question.Decision, experiment: Experiment, step: continuation.Step, labels: dict) -> str:
    """An unsettled cell and about how much more would settle it: the blocks its decision plans at the
    levels its looks will test at (the block model), else those intervals.blocks_to_settle expects at its
    current estimate and spread (at least its first look's, FIRST_LOOK blocks), each a
    server session for the arm and for every control arm at this experiment's mean device-minutes
    per session."""
    arm, level = decision.key
    name = f"{labels.get(arm, '')} at {level}"
    total = decision.to_settle or intervals.blocks_to_settle(decision.estimate, experiment.equivalence_margin)
    if total is None and decision.blocks >= sequential.FIRST_LOOK:
        return f"{name} (its spread gives no estimate of the blocks that would settle it)"
    more = max(1, max(total or 0, sequential.FIRST_LOOK) - decision.blocks)
    sessions = more * (1 + len(continuation.control_arms(experiment)))
    minutes = sessions * continuation.session_minutes(experiment, step.device_minutes)
    return f"{name} (about {more} more block{'s' if more > 1 else ''}, ≈ {minutes:.1f} device-minutes, would settle it)"


def question_summary(
    experiment: Experiment, decided: question.QuestionDecisions, step: continuation.Step, labels: dict[int, str]
) -> dict:
    """What the page says of the question: the metric and levels asked, how many blocks and
    device-minutes it took, why it stopped, and per primary cell its word and why."""
    asked = experiment.question
    stop = step.stop_sentence(experiment)
    words = decided.joint_by_key()
    metric_label = SpeedupEstimate.Metric(asked.metric).label
    return {
        "metric": asked.metric,
        "metric_label": metric_label,
        "levels": list(asked.levels),
        "sequential": asked.design.sequential,
        "max_blocks": asked.design.max_blocks,
        "looks": list(asked.design.looks),
        "block_model": asked.design.method == sequential.BLOCK_MODEL,
        "host_states": host_states.block_states(host_states.host_runs(experiment)).sentence(),
        "worthwhile": asked.design.worthwhile_gain,
        "blocks_run": step.blocks_run,
        "device_minutes": step.device_minutes,
        "budget": experiment.max_device_minutes,
        "stop": step.stop,
        "stop_sentence": stop,
        "objective": joint.objective_json(experiment),
        "service_break_evens": joint.service_break_evens(decided.joint, labels),
        "cells": [
            _cell_json(d, asked.design, stop, labels)
            | ({"joint": joint.joint_json(words[d.key], metric_label)} if d.key in words else {})
            for d in decided.candidates
        ],
        "replicate_cells": [_cell_json(d, asked.design, stop, labels) for d in decided.replicate],
        "confirmation_cells": [_cell_json(d, asked.design, stop, labels) for d in decided.confirmation],
        "search": search.search_summary(experiment, decided, step, labels, cells_entered(experiment)),
        "open": [
            _to_settle(d, experiment, step, labels)
            for d in (*decided.candidates, *decided.confirmation)
            if (words[d.key].word if d.key in words else d.outcome) in UNSETTLED
        ],
    }
