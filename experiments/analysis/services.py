"""The analysis stored when an experiment ends: its SpeedupEstimate rows (each cell's
speedup, interval and verdict word) and one ExperimentAnalysis (the verdict sentences and
break-evens, output fidelity, the chart series of experiments/analysis/series.py and the
warnings of experiments/analysis/page_warnings.py), computed once from the runs
experiments/analysis/loader.py reads. The numbers are experiments/measurement/stats/inference.py's,
which the simulation in scripts/check_verdicts.py calls alike. Definitions are in
docs/metrics.md and on the page.
"""

from django.db import transaction

from experiments.analysis import breakdowns, continuation, page_warnings, primary, search, series
from experiments.analysis.loader import analysed_metrics, load_runs
from experiments.analysis.variance import variance_components
from experiments.measurement.stats import break_even, inference, intervals, question, verdicts
from experiments.models import Arm, Experiment, ExperimentAnalysis, SpeedupEstimate

Metric = SpeedupEstimate.Metric
# The grid opens on the engine-timed TPOT: what speculation changes, whatever the stream did.
VERDICT_METRICS = (Metric.SERVER_TPOT, Metric.TPOT, Metric.E2E, Metric.OUTPUT_THROUGHPUT)


# ---------------------------------------------------------------- speedups and verdicts


def _estimate_row(
    experiment: Experiment, cell: inference.CellResult, decision: question.Decision | None, word: str = ""
) -> SpeedupEstimate:
    """The stored cell; a primary one (`decision` given) with its adjusted interval and p-value,
    and a candidate's with its word for the service (`word`)."""
    estimate = cell.estimate
    low, high = (decision.equivalence_interval or (None, None)) if decision else (None, None)
    plain = decision.plain if decision is not None and decision.stopping_aware else None
    return SpeedupEstimate(
        stopping_aware=plain is not None,
        plain_point=plain.point if plain else None,
        plain_low=plain.lo if plain else None,
        plain_high=plain.hi if plain else None,
        word=word if decision is not None else "",
        primary=decision is not None,
        # A stopping-aware interval is at 95 % conditional on the stop; the tested level stays in the why.
        confidence=decision.confidence if decision and plain is None else intervals.CONFIDENCE,
        p_value=decision.p_value if decision else None,
        equivalence_low=low,
        equivalence_high=high,
        experiment=experiment,
        arm_id=cell.arm,
        concurrency=cell.level,
        metric=cell.metric,
        point=estimate.point,
        ci_low=estimate.lo,
        ci_high=estimate.hi,
        n_pairs=cell.n_pairs,
        n_repetitions=estimate.n_blocks,
        note=estimate.note,
        outcome=cell.outcome,
        block_ratios=list(estimate.block_ratios),
        failed_baseline=cell.failed_baseline,
        failed_arm=cell.failed_arm,
    )


def _verdict_cells(cells: list[inference.CellResult], arm: Arm, metric: str, margin: float) -> list[verdicts.Cell]:
    return [
        verdicts.Cell(c.level, c.estimate, c.outcome, margin) for c in cells if c.arm == arm.id and c.metric == metric
    ]


def _break_even_json(value: break_even.BreakEven) -> dict:
    return {"state": value.state, "level": value.level, "lo": value.lo, "hi": value.hi, "reason": value.reason}


def _verdicts(experiment: Experiment, compared: list[Arm], cells: list[inference.CellResult]) -> list[dict]:
    """Per compared arm and verdict metric: the sentence and the break-even."""
    evens = inference.break_evens(cells)
    rows = []
    for arm in compared:
        for metric in VERDICT_METRICS:
            metric_cells = _verdict_cells(cells, arm, metric, experiment.equivalence_margin)
            name = Metric(metric).label
            text = (
                verdicts.noise_floor_sentence(name, metric_cells)
                if arm.is_replicate
                else verdicts.sentence(arm.label, name, metric_cells)
            )
            rows.append(
                {
                    "arm_id": arm.id,
                    "arm": arm.label,
                    "replicate": arm.is_replicate,
                    "metric": str(metric),
                    "text": text,
                    "break_even": _break_even_json(evens[(arm.id, str(metric))]),
                }
            )
    return rows


# ---------------------------------------------------------------- output fidelity


def _fidelity(experiment: Experiment, runs, baseline: Arm, compared: list[Arm]) -> list[dict]:
    if not experiment.is_greedy:
        return []
    replicate = next((arm.id for arm in compared if arm.is_replicate), None)
    cells = inference.fidelity_cells(
        runs,
        baseline=baseline.id,
        arms=[arm.id for arm in compared],
        levels=experiment.concurrency_levels,
        replicate=replicate,
    )
    return [
        {
            "arm_id": cell.arm,
            "replicate": cell.arm == replicate,
            "level": cell.level,
            "compared": cell.compared,
            "identical": cell.identical,
            "identical_share": cell.identical_share,
            "prompts": cell.prompts,
            "prompts_differing": cell.prompts_differing,
            "median_divergence": cell.median_divergence,
            "p_more_than_replicate": cell.p_more_than_replicate,
            "warn": cell.warn,
        }
        for cell in cells
        if cell.compared
    ]


# ---------------------------------------------------------------- the whole analysis


@transaction.atomic
def experiment_analyse(*, experiment: Experiment) -> ExperimentAnalysis:
    """Compute and store the speedups, verdicts, fidelity, chart series and warnings.
    Replaces any earlier analysis of the same experiment."""
    arms = list(experiment.arms.compared_or_baseline().order_by("position"))
    baseline = next(arm for arm in arms if arm.is_baseline)
    compared = [arm for arm in arms if arm.id != baseline.id]
    runs = load_runs(experiment)
    cells = inference.speedup_cells(
        runs,
        baseline=baseline.id,
        arms=[arm.id for arm in compared],
        levels=experiment.concurrency_levels,
        margin=experiment.equivalence_margin,
        metrics=analysed_metrics(experiment),
        fixed_arrival_rate=bool(experiment.request_rate),
    )
    primary_cells = primary.primary_cells(experiment, runs)
    decided = primary_cells.decide(final=True)
    step = continuation.next_step(experiment, primary_cells.decide(final=False))
    cells = primary.with_decisions(cells, decided, experiment.primary_metric)
    SpeedupEstimate.objects.filter(experiment=experiment).delete()
    words = {key: joint.word for key, joint in decided.joint_by_key().items()}
    SpeedupEstimate.objects.bulk_create(
        _estimate_row(
            experiment,
            cell,
            decided.for_cell(cell.arm, cell.level, cell.metric, experiment.primary_metric),
            words.get((cell.arm, cell.level), ""),
        )
        for cell in cells
    )
    speculative = [arm for arm in compared if arm.is_speculative]
    fidelity = _fidelity(experiment, runs, baseline, compared)
    charts = (
        series.per_request_series(experiment)
        | series.predicted_series(experiment, baseline, speculative, cells)
        | {"step_accounting": series.step_accounting(experiment, baseline, compared)}
        | breakdowns.breakdown_series(experiment, runs, baseline, compared)
    )
    labels = {arm.id: arm.label for arm in arms}
    charts["tpot_estimands"] = series.tpot_estimands(cells, labels, experiment.equivalence_margin)
    stream = series.stream_runs(experiment)
    charts["stream_fidelity"] = stream
    charts["variance_components"] = variance_components(experiment, runs, baseline, compared)
    charts["question"] = primary.question_summary(experiment, decided, step, labels)
    analysis, _ = ExperimentAnalysis.objects.update_or_create(
        experiment=experiment,
        defaults={
            "verdicts": search.with_search_break_evens(
                _verdicts(experiment, compared, cells), charts["question"]["search"], experiment.primary_metric
            ),
            "series": charts,
            "fidelity": fidelity,
            "warnings": page_warnings.analysis_warnings(
                experiment,
                compared=compared,
                decided=decided,
                stream=stream,
                fidelity=fidelity,
                labels=labels,
                components=charts["variance_components"],
            ),
        },
    )
    return analysis
