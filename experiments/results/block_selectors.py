"""The reads of the experiment page's results block: the arms with their colours, per-cell
spreads over repetitions (one grouped query over the run summaries), acceptance by draft
position (one SQL query over the per-position counters), the capacity rows, and the stored
speedups and analysis, put together as experiments/results/block.Results.

A fixed number of queries, never the per-request rows.
"""

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, TypedDict

from django.db import connection
from django.db.models import Aggregate, Avg, Count, Max, Min, Sum

from experiments.analysis import capacity
from experiments.analysis.verdict_grid import SPEEDUP_METRICS
from experiments.measurement.stats import acceptance
from experiments.models import Experiment, ExperimentAnalysis, Run, RunSummary, SpeedupEstimate
from experiments.results.block import (
    ARM_COLOURS,
    BASELINE_COLOUR,
    REPLICATE_COLOUR,
    SPREAD_COLUMNS,
    ArmStyle,
    Cell,
    PositionAcceptance,
    Results,
    Spread,
)


def arm_styles(*, experiment: Experiment) -> list[ArmStyle]:
    """The arms the comparison shows (not a calibration arm, experiments/measurement/engine/prediction.py) in
    position order, each with its colour: grey for the baseline."""
    arms, speculative = [], 0
    for arm in experiment.arms.compared_or_baseline().order_by("position"):
        if arm.is_baseline:
            colour = BASELINE_COLOUR
        elif arm.is_replicate:
            colour = REPLICATE_COLOUR
        else:
            colour = ARM_COLOURS[speculative % len(ARM_COLOURS)]
            speculative += 1
        arms.append(ArmStyle(arm.id, arm.label, arm.is_baseline, colour, arm.is_replicate, arm.is_speculative))
    return arms


def summary_cells(
    *, experiment: Experiment, arms: list[ArmStyle], tokens_per_step: dict[str, float | None] | None = None
) -> list[Cell]:
    """Mean, min and max of every SPREAD_COLUMNS column over the repetitions, per arm and level,
    with the spec counters summed: one grouped query over RunSummary. `tokens_per_step`
    ("arm:level" -> value) comes from the stored analysis."""
    tokens_per_step = tokens_per_step or {}
    aggregates: dict[str, Aggregate] = {}
    for column in SPREAD_COLUMNS:
        aggregates |= {f"{column}__mean": Avg(column), f"{column}__min": Min(column), f"{column}__max": Max(column)}
    # A Mapping: the spread columns' aggregates are named at run time, not in the row's TypedDict.
    rows: Iterable[Mapping[str, Any]] = (
        RunSummary.objects.succeeded_of(experiment)
        .values("run__arm_id", "run__concurrency")
        .annotate(
            runs=Count("id"), drafts=Sum("spec_num_drafts"), accepted=Sum("spec_num_accepted_tokens"), **aggregates
        )
        .order_by("run__arm__position", "run__concurrency")
    )
    by_id = {arm.id: arm for arm in arms}
    return [
        Cell(
            arm=by_id[row["run__arm_id"]],
            level=row["run__concurrency"],
            runs=row["runs"],
            spread={c: Spread(row[f"{c}__mean"], row[f"{c}__min"], row[f"{c}__max"]) for c in SPREAD_COLUMNS},
            drafts=row["drafts"],
            accepted=row["accepted"],
            tokens_per_step=tokens_per_step.get(f"{row['run__arm_id']}:{row['run__concurrency']}"),
        )
        for row in rows
        if row["run__arm_id"] in by_id  # not a calibration arm's runs
    ]


# Element-wise sum of the per-position counters; the drafts summed in each (arm, position)
# group are those of the runs that report that position.
_POSITION_SQL = f"""
SELECT run.arm_id, pos.i - 1, SUM(pos.n), SUM(summary.spec_num_drafts)
FROM {RunSummary._meta.db_table} summary
JOIN {Run._meta.db_table} run ON run.id = summary.run_id
CROSS JOIN LATERAL unnest(summary.spec_accepted_per_pos) WITH ORDINALITY AS pos(n, i)
WHERE run.experiment_id = %s AND run.status = %s
GROUP BY run.arm_id, pos.i
ORDER BY run.arm_id, pos.i
"""


class _Pooled(TypedDict):
    drafts: int
    accepted: list[int]


def acceptance_by_position(
    *, experiment: Experiment, arms: list[ArmStyle], drafted: dict[str, list] | None = None
) -> list[PositionAcceptance]:
    """Per speculative arm, accepted tokens at each draft position pooled over its succeeded
    runs (all levels and repetitions), as vLLM's unconditional rate and as the conditional
    one; `drafted` (arm id -> [(accepted, at stake)]) from the stored analysis adds the
    conditional rate from what each step actually drafted."""
    drafted = drafted or {}
    pooled: defaultdict[int, _Pooled] = defaultdict(lambda: {"drafts": 0, "accepted": []})
    with connection.cursor() as cursor:
        cursor.execute(_POSITION_SQL, [experiment.id, Run.Status.SUCCEEDED])
        for arm_id, position, accepted, drafts in cursor.fetchall():
            if position == 0:
                pooled[arm_id]["drafts"] = int(drafts or 0)
            pooled[arm_id]["accepted"].append(int(accepted))
    return [
        PositionAcceptance(
            arm=arm,
            drafts=pooled[arm.id]["drafts"],
            accepted=pooled[arm.id]["accepted"],
            unconditional=acceptance.per_position_unconditional(pooled[arm.id]["accepted"], pooled[arm.id]["drafts"]),
            conditional=acceptance.per_position_conditional(pooled[arm.id]["accepted"], pooled[arm.id]["drafts"]),
            drafted=[tuple(pair) for pair in drafted.get(str(arm.id), [])],
        )
        for arm in arms
        if arm.id in pooled and pooled[arm.id]["drafts"]
    ]


def results_for_experiment(*, experiment: Experiment) -> Results | None:
    """What the results block shows, or None before any run succeeded.

    Reads the run summaries (aggregated in SQL), the stored speedups and the stored
    analysis: a fixed number of queries, and never the per-request rows.
    """
    arms = arm_styles(experiment=experiment)
    analysis = ExperimentAnalysis.objects.filter(experiment=experiment).first()
    series = analysis.series if analysis else {}
    cells = summary_cells(experiment=experiment, arms=arms, tokens_per_step=series.get("tokens_per_step"))
    if not cells:
        return None
    speedups = SpeedupEstimate.objects.filter(experiment=experiment, metric__in=SPEEDUP_METRICS).order_by(
        "arm__position", "concurrency"
    )
    return Results(
        arms=arms,
        levels=sorted(experiment.concurrency_levels),
        cells=cells,
        acceptance=acceptance_by_position(experiment=experiment, arms=arms, drafted=series.get("conditional_drafted")),
        speedups=list(speedups) if analysis else [],
        analysis=analysis,
        slos=experiment.slo_labels,
        margin=experiment.equivalence_margin,
        primary_metric=experiment.primary_metric,
        capacity_rows=experiment_capacity(experiment, arms),
    )


def experiment_capacity(experiment: Experiment, arms: list[ArmStyle]) -> list[capacity.CapacityRow]:
    baseline = next((arm for arm in arms if arm.is_baseline), None)
    if baseline is None:
        return []
    return capacity.capacity_rows(
        capacity.capacity_cells(experiment=experiment),
        baseline_id=baseline.id,
        arm_ids=[arm.id for arm in arms if not arm.is_baseline],
        levels=sorted(experiment.concurrency_levels),
    )
