"""The statistics an experiment page shows, computed once from the recorded requests when
the experiment ends and stored (SpeedupEstimate rows and one ExperimentAnalysis).

Definitions are in experiments/stats.py and on the page itself.
"""

from collections import defaultdict

from django.db import transaction

from experiments import stats
from experiments.models import (
    Arm,
    EnvironmentSnapshot,
    Experiment,
    ExperimentAnalysis,
    RequestRecord,
    Run,
    RunSummary,
    SpeedupEstimate,
)

Metric = SpeedupEstimate.Metric
PAIRED_METRICS = {Metric.TPOT: "tpot_ms", Metric.E2E: "e2e_ms", Metric.TTFT: "ttft_ms"}
RUN_LEVEL_METRICS = {Metric.OUTPUT_THROUGHPUT: "output_throughput", Metric.REQUEST_THROUGHPUT: "request_throughput"}
VERDICT_METRICS = (Metric.TPOT, Metric.E2E, Metric.OUTPUT_THROUGHPUT)
ALONG_OUTPUT_BUCKET_TOKENS = 8
CDF_POINTS = 51
FEW_PAIRS = 30


def _request_values(experiment: Experiment) -> dict:
    """{(arm_id, level): {metric: {(repetition, prompt_index): value}}} over successful requests."""
    values = defaultdict(lambda: defaultdict(dict))
    rows = RequestRecord.objects.filter(
        run__experiment=experiment, run__status=Run.Status.SUCCEEDED, error=""
    ).values_list("run__arm_id", "run__concurrency", "run__repetition", "prompt_index", *PAIRED_METRICS.values())
    for arm_id, level, repetition, prompt_index, *metric_values in rows.iterator(chunk_size=5000):
        cell = values[(arm_id, level)]
        for metric, value in zip(PAIRED_METRICS, metric_values, strict=True):
            cell[metric][(repetition, prompt_index)] = value
    return values


def _run_values(experiment: Experiment) -> dict:
    """{(arm_id, level): {metric: [value per repetition]}} from the run summaries."""
    values = defaultdict(lambda: defaultdict(list))
    summaries = RunSummary.objects.filter(run__experiment=experiment, run__status=Run.Status.SUCCEEDED)
    for row in summaries.values("run__arm_id", "run__concurrency", *RUN_LEVEL_METRICS.values()):
        for metric, column in RUN_LEVEL_METRICS.items():
            values[(row["run__arm_id"], row["run__concurrency"])][metric].append(row[column])
    return values


def _speedup_rows(experiment, baseline, arms) -> list[SpeedupEstimate]:
    requests, runs = _request_values(experiment), _run_values(experiment)
    rows = []
    for arm in arms:
        for level in experiment.concurrency_levels:
            base_req, arm_req = requests[(baseline.id, level)], requests[(arm.id, level)]
            for metric in PAIRED_METRICS:
                estimate = stats.paired_bootstrap_speedup(base_req[metric], arm_req[metric], seed=experiment.seed)
                rows.append(_estimate_row(experiment, arm, level, metric, estimate))
            base_run, arm_run = runs[(baseline.id, level)], runs[(arm.id, level)]
            for metric in RUN_LEVEL_METRICS:
                estimate = stats.run_level_speedup(base_run[metric], arm_run[metric], seed=experiment.seed)
                rows.append(_estimate_row(experiment, arm, level, metric, estimate))
    return rows


def _estimate_row(experiment, arm, level, metric, estimate: stats.SpeedupEstimate) -> SpeedupEstimate:
    return SpeedupEstimate(
        experiment=experiment,
        arm=arm,
        concurrency=level,
        metric=metric,
        point=estimate.point,
        ci_low=estimate.lo,
        ci_high=estimate.hi,
        n_pairs=estimate.n_pairs or 0,
        n_repetitions=estimate.n_repetitions,
        note=estimate.note,
    )


def _verdicts(arms, speedups: list[SpeedupEstimate]) -> list[dict]:
    verdicts = []
    for arm in arms:
        for metric in VERDICT_METRICS:
            rows = sorted(
                (s.concurrency, s.point, s.ci_low, s.ci_high, s.note)
                for s in speedups
                if s.arm_id == arm.id and s.metric == metric
            )
            verdicts.append(
                {
                    "arm_id": arm.id,
                    "arm": arm.label,
                    "metric": metric.value,
                    "text": stats.verdict(arm.label, Metric(metric).label, rows),
                    "break_even": stats.break_even_concurrency(rows),
                }
            )
    return verdicts


def _cdf(values: list[float]) -> list[float]:
    """The values at CDF_POINTS evenly spaced quantiles (0 %, 2 %, … 100 %)."""
    if not values:
        return []
    step = 100 / (CDF_POINTS - 1)
    return [stats.percentile(values, i * step) for i in range(CDF_POINTS)]


def _per_request_series(experiment: Experiment) -> dict:
    """Distributions over requests: TPOT and acceptance length CDFs per arm and level, and
    acceptance along the output per arm."""
    tpot, tau, steps = defaultdict(list), defaultdict(list), defaultdict(list)
    rows = RequestRecord.objects.filter(
        run__experiment=experiment, run__status=Run.Status.SUCCEEDED, error=""
    ).values_list(
        "run__arm_id", "run__concurrency", "tpot_ms", "spec_acceptance_length",
        "spec_accepted_per_step", "spec_proposed_per_step",
    )  # fmt: skip
    for arm_id, level, tpot_ms, acceptance_length, accepted, proposed in rows.iterator(chunk_size=5000):
        if tpot_ms is not None:
            tpot[f"{arm_id}:{level}"].append(tpot_ms)
        if acceptance_length is not None:
            tau[f"{arm_id}:{level}"].append(acceptance_length)
        if accepted:
            steps[arm_id].append({"accepted_per_step": accepted, "proposed_per_step": proposed})
    return {
        "tpot_cdf": {key: _cdf(values) for key, values in tpot.items()},
        "acceptance_length_cdf": {key: _cdf(values) for key, values in tau.items()},
        "along_output": {
            str(arm_id): stats.acceptance_along_output(requests, ALONG_OUTPUT_BUCKET_TOKENS)
            for arm_id, requests in steps.items()
        },
        "along_output_bucket_tokens": ALONG_OUTPUT_BUCKET_TOKENS,
    }


def _counters_by_level(experiment: Experiment) -> dict:
    """{(arm_id, level): (drafts, accepted, mean TPOT over repetitions)} from the summaries."""
    pooled = defaultdict(lambda: [0, 0, []])
    for s in RunSummary.objects.filter(run__experiment=experiment, run__status=Run.Status.SUCCEEDED).select_related(
        "run"
    ):
        cell = pooled[(s.run.arm_id, s.run.concurrency)]
        cell[0] += s.spec_num_drafts or 0
        cell[1] += s.spec_num_accepted_tokens or 0
        if s.tpot_mean_ms is not None:
            cell[2].append(s.tpot_mean_ms)
    return {key: (d, a, sum(t) / len(t) if t else None) for key, (d, a, t) in pooled.items()}


def _predicted_series(experiment, baseline, arms, speedups) -> dict:
    """Leviathan et al.'s predicted TPOT speedup per level against the measured one.

    The cost ratio c is estimated once per arm, at its lowest concurrency level, from the
    TPOTs there (stats.estimate_cost_ratio); the prediction at that level therefore equals
    the measurement, and at higher levels the gap shows what batching did to the cost of
    speculation that the acceptance alone does not explain.
    """
    counters = _counters_by_level(experiment)
    measured = {(s.arm_id, s.concurrency): s.point for s in speedups if s.metric == Metric.TPOT}
    levels = sorted(experiment.concurrency_levels)
    series = {}
    for arm in arms:
        gamma = arm.num_speculative_tokens
        base0, arm0 = counters.get((baseline.id, levels[0])), counters.get((arm.id, levels[0]))
        if not base0 or not arm0 or not arm0[0]:
            continue
        c = stats.estimate_cost_ratio(base0[2], arm0[2], stats.acceptance_length(arm0[1], arm0[0]), gamma)
        points = []
        for level in levels:
            drafts, accepted, _ = counters.get((arm.id, level), (0, 0, None))
            tau = stats.acceptance_length(accepted, drafts)
            alpha = stats.alpha_from_tau(tau, gamma) if tau is not None else None
            predicted = stats.predicted_speedup(alpha, gamma, c) if alpha is not None and c is not None else None
            points.append(
                {
                    "level": level,
                    "tau": tau,
                    "alpha": alpha,
                    "predicted": predicted,
                    "measured": measured.get((arm.id, level)),
                }
            )
        series[str(arm.id)] = {"gamma": gamma, "cost_ratio": c, "cost_level": levels[0], "points": points}
    return series


def _environment_warnings(experiment: Experiment) -> list[str]:
    fields = {"host_name": "worker host", "vllm_version": "vLLM version", "torch_version": "torch version",
              "gpu_name": "GPU", "cpu_model": "CPU"}  # fmt: skip
    snapshots = EnvironmentSnapshot.objects.filter(run__experiment=experiment).values("run__arm__label", *fields)
    warnings = []
    for field, name in fields.items():
        seen = defaultdict(set)
        for snap in snapshots:
            seen[snap[field]].add(snap["run__arm__label"])
        if len(seen) > 1:
            detail = "; ".join(f"{value or 'unknown'}: {', '.join(sorted(arms))}" for value, arms in seen.items())
            warnings.append(f"The arms did not all run with the same {name} ({detail}).")
    return warnings


def _measurement_warnings(experiment: Experiment, speedups) -> list[str]:
    warnings = []
    few = sorted({s.concurrency for s in speedups if s.metric == Metric.TPOT and 0 < s.n_pairs < FEW_PAIRS})
    if few:
        warnings.append(
            f"Fewer than {FEW_PAIRS} paired requests at concurrency {', '.join(map(str, few))}: "
            "the intervals there say little."
        )
    if experiment.repetitions < 2:
        warnings.append("One repetition: throughput speedups have no interval and run-to-run spread is unknown.")
    failed_runs = experiment.runs.filter(status=Run.Status.FAILED).count()
    if failed_runs:
        warnings.append(f"{failed_runs} run(s) failed; their cells are missing from the comparison.")
    failed_requests = RequestRecord.objects.filter(run__experiment=experiment).exclude(error="").count()
    if failed_requests:
        warnings.append(f"{failed_requests} request(s) failed and are left out of latencies and speedups.")
    return warnings


@transaction.atomic
def experiment_analyse(*, experiment: Experiment) -> ExperimentAnalysis:
    """Compute and store the speedups, verdicts, chart series and warnings. Replaces any
    earlier analysis of the same experiment."""
    arms = list(experiment.arms.order_by("position"))
    baseline = next(arm for arm in arms if arm.method == Arm.Method.BASELINE)
    speculative = [arm for arm in arms if arm.id != baseline.id]
    speedups = _speedup_rows(experiment, baseline, speculative)
    SpeedupEstimate.objects.filter(experiment=experiment).delete()
    SpeedupEstimate.objects.bulk_create(speedups)
    series = _per_request_series(experiment) | {
        "predicted": _predicted_series(experiment, baseline, speculative, speedups)
    }
    analysis, _ = ExperimentAnalysis.objects.update_or_create(
        experiment=experiment,
        defaults={
            "verdicts": _verdicts(speculative, speedups),
            "series": series,
            "warnings": experiment.protocol_warnings()
            + _environment_warnings(experiment)
            + _measurement_warnings(experiment, speedups),
        },
    )
    return analysis
