"""The statistics an experiment page shows, computed once from the recorded requests when
the experiment ends and stored (SpeedupEstimate rows and one ExperimentAnalysis).

This module reads PostgreSQL into experiments.measurement.stats.inference.RunData and stores what
experiments/measurement/stats/inference.py computes from it; the simulation in scripts/check_verdicts.py
calls the same inference code. Definitions are in docs/metrics.md and on the page.
"""

from collections import defaultdict
from itertools import zip_longest

from django.db import transaction

from experiments.analysis import breakdowns, continuation, primary, replicate, search
from experiments.analysis.variance import variance_components
from experiments.measurement.encoding.token_ids import unpack_token_ids
from experiments.measurement.engine import prediction, steps, stream_fidelity
from experiments.measurement.stats import acceptance, break_even, inference, intervals, latency, question, verdicts
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
REQUEST_COLUMNS = {
    Metric.SERVER_TPOT: "server_tpot_ms",
    Metric.TPOT: "tpot_ms",
    Metric.E2E: "e2e_ms",
    Metric.TTFT: "ttft_ms",
}
RUN_COLUMNS = {Metric.OUTPUT_THROUGHPUT: "output_throughput", Metric.REQUEST_THROUGHPUT: "request_throughput"}
# The grid opens on the engine-timed TPOT: what speculation changes, whatever the stream did.
VERDICT_METRICS = (Metric.SERVER_TPOT, Metric.TPOT, Metric.E2E, Metric.OUTPUT_THROUGHPUT)
ALONG_OUTPUT_BUCKET_TOKENS = 8
CDF_POINTS = 51
LOW_ACHIEVED_CONCURRENCY = 0.9
# A request's fields in the order of steps.RequestSteps, then its chunks' tokens.
STEP_COLUMNS = (
    "run__arm_id", "run__concurrency", "run__repetition", "output_tokens", "ttft_ms", "e2e_ms",
    "spec_accepted_per_step", "server_decode_ms", "chunk_tokens",
)  # fmt: skip


# ---------------------------------------------------------------- reading the runs


def _request_rows(experiment: Experiment, *, with_outputs: bool):
    columns = ["run_id", "prompt_index", "output_tokens", *REQUEST_COLUMNS.values()]
    if with_outputs:
        columns.append("output_token_ids")
    rows = RequestRecord.objects.succeeded_of(experiment)
    return rows.order_by("run_id", "prompt_index").values_list(*columns)


def load_runs(experiment: Experiment) -> list[inference.RunData]:
    """Every succeeded run of the experiment as inference.RunData, in a stable order."""
    with_outputs = experiment.is_greedy
    latencies: defaultdict[int, dict[str, dict[int, float | None]]] = defaultdict(
        lambda: {metric: {} for metric in REQUEST_COLUMNS}
    )
    outputs: defaultdict[int, dict[int, list[int]]] = defaultdict(dict)
    output_tokens: defaultdict[int, dict[int, int]] = defaultdict(dict)
    rows = _request_rows(experiment, with_outputs=with_outputs)
    for run_id, prompt, tokens, *values in rows.iterator(chunk_size=5000):
        output_tokens[run_id][prompt] = tokens
        for metric, value in zip(REQUEST_COLUMNS, values, strict=False):
            latencies[run_id][metric][prompt] = value
        if with_outputs and values[-1] is not None:
            outputs[run_id][prompt] = unpack_token_ids(values[-1])
    summaries = RunSummary.objects.succeeded_of(experiment).order_by("run_id")
    return [
        inference.RunData(
            arm=s.run.arm_id,
            level=s.run.concurrency,
            block=s.run.repetition,
            latencies={str(metric): values for metric, values in latencies[s.run_id].items()},
            throughputs={str(metric): getattr(s, column) for metric, column in RUN_COLUMNS.items()},
            failed=s.failed,
            outputs=outputs[s.run_id],
            stream_flagged=s.stream_flagged,
            output_tokens=output_tokens[s.run_id],
            requests=s.completed + s.failed,
        )
        for s in summaries.select_related("run")
    ]


# ---------------------------------------------------------------- speedups and verdicts


def _estimate_row(
    experiment: Experiment, cell: inference.CellResult, decision: question.Decision | None
) -> SpeedupEstimate:
    """The stored cell; a primary one (`decision` given) with its adjusted interval and p-value."""
    estimate = cell.estimate
    low, high = (decision.equivalence_interval or (None, None)) if decision else (None, None)
    return SpeedupEstimate(
        primary=decision is not None,
        confidence=decision.confidence if decision else intervals.CONFIDENCE,
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


def replicate_label(compared: list[Arm]) -> str:
    return next((arm.label for arm in compared if arm.is_replicate), "A/A replicate")


def _fidelity_warnings(fidelity: list[dict], labels: dict[int, str]) -> list[str]:
    """An arm whose prompts differ from the baseline's clearly more often than the replicate's.
    Speculative decoding is lossless only up to the hardware's numerics (vLLM's wording), so the
    warning claims no more than that difference."""
    replicate = {row["level"]: row for row in fidelity if row.get("replicate")}
    return [
        f"{labels[row['arm_id']]} at concurrency {row['level']}: the output differed from the baseline's "
        f"in at least one block for {row['prompts_differing']} of {row['prompts']} prompts, against "
        f"{replicate[row['level']]['prompts_differing']} of {replicate[row['level']]['prompts']} for the A/A "
        "replicate: clearly more often (one-sided Fisher exact test on prompts, "
        f"p = {row['p_more_than_replicate']:.3g}). Speculative decoding is lossless up to the precision of the "
        "hardware's numerics, so at temperature 0 a few outputs may differ through batch-dependent numerics, "
        "as the replicate's do; this arm's differ more often than that."
        for row in fidelity
        if row["warn"]
    ]


# ---------------------------------------------------------------- per-request series


def _cdf(values: list[float]) -> list[float | None]:
    """The values at CDF_POINTS evenly spaced quantiles (0 %, 2 %, … 100 %)."""
    if not values:
        return []
    step = 100 / (CDF_POINTS - 1)
    return [latency.percentile(values, i * step) for i in range(CDF_POINTS)]


def _per_request_series(experiment: Experiment) -> dict:
    """Distributions over requests: TPOT and acceptance length CDFs, and tokens per decode
    step, per arm and level; tokens per step along the output and conditional acceptance
    from what was drafted, per arm."""
    tpot, tau, along, steps = defaultdict(list), defaultdict(list), defaultdict(list), defaultdict(list)
    emitted: defaultdict[str, int] = defaultdict(int)
    decode: defaultdict[str, int] = defaultdict(int)
    speculative = {arm.id: arm.is_speculative for arm in experiment.arms.all()}
    rows = (
        RequestRecord.objects.succeeded_of(experiment)
        .order_by("run_id", "prompt_index")
        .values_list(
            "run__arm_id",
            "run__concurrency",
            "output_tokens",
            "tpot_ms",
            "spec_acceptance_length",
            "chunk_tokens",
            "spec_accepted_per_step",
            "spec_proposed_per_step",
        )
    )
    for arm_id, level, output_tokens, tpot_ms, acceptance_length, chunks, accepted, proposed in rows.iterator(
        chunk_size=5000
    ):
        cell = f"{arm_id}:{level}"
        if tpot_ms is not None:
            tpot[cell].append(tpot_ms)
        if acceptance_length is not None:
            tau[cell].append(acceptance_length)
        emitted[cell] += max(0, output_tokens - 1)
        decode[cell] += acceptance.decode_steps(output_tokens, accepted)
        along[arm_id].append(
            acceptance.decode_step_tokens(output_tokens, accepted, chunks, speculative=speculative[arm_id])
        )
        if accepted and proposed:
            steps[arm_id].append((accepted, proposed))
    along_output = {
        str(arm_id): acceptance.tokens_per_step_along_output(r, ALONG_OUTPUT_BUCKET_TOKENS)
        for arm_id, r in along.items()
    }
    return {
        "tpot_cdf": {key: _cdf(values) for key, values in tpot.items()},
        "acceptance_length_cdf": {key: _cdf(values) for key, values in tau.items()},
        "tokens_per_step": {cell: acceptance.tokens_per_decode_step(emitted[cell], decode[cell]) for cell in emitted},
        "along_output": {arm: buckets for arm, (buckets, _) in along_output.items()},
        # The requests left out; the key keeps the name it had when only merged chunks were read.
        "along_output_merged": {arm: left_out for arm, (_, left_out) in along_output.items()},
        "along_output_bucket_tokens": ALONG_OUTPUT_BUCKET_TOKENS,
        "conditional_drafted": {
            str(arm_id): acceptance.per_position_conditional_from_steps(arm_steps)
            for arm_id, arm_steps in steps.items()
        },
    }


def _position_counters(experiment: Experiment) -> dict[tuple[int, int], prediction.Counters]:
    """{(arm_id, level): the spec counters summed over the level's blocks}."""
    drafts: defaultdict[tuple[int, int], int] = defaultdict(int)
    per_pos: defaultdict[tuple[int, int], list[int]] = defaultdict(list)
    for s in RunSummary.objects.succeeded_of(experiment).select_related("run").order_by("run_id"):
        cell = (s.run.arm_id, s.run.concurrency)
        drafts[cell] += s.spec_num_drafts or 0
        counts = s.spec_accepted_per_pos or []
        per_pos[cell] = [a + b for a, b in zip_longest(per_pos[cell], counts, fillvalue=0)]
    return {cell: prediction.Counters(drafts[cell], per_pos[cell]) for cell in drafts}


def _step_rows(experiment: Experiment, baseline: Arm, arms: list[Arm]) -> list[steps.StepRow]:
    """The step accounting of `arms` against the baseline, from their recorded requests."""
    speculative = {arm.id for arm in arms if arm.is_speculative}
    rows = (
        RequestRecord.objects.succeeded_of(experiment)
        .filter(run__arm__in=[baseline, *arms])
        .order_by("run_id", "prompt_index")
        .values_list(*STEP_COLUMNS)
    )
    requests = (
        steps.RequestSteps(
            arm_id,
            level,
            block,
            output_tokens,
            ttft_ms,
            e2e_ms,
            accepted,
            speculative=arm_id in speculative,
            server_decode_ms=server_decode_ms,
            first_chunk_tokens=(chunks or [1])[0],
        )
        for arm_id, level, block, output_tokens, ttft_ms, e2e_ms, accepted, server_decode_ms, chunks in rows.iterator(
            chunk_size=5000
        )
    )
    return steps.step_accounting(requests, baseline=baseline.id, arms=[arm.id for arm in arms])


def _calibration(experiment: Experiment, baseline: Arm) -> list[tuple[Arm, dict[int, steps.StepRow]]]:
    """Each calibration arm with its step rows by level: their relative_cost is the measured c."""
    arms = list(experiment.arms.filter(is_calibration=True).order_by("position"))
    rows = _step_rows(experiment, baseline, arms) if arms else []
    return [(arm, {row.level: row for row in rows if row.arm == arm.id}) for arm in arms]


def _predicted_series(experiment, baseline, arms, cells) -> dict:
    """Per speculative arm, Leviathan et al.'s prediction at each level where the draft's cost
    was measured by a calibration arm, beside the measured engine-timed TPOT speedup (the decode
    speed the formula predicts, experiments/measurement/engine/prediction.py)."""
    counters = _position_counters(experiment)
    calibrated = _calibration(experiment, baseline)
    calibration = {arm.params["model"]: rows for arm, rows in calibrated}
    measured: defaultdict[int, dict[int, prediction.Interval]] = defaultdict(dict)
    for cell in cells:
        if cell.metric == Metric.SERVER_TPOT:
            estimate = cell.estimate
            measured[cell.arm][cell.level] = prediction.Interval(estimate.point, estimate.lo, estimate.hi)
    series = {}
    for arm in arms:
        spec = prediction.SpeculativeArm(
            arm.id, arm.label, arm.method, arm.num_speculative_tokens, arm.params.get("model")
        )
        by_level = {level: c for (arm_id, level), c in counters.items() if arm_id == arm.id}
        predicted = prediction.arm_prediction(
            spec, experiment.concurrency_levels, counters=by_level, calibration=calibration, measured=measured[arm.id]
        )
        series[str(arm.id)] = predicted | {"sentence": prediction.sentence(arm.label, predicted)}
    return {
        "predicted": series,
        "calibration": [
            {
                "arm_id": arm.id,
                "label": arm.label,
                "model": arm.params["model"],
                "rows": [row.as_json() for row in rows.values()],
            }
            for arm, rows in calibrated
        ],
    }


def _step_accounting(experiment: Experiment, baseline: Arm, compared: list[Arm]) -> dict:
    """Steps, tokens per step and step time per arm and level, the relative cost of a step
    against the baseline's and by how much tokens per step exceed it (experiments/measurement/engine/steps.py)."""
    accounting = _step_rows(experiment, baseline, compared)
    sentences = [
        {"arm_id": arm.id, "text": steps.sentence(arm.label, [row for row in accounting if row.arm == arm.id])}
        for arm in compared
        if any(row.arm == arm.id for row in accounting)
    ]
    return {"rows": [row.as_json() for row in accounting], "sentences": sentences}


# ---------------------------------------------------------------- stream fidelity


STREAM_COLUMNS = (
    "stream_checked", "stream_distorted", "stream_stalled", "stream_bursts", "stream_late_first_tokens",
    "stream_span_ratio_p50", "stream_span_ratio_p05",
)  # fmt: skip


def _stream_runs(experiment: Experiment) -> list[dict]:
    """Per succeeded run, how its stream compared with the engine's timing
    (experiments/measurement/engine/stream_fidelity.py) and whether it is flagged."""
    summaries = RunSummary.objects.succeeded_of(experiment).select_related("run").order_by("run_id")
    return [
        {
            "arm_id": s.run.arm_id,
            "level": s.run.concurrency,
            "block": s.run.repetition,
            "run_id": s.run_id,
            **{column.removeprefix("stream_"): getattr(s, column) for column in STREAM_COLUMNS},
            "flagged": s.stream_flagged,
        }
        for s in summaries
    ]


def _stream_warnings(rows: list[dict], labels: dict[int, str]) -> list[str]:
    flagged = [row for row in rows if row["flagged"] and row["arm_id"] in labels]
    if not flagged:
        return []
    runs = "; ".join(
        f"{labels[row['arm_id']]} at {row['level']}, block {row['block']} ({row['distorted']} of {row['checked']})"
        for row in flagged
    )
    return [
        f"In {len(flagged)} run(s) more than {stream_fidelity.DISTORTED_RUN_SHARE:.0%} of the requests did not reach "
        f"the client as the engine made them (a burst, a stall, or a decode span off the engine's): {runs}. "
        "The client's TPOT and TTFT get no verdict where those runs take part; the engine-timed TPOT, "
        "E2E and throughput are not affected."
    ]


# ---------------------------------------------------------------- warnings


def _environment_warnings(experiment: Experiment) -> list[str]:
    fields = {
        "host_name": "worker host",
        "vllm_version": "vLLM version",
        "torch_version": "torch version",
        "gpu_name": "GPU",
        "cpu_model": "CPU",
    }
    snapshots = EnvironmentSnapshot.objects.filter(run__experiment=experiment).values("run__arm__label", *fields)
    warnings = []
    for name_field, name in fields.items():
        seen = defaultdict(set)
        for snap in snapshots:
            seen[snap[name_field]].add(snap["run__arm__label"])
        if len(seen) > 1:
            detail = "; ".join(
                f"{value or 'unknown'}: {', '.join(sorted(arms))}" for value, arms in sorted(seen.items())
            )
            warnings.append(f"The arms did not all run with the same {name} ({detail}).")
    return warnings


def _design_warnings(experiment: Experiment) -> list[str]:
    warnings = []
    if experiment.repetitions < verdicts.MIN_BLOCKS:
        warnings.append(
            f"{experiment.repetitions} block(s): the page shows estimates but no verdicts; "
            f"at least {verdicts.MIN_BLOCKS} repetitions are needed to call an arm faster, slower or equivalent."
        )
    if not experiment.server_per_block:
        warnings.append(
            "One server per arm for all blocks: the intervals leave out the variance between server starts, "
            "and the arms did not interleave, so drift of the host is confounded with the arm."
        )
    if experiment.request_rate:
        warnings.append(
            "Requests arrived at a fixed Poisson rate: throughput then measures the arrival rate, "
            "so it gets no verdict."
        )
    return warnings


def _run_warnings(experiment: Experiment) -> list[str]:
    warnings = []
    failed_runs = experiment.runs.real().filter(status=Run.Status.FAILED).count()
    if failed_runs:
        warnings.append(f"{failed_runs} run(s) failed; their blocks are missing from the comparison.")
    failed_requests = RequestRecord.objects.filter(run__in=experiment.runs.real()).exclude(error="").count()
    if failed_requests:
        warnings.append(
            f"{failed_requests} request(s) failed. Where the arm and the baseline failed different numbers, "
            "that level gets no verdict."
        )
    low = sorted(
        {
            s.run.concurrency
            for s in RunSummary.objects.succeeded_of(experiment).select_related("run")
            if s.achieved_concurrency is not None
            and s.achieved_concurrency < LOW_ACHIEVED_CONCURRENCY * s.run.concurrency
        }
    )
    if low:
        warnings.append(
            f"At concurrency {', '.join(map(str, low))} some runs reached less than "
            f"{LOW_ACHIEVED_CONCURRENCY:.0%} of the nominal level (sum of E2E / duration): too few requests "
            "were in flight for that level to be measured as named."
        )
    return warnings


# ---------------------------------------------------------------- the whole analysis


def _estimate_json(estimate: intervals.RatioEstimate) -> dict:
    return {"point": estimate.point, "lo": estimate.lo, "hi": estimate.hi, "figure": verdicts.figure(estimate)}


def _tpot_estimands(cells: list[inference.CellResult], labels: dict[int, str], margin: float) -> dict:
    """Both TPOT estimands per arm, level and TPOT metric (the pooled one is the verdict's),
    and how many cells have them further apart than the margin: the page shows those."""
    rows = [
        {
            "arm_id": cell.arm,
            "arm": labels[cell.arm],
            "level": cell.level,
            "metric": cell.metric,
            "metric_name": Metric(cell.metric).label,
            "pooled": _estimate_json(cell.estimate),
            "per_request": _estimate_json(cell.per_request),
            "differs": cell.estimands_differ(margin),
        }
        for cell in cells
        if cell.per_request is not None
    ]
    return {"cells": rows, "differing": sum(row["differs"] for row in rows)}


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
        metrics=[str(m) for m in (*REQUEST_COLUMNS, *RUN_COLUMNS)],
        fixed_arrival_rate=bool(experiment.request_rate),
    )
    primary_cells = primary.primary_cells(experiment, runs)
    decided = primary_cells.decide(final=True)
    step = continuation.next_step(experiment, primary_cells.decide(final=False))
    cells = primary.with_decisions(cells, decided, experiment.primary_metric)
    SpeedupEstimate.objects.filter(experiment=experiment).delete()
    SpeedupEstimate.objects.bulk_create(
        _estimate_row(experiment, cell, decided.for_cell(cell.arm, cell.level, cell.metric, experiment.primary_metric))
        for cell in cells
    )
    speculative = [arm for arm in compared if arm.is_speculative]
    fidelity = _fidelity(experiment, runs, baseline, compared)
    series = (
        _per_request_series(experiment)
        | _predicted_series(experiment, baseline, speculative, cells)
        | {"step_accounting": _step_accounting(experiment, baseline, compared)}
        | breakdowns.breakdown_series(experiment, runs, baseline, compared)
    )
    labels = {arm.id: arm.label for arm in arms}
    series["tpot_estimands"] = _tpot_estimands(cells, labels, experiment.equivalence_margin)
    stream = _stream_runs(experiment)
    series["stream_fidelity"] = stream
    series["variance_components"] = variance_components(experiment, runs, baseline, compared)
    series["question"] = primary.question_summary(experiment, decided, step, labels)
    analysis, _ = ExperimentAnalysis.objects.update_or_create(
        experiment=experiment,
        defaults={
            "verdicts": search.with_search_break_evens(
                _verdicts(experiment, compared, cells), series["question"]["search"], experiment.primary_metric
            ),
            "series": series,
            "fidelity": fidelity,
            "warnings": experiment.protocol_warnings()
            + _design_warnings(experiment)
            + _environment_warnings(experiment)
            + _run_warnings(experiment)
            + _stream_warnings(stream, labels)
            + replicate.replicate_warnings(experiment, decided, replicate_label(compared))
            + _fidelity_warnings(fidelity, labels),
        },
    )
    return analysis
