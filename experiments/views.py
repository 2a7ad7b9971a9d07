from django.contrib import messages
from django.core.paginator import Paginator
from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from experiments import exports, results, selectors, services
from experiments.forms import ARM_FORMSET_PREFIX, ArmFormSet, ExperimentFilterForm, ExperimentForm
from experiments.models import Experiment

PAGE_SIZE = 20


def _get_experiment_for_user(request, pk: int) -> Experiment:
    # Every member of the team may see every experiment; login is enforced by middleware.
    return get_object_or_404(Experiment.objects.select_related("owner"), pk=pk)


@require_GET
def experiment_list(request):
    filters = ExperimentFilterForm(request.GET)
    values = filters.cleaned_data if filters.is_valid() else {}
    experiments = selectors.experiment_list(
        status=values.get("status", ""),
        owner=request.user if values.get("owner") == "mine" else None,
        search=values.get("q", "").strip(),
    )
    page = Paginator(experiments, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "experiments/list.html", {"filters": filters, "page_obj": page})


@require_http_methods(["GET", "POST"])
def experiment_create(request):
    form = ExperimentForm(request.POST or None)
    arms = ArmFormSet(request.POST or None, prefix=ARM_FORMSET_PREFIX)
    # Validate both, so that every error shows at once.
    valid = [form.is_valid(), arms.is_valid()]
    if request.method == "POST" and all(valid):
        experiment = services.experiment_create(owner=request.user, arms=arms.arm_specs(), **form.experiment_fields())
        messages.success(
            request,
            f"Experiment “{experiment.name}” is queued on the {experiment.worker_queue} workers: "
            f"{experiment.runs.count()} runs.",
        )
        return redirect("experiments:detail", pk=experiment.pk)
    return render(request, "experiments/create.html", {"form": form, "arms": arms})


@require_GET
def experiment_detail(request, pk: int):
    experiment = _get_experiment_for_user(request, pk)
    block = results.results_for_experiment(experiment=experiment)
    analysis = block.analysis if block else None
    context = {
        "experiment": experiment,
        "arms": selectors.experiment_arms(experiment=experiment),
        "environment": selectors.experiment_environment(experiment=experiment),
        "warnings": selectors.experiment_warnings(experiment=experiment, analysis=analysis),
        "results": block,
        "results_data": block.chart_data() if block else None,
        **_progress_context(experiment),
    }
    return render(request, "experiments/detail.html", context)


@require_GET
def experiment_progress(request, pk: int):
    experiment = _get_experiment_for_user(request, pk)
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
        "polling": experiment.is_active,
    }


@require_GET
def experiment_download(request, pk: int, table: str, fmt: str):
    """Run summaries or per-request rows as CSV or JSON, streamed: an experiment can hold
    hundreds of thousands of requests."""
    experiment = _get_experiment_for_user(request, pk)
    content_type, lines = exports.FORMATS[fmt]
    response = StreamingHttpResponse(lines(exports.EXPORTS[table](experiment=experiment)), content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="experiment-{experiment.pk}-{table}.{fmt}"'
    return response
