"""The experiment page, its progress partial (polled while the experiment runs) and the
downloads of its measurements."""

import base64
import hashlib

from csp.decorators import csp_update
from django.http import StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from experiments.analysis import acceptance_sweep
from experiments.models import Experiment
from experiments.results import block as results
from experiments.results import (
    block_selectors,
    exports,
    fleet,
    recommendation,
    search_recommendation,
    selectors,
    step_profiles,
)


def _style_hash(style: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(style.encode()).digest()).decode() + "'"


# The results' arm swatches set their colour in a style attribute; the page's CSP allows
# those exact attribute values and no other inline style.
SWATCH_STYLES_CSP = {
    "style-src": [
        "'unsafe-hashes'",
        *(
            _style_hash(f"background: {colour}")
            for colour in (results.BASELINE_COLOUR, results.REPLICATE_COLOUR, *results.ARM_COLOURS)
        ),
    ]
}


def _sweep_context(experiment: Experiment) -> dict:
    """The synthetic acceptance sweep's section: empty when no arm asked for one."""
    sweeps = acceptance_sweep.acceptance_sweeps(experiment=experiment)
    return {"sweeps": sweeps, "sweep_data": [sweep.as_json() for sweep in sweeps]}


@require_GET
# django-csp types a view as taking the request alone; its wrapper passes the URL's arguments on.
@csp_update(SWATCH_STYLES_CSP)  # type: ignore[arg-type]
def experiment_detail(request, pk: int):
    experiment = selectors.experiment_for_user(user=request.user, pk=pk)
    block = block_selectors.results_for_experiment(experiment=experiment)
    analysis = block.analysis if block else None
    context = {
        "experiment": experiment,
        "arms": selectors.experiment_arms(experiment=experiment),
        "environment": selectors.experiment_environment(experiment=experiment),
        "warnings": selectors.experiment_warnings(experiment=experiment, analysis=analysis),
        "results": block,
        "results_data": block.chart_data() if block else None,
        **_sweep_context(experiment),
        **step_profiles.page_context(experiment=experiment, results=block),
        **_recommendation(experiment, block.question if block else {}),
        # Re-runs and clones may have gone to another team: shown only to those who see it.
        "origin": Experiment.objects.visible_to(request.user).filter(pk=experiment.origin_id).first()
        if experiment.origin_id
        else None,
        "descendants": experiment.descendants.visible_to(request.user).order_by("-created_at"),
        "can_cancel": request.user == experiment.owner or request.user.is_staff,
        **_progress_context(experiment),
    }
    return render(request, "experiments/detail.html", context)


def _recommendation(experiment: Experiment, question: dict) -> dict:
    """What to deploy: from a break-even search's answer, or from the question's cells per level."""
    if question.get("search"):
        return search_recommendation.page_context(experiment=experiment, question=question)
    return recommendation.page_context(experiment=experiment, question=question)


@require_GET
def experiment_progress(request, pk: int):
    experiment = selectors.experiment_for_user(user=request.user, pk=pk)
    response = render(request, "experiments/partials/progress.html", _progress_context(experiment))
    if request.headers.get("HX-Request") and not experiment.is_active:
        # The experiment just ended while the page was polling: reload it whole, so the
        # status and the results appear.
        response["HX-Refresh"] = "true"
    return response


def _progress_context(experiment: Experiment) -> dict:
    return {
        "experiment": experiment,
        "runs": selectors.experiment_runs(experiment=experiment),
        "progress": selectors.experiment_progress(experiment=experiment),
        "workers": selectors.experiment_workers(experiment=experiment),
        "fleet": fleet.experiment_fleet(experiment=experiment),
        "queue_notice": selectors.experiment_queue_notice(experiment=experiment),
        "polling": experiment.is_active,
    }


@require_GET
def experiment_download(request, pk: int, table: str, fmt: str):
    """Run summaries or per-request rows as CSV or JSON, streamed: an experiment can hold
    hundreds of thousands of requests."""
    experiment = selectors.experiment_for_user(user=request.user, pk=pk)
    content_type, lines = exports.FORMATS[fmt]
    response = StreamingHttpResponse(lines(exports.EXPORTS[table](experiment=experiment)), content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="experiment-{experiment.pk}-{table}.{fmt}"'
    return response
