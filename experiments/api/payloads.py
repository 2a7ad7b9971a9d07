"""What the API answers, built from the same reads as the pages: an experiment with its
protocol and progress (experiments/results/selectors.py), its results (experiments/results/block_selectors.py, the
experiment page's results block) and its rows (experiments/results/exports.py, the downloads). The
API adds no arithmetic of its own, so its numbers are the page's."""

from django.urls import reverse

from experiments.analysis import acceptance_sweep, capacity
from experiments.api.submission import spec_from_experiment
from experiments.models import Experiment, SpeedupEstimate
from experiments.results import block as results
from experiments.results import block_selectors, exports, selectors, step_profiles


def _links(experiment: Experiment) -> dict:
    api = {name: reverse(f"api:experiment-{name}", args=[experiment.pk]) for name in API_LINKS}
    return api | {"page": reverse("experiments:detail", args=[experiment.pk])}


API_LINKS = ("detail", "progress", "results", "summaries", "requests", "cancel")


RUN_FIELDS = (
    "id", "arm_id", "concurrency", "repetition", "block_position", "synthetic_acceptance_length", "status",
    "requests_done", "requests_total", "error",
)  # fmt: skip
PROGRESS_COUNTS = ("total", "queued", "running", "succeeded", "failed", "cancelled", "done")


def _run(run) -> dict:
    return {name: getattr(run, name) for name in RUN_FIELDS} | {"arm": run.arm.label}


def progress_payload(experiment: Experiment) -> dict:
    """Run counts by status and every run in the order the worker executes them."""
    progress = selectors.experiment_progress(experiment=experiment)
    counts = {name: getattr(progress, name) for name in PROGRESS_COUNTS}
    runs = [_run(run) for run in selectors.experiment_runs(experiment=experiment)]
    return {"status": experiment.status, **counts, "runs": runs}


def arm_payload(arm) -> dict:
    return {
        "id": arm.id, "position": arm.position, "label": arm.label, "method": arm.method,
        "num_speculative_tokens": arm.num_speculative_tokens, "params": arm.params,
        "is_baseline": arm.is_baseline, "is_replicate": arm.is_replicate, "is_calibration": arm.is_calibration,
        "speculative_config": arm.speculative_config(), "synthetic_sweep": arm.synthetic_sweep,
    }  # fmt: skip


def _arm_with_engine(row: selectors.ArmProtocol) -> dict:
    """The arm, with what vLLM decided for its servers and where that differs from the baseline's."""
    decisions = [decision.as_json() for decision in row.engine_decisions]
    return arm_payload(row.arm) | {"engine": {"decisions": decisions, "flags": row.engine_flags}}


def experiment_payload(experiment: Experiment) -> dict:
    """The experiment: who, when, status, its protocol as a spec that could be submitted again."""
    return {
        "id": experiment.pk,
        "name": experiment.name,
        "owner": experiment.owner.get_username(),
        "status": experiment.status,
        "created_at": experiment.created_at,
        "started_at": experiment.started_at,
        "finished_at": experiment.finished_at,
        "vllm_versions": experiment.vllm_versions,
        "hardware": experiment.hardware,
        "spec": spec_from_experiment(experiment),
        "arms": [_arm_with_engine(row) for row in selectors.experiment_arms(experiment=experiment)],
        "warnings": selectors.experiment_warnings(
            experiment=experiment, analysis=getattr(experiment, "analysis", None)
        ),
        "queue_notice": selectors.experiment_queue_notice(experiment=experiment),
        "links": _links(experiment),
    }


def _summary(cell: results.Cell) -> dict:
    return {
        "arm_id": cell.arm.id, "level": cell.level, "runs": cell.runs,
        "metrics": {column: {"mean": s.mean, "min": s.min, "max": s.max} for column, s in cell.spread.items()},
        "drafts": cell.drafts, "accepted": cell.accepted, "acceptance_length": cell.acceptance_length,
        "tokens_per_step": cell.tokens_per_step, "low_concurrency": cell.low_concurrency,
    }  # fmt: skip


def _speedup(estimate: SpeedupEstimate) -> dict:
    return {
        "arm_id": estimate.arm_id, "level": estimate.concurrency, "metric": estimate.metric,
        "point": estimate.point, "ci_low": estimate.ci_low, "ci_high": estimate.ci_high,
        "outcome": estimate.outcome, "n_blocks": estimate.n_repetitions, "n_pairs": estimate.n_pairs,
        "block_ratios": estimate.block_ratios, "note": estimate.note,
        "failed_arm": estimate.failed_arm, "failed_baseline": estimate.failed_baseline,
        "primary": estimate.primary, "confidence": estimate.confidence, "p_value": estimate.p_value,
        "equivalence_low": estimate.equivalence_low, "equivalence_high": estimate.equivalence_high,
    }  # fmt: skip


def _acceptance(position: results.PositionAcceptance) -> dict:
    return {
        "arm_id": position.arm.id, "drafts": position.drafts, "accepted": position.accepted,
        "unconditional": position.unconditional, "conditional": position.conditional,
        "conditional_drafted": position.conditional_drafted,
    }  # fmt: skip


def _capacity(row: capacity.CapacityRow) -> dict:
    return {
        "arm_id": row.arm_id, "level": row.level, "arm": row.arm.as_json(), "baseline": row.baseline.as_json(),
        "preempted_alone": row.preempted_alone, "queued_alone": row.queued_alone,
    }  # fmt: skip


def _verdict(row: dict) -> dict:
    return {
        "arm_id": row["arm_id"], "arm": row["arm"], "replicate": row["replicate"], "metric": row["metric"],
        "text": row["text"], "break_even": row["break_even"],
    }  # fmt: skip


def results_payload(experiment: Experiment) -> dict:
    """Everything the experiment page's results show, as numbers: per-cell spreads over the
    blocks, every stored speedup with its interval, outcome and block ratios, the verdict
    sentences and break-evens, acceptance by position, fidelity, chart series and warnings."""
    block = block_selectors.results_for_experiment(experiment=experiment)
    analysis = block.analysis if block else None
    speedups = SpeedupEstimate.objects.filter(experiment=experiment).order_by("arm__position", "metric", "concurrency")
    series = analysis.series if analysis else {}
    profile_data = step_profiles.page_context(experiment=experiment, results=block)["profile_data"]
    return {
        "experiment_id": experiment.pk,
        "status": experiment.status,
        "analysed": analysis is not None,
        "margin": experiment.equivalence_margin,
        "levels": sorted(experiment.concurrency_levels),
        "arms": [arm_payload(arm) for arm in experiment.arms.order_by("position")],
        "summaries": [_summary(cell) for cell in block.cells] if block else [],
        "speedups": [_speedup(estimate) for estimate in speedups] if analysis else [],
        "question": series.get("question"),
        "verdicts": [_verdict(row) for row in analysis.verdicts] if analysis else [],
        "acceptance_by_position": [_acceptance(p) for p in block.acceptance] if block else [],
        "fidelity": analysis.fidelity if analysis else [],
        "stream_fidelity": analysis.series.get("stream_fidelity", []) if analysis else [],
        "series": {name: series[name] for name in SERIES if name in series},
        "capacity": [_capacity(row) for row in block.capacity_rows] if block else [],
        "capacity_warnings": block.capacity_warnings if block else [],
        "profiles": profile_data["profiles"] if profile_data else [],
        "acceptance_sweeps": [
            sweep.as_json() | {"sentence": sweep.sentence}
            for sweep in acceptance_sweep.acceptance_sweeps(experiment=experiment)
        ],
        "warnings": selectors.experiment_warnings(experiment=experiment, analysis=analysis),
    }


# The stored chart series the page draws, by name (experiments/analysis/series.py).
SERIES = (
    "tpot_cdf", "acceptance_length_cdf", "tokens_per_step", "along_output", "predicted",
    "by_category", "by_input_length", "step_accounting", "calibration",
)  # fmt: skip


def export_page(export: exports.Export, rows) -> list[dict]:
    """A page of download rows as the JSON download writes them."""
    return [exports.row_dict(export.columns, row) for row in rows]
