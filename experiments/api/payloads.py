"""What the API answers, built from the same reads as the pages: an experiment with its
protocol and progress (experiments/results/selectors.py), its results (experiments/results/block_selectors.py,
the experiment page's results block) and its rows (experiments/results/exports.py, the downloads). The
API adds no arithmetic of its own, so its numbers are the page's.

The shapes are the serializers' (serializers.py, result_serializers.py), which the OpenAPI
schema is generated from: each answer here is a serializer's output over what the reads
return, so the schema and the answers cannot drift apart. This module only says where each
part comes from.
"""

from collections.abc import Iterable
from typing import Any

from django.urls import reverse

from experiments.analysis import acceptance_sweep
from experiments.api import result_serializers, serializers
from experiments.api.submission import spec_from_experiment
from experiments.models import Experiment, SpeedupEstimate
from experiments.results import block_selectors, exports, selectors, step_profiles

API_LINKS = ("detail", "progress", "results", "summaries", "requests", "cancel")

# The stored chart series the page draws, by name (experiments/analysis/series.py).
SERIES = (
    "tpot_cdf", "acceptance_length_cdf", "tokens_per_step", "along_output", "predicted",
    "by_category", "by_input_length", "step_accounting", "calibration",
)  # fmt: skip

Payload = dict[str, Any]


def _links(experiment: Experiment) -> dict[str, str]:
    api = {name: reverse(f"api:experiment-{name}", args=[experiment.pk]) for name in API_LINKS}
    return api | {"page": reverse("experiments:detail", args=[experiment.pk])}


def progress_payload(experiment: Experiment) -> Payload:
    """Run counts by status and every run in the order the worker executes them."""
    progress = selectors.experiment_progress(experiment=experiment)
    counts = {name: getattr(progress, name) for name in serializers.PROGRESS_COUNTS}
    runs = selectors.experiment_runs(experiment=experiment)
    return dict(serializers.ProgressSerializer({"status": experiment.status, **counts, "runs": runs}).data)


def experiment_payload(experiment: Experiment) -> Payload:
    """The experiment: who, when, status, its protocol as a spec that could be submitted again."""
    read = {
        "experiment": experiment,
        "spec": spec_from_experiment(experiment),
        "arms": selectors.experiment_arms(experiment=experiment),
        "warnings": selectors.experiment_warnings(
            experiment=experiment, analysis=getattr(experiment, "analysis", None)
        ),
        "queue_notice": selectors.experiment_queue_notice(experiment=experiment),
        "links": _links(experiment),
    }
    return dict(serializers.ExperimentSerializer(read).data)


def results_payload(experiment: Experiment) -> Payload:
    """Everything the experiment page's results show, as numbers: per-cell spreads over the
    blocks, every stored speedup with its interval, outcome and block ratios, the verdict
    sentences and break-evens, acceptance by position, fidelity, chart series and warnings."""
    block = block_selectors.results_for_experiment(experiment=experiment)
    analysis = block.analysis if block else None
    series = analysis.series if analysis else {}
    speedups = SpeedupEstimate.objects.filter(experiment=experiment).order_by("arm__position", "metric", "concurrency")
    profile_data = step_profiles.page_context(experiment=experiment, results=block)["profile_data"]
    read = {
        "experiment": experiment,
        "analysed": analysis is not None,
        "levels": sorted(experiment.concurrency_levels),
        "arms": experiment.arms.order_by("position"),
        "summaries": block.cells if block else [],
        "speedups": speedups if analysis else [],
        "question": series.get("question"),
        "verdicts": analysis.verdicts if analysis else [],
        "acceptance_by_position": block.acceptance if block else [],
        "fidelity": analysis.fidelity if analysis else [],
        "stream_fidelity": series.get("stream_fidelity", []),
        "series": {name: series[name] for name in SERIES if name in series},
        "capacity": block.capacity_rows if block else [],
        "capacity_warnings": block.capacity_warnings if block else [],
        "profiles": profile_data["profiles"] if profile_data else [],
        "acceptance_sweeps": [
            sweep.as_json() | {"sentence": sweep.sentence}
            for sweep in acceptance_sweep.acceptance_sweeps(experiment=experiment)
        ],
        "warnings": selectors.experiment_warnings(experiment=experiment, analysis=analysis),
    }
    return dict(result_serializers.ResultsSerializer(read).data)


def export_page(export: exports.Export, rows: Iterable[Any] | None) -> list[dict[str, object]]:
    """A page of download rows (none for no page) as the JSON download writes them: the
    columns the row serializers are made of (serializers.RequestRowSerializer, SummaryRowSerializer)."""
    return [exports.row_dict(export.columns, row) for row in rows or ()]
