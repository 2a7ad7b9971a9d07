"""The chart series an experiment's analysis stores (ExperimentAnalysis.series), read from its
recorded requests and run summaries: distributions over requests, tokens per step along the
output, step accounting, Leviathan et al.'s prediction beside the measured speedup, each run's
stream check and both TPOT estimands. experiments/analysis/services.py stores them; the page
and the API draw them as stored (experiments/api/payloads.py names them).
"""

from collections import defaultdict
from itertools import zip_longest

from experiments.measurement.engine import prediction, steps
from experiments.measurement.stats import acceptance, inference, intervals, latency, verdicts
from experiments.models import Arm, Experiment, RequestRecord, RunSummary, SpeedupEstimate

Metric = SpeedupEstimate.Metric
ALONG_OUTPUT_BUCKET_TOKENS = 8
CDF_POINTS = 51
# A request's fields in the order of steps.RequestSteps, then its chunks' tokens.
STEP_COLUMNS = (
    "run__arm_id", "run__concurrency", "run__repetition", "output_tokens", "ttft_ms", "e2e_ms",
    "spec_accepted_per_step", "server_decode_ms", "chunk_tokens",
)  # fmt: skip


# ---------------------------------------------------------------- per-request series


def _cdf(values: list[float]) -> list[float | None]:
    """The values at CDF_POINTS evenly spaced quantiles (0 %, 2 %, … 100 %)."""
    if not values:
        return []
    step = 100 / (CDF_POINTS - 1)
    return [latency.percentile(values, i * step) for i in range(CDF_POINTS)]


def per_request_series(experiment: Experiment) -> dict:
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


def predicted_series(experiment, baseline, arms, cells) -> dict:
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


def step_accounting(experiment: Experiment, baseline: Arm, compared: list[Arm]) -> dict:
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


def stream_runs(experiment: Experiment) -> list[dict]:
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


# ---------------------------------------------------------------- TPOT estimands


def _estimate_json(estimate: intervals.RatioEstimate) -> dict:
    return {"point": estimate.point, "lo": estimate.lo, "hi": estimate.hi, "figure": verdicts.figure(estimate)}


def tpot_estimands(cells: list[inference.CellResult], labels: dict[int, str], margin: float) -> dict:
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
