import base64
import hashlib

from csp.decorators import csp_update
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from experiments import (
    acceptance_sweep,
    bench_files,
    comparison,
    decision_selectors,
    exports,
    history,
    notifications,
    prefill,
    results,
    selectors,
    services,
    step_profiles,
    submissions,
    worker_queues,
)
from experiments.forms import ARM_FORMSET_PREFIX, ArmFormSet, ExperimentForm
from experiments.history_forms import CompareForm, HistoryFilterForm
from experiments.models import Experiment, IllegalTransition
from experiments.prefill import OriginForm, RerunForm
from experiments.review_forms import CommentForm


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


def _get_experiment_for_user(request, pk: int) -> Experiment:
    """The experiment if the user may see it (experiments/teams.py); a 404 for another team's,
    which does not tell whether it exists. Login is enforced by middleware."""
    experiments = Experiment.objects.visible_to(request.user).select_related("owner", "origin", "cancelled_by", "team")
    return get_object_or_404(experiments, pk=pk)


@require_GET
def experiment_list(request):
    """The history. An invalid filter is reported above an empty list (status 400): a list
    that silently ignored it would look like an answer to the question asked."""
    filters = HistoryFilterForm(request.GET, choices=history.filter_choices(user=request.user))
    since = notifications.history_visit_record(user=request.user)
    context = {
        "filters": filters,
        "page_obj": None,
        "rows": [],
        "notices": notifications.notices_for(user=request.user, since=since),
    }
    if filters.is_valid():
        try:
            page = history.history_page(
                query=filters.query(user=request.user),
                user=request.user,
                number=filters.page_number,
                per_page=filters.page_size,
            )
        except history.NoSuchPage as error:
            filters.add_error("page", str(error))
        else:
            rows = history.history_rows(experiments=list(page), metric=filters.headline_metric)
            context |= {"page_obj": page, "rows": rows}
    return render(request, "experiments/list.html", context, status=400 if filters.errors else 200)


@require_GET
def experiment_compare(request):
    """Arms of two or more experiments side by side, with every difference between them."""
    form = CompareForm(request.GET, user=request.user)
    if not form.is_valid():
        return render(request, "experiments/compare.html", {"form": form}, status=400)
    result = comparison.comparison(experiments=form.cleaned_data["experiments"], arm_ids=form.arm_ids())
    context = {"form": form, "comparison": result, "chart_data": result.chart_data()}
    return render(request, "experiments/compare.html", context)


def _queued(request, create) -> HttpResponse:
    """Create the experiment (once, however often the form is sent) and go to its page."""

    def write() -> str:
        experiment = create()
        messages.success(
            request,
            f"Experiment “{experiment.name}” is queued on the {experiment.worker_queue} workers: "
            f"{experiment.runs.count()} runs.",
        )
        return reverse("experiments:detail", args=[experiment.pk])

    return submissions.redirect_once(request, write)


@require_http_methods(["GET", "POST"])
def experiment_create(request):
    arms = ArmFormSet(request.POST or None, prefix=ARM_FORMSET_PREFIX)
    form = ExperimentForm(
        request.POST or None,
        user=request.user,
        speculative_arms=arms.total_form_count() if arms.is_bound else 1,
        sweep_lengths=arms.posted_sweep_lengths() if arms.is_bound else 0,
        draft_arms=arms.posted_draft_arms() if arms.is_bound else None,
    )
    origin_form = OriginForm(request.POST or None, user=request.user)
    # Validate all, so that every error shows at once.
    valid = [form.is_valid(), arms.is_valid(), origin_form.is_valid()]
    origin = origin_form.cleaned_data.get("origin") if all(valid[2:]) else None
    if request.method == "POST" and all(valid):
        lineage = {"origin": origin, "origin_kind": Experiment.OriginKind.CLONE} if origin else {}
        return _queued(
            request,
            lambda: services.experiment_create(
                owner=request.user, arms=arms.arm_specs(), **form.experiment_fields(), **lineage
            ),
        )
    context = {
        "form": form,
        "arms": arms,
        "origin_form": origin_form,
        "origin": origin,
        "live_queues": worker_queues.live_queues(),
    }
    return render(request, "experiments/create.html", context, status=400 if request.method == "POST" else 200)


@require_GET
def experiment_clone(request, pk: int):
    """The experiment form filled in with this experiment's protocol."""
    origin = _get_experiment_for_user(request, pk)
    context = {
        "form": ExperimentForm(
            initial=prefill.experiment_data(origin) | {"name": f"{origin.name} (clone)"[:200]}, user=request.user
        ),
        "arms": ArmFormSet(initial=prefill.arm_initial(origin), prefix=ARM_FORMSET_PREFIX),
        "origin_form": OriginForm(initial={"origin": origin.pk}, user=request.user),
        "origin": origin,
        "live_queues": worker_queues.live_queues(),
    }
    return render(request, "experiments/create.html", context)


@require_http_methods(["GET", "POST"])
def experiment_rerun(request, pk: int):
    """The same protocol again, on the queue and vLLM version chosen. It passes through the
    experiment form, so today's rules apply and the prompt set's current hash is recorded."""
    origin = _get_experiment_for_user(request, pk)
    if request.method == "POST":
        form = RerunForm(request.POST, user=request.user)
    else:
        form = RerunForm.for_origin(origin, user=request.user)
    protocol_errors = []
    if request.method == "POST" and form.is_valid():
        experiment_form = ExperimentForm(prefill.experiment_data(origin) | form.cleaned_data, user=request.user)
        arms = ArmFormSet(prefill.arm_data(origin), prefix=ARM_FORMSET_PREFIX)
        if all([experiment_form.is_valid(), arms.is_valid()]):
            return _queued(
                request,
                lambda: services.experiment_create(
                    owner=request.user, arms=arms.arm_specs(), **experiment_form.experiment_fields(),
                    origin=origin, origin_kind=Experiment.OriginKind.RERUN,
                ),
            )  # fmt: skip
        protocol_errors = prefill.protocol_errors(experiment_form, arms)
    context = {
        "origin": origin,
        "form": form,
        "protocol_errors": protocol_errors,
        "arms": selectors.experiment_arms(experiment=origin),
        "environment": selectors.experiment_environment(experiment=origin),
        "prompt_set_changed": prefill.prompt_set_changed(origin),
        "live_queues": worker_queues.live_queues(),
        "sweep_cpu_only_queues": selectors.sweep_cpu_only_queues(experiment=origin),
    }
    return render(request, "experiments/rerun.html", context, status=400 if form.errors or protocol_errors else 200)


@require_POST
def experiment_cancel(request, pk: int):
    """Cancel a queued or running experiment: its owner or staff only."""
    experiment = _get_experiment_for_user(request, pk)
    if request.user != experiment.owner and not request.user.is_staff:
        raise PermissionDenied("Only the experiment's owner (or staff) may cancel it.")
    try:
        services.experiment_cancel(experiment=experiment, by=request.user)
    except IllegalTransition:
        messages.error(request, f"The experiment is {experiment.get_status_display().lower()}: nothing to cancel.")
    else:
        messages.success(request, "Cancelled: the runs that completed are kept, the others will not run.")
    return redirect("experiments:detail", pk=experiment.pk)


def _sweep_context(experiment: Experiment) -> dict:
    """The synthetic acceptance sweep's section: empty when no arm asked for one."""
    sweeps = acceptance_sweep.acceptance_sweeps(experiment=experiment)
    return {"sweeps": sweeps, "sweep_data": [sweep.as_json() for sweep in sweeps]}


@require_GET
@csp_update(SWATCH_STYLES_CSP)
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
        **_sweep_context(experiment),
        **step_profiles.page_context(experiment=experiment, results=block),
        # Re-runs and clones may have gone to another team: shown only to those who see it.
        "origin": Experiment.objects.visible_to(request.user).filter(pk=experiment.origin_id).first()
        if experiment.origin_id
        else None,
        "descendants": experiment.descendants.visible_to(request.user).order_by("-created_at"),
        "comments": experiment.comments.select_related("author"),
        "comment_form": CommentForm(),
        "cited_by": decision_selectors.decisions_citing(experiment_ids=[experiment.pk])[experiment.pk],
        "can_cancel": request.user == experiment.owner or request.user.is_staff,
        "import_lacks": bench_files.WHAT_AN_IMPORT_LACKS if experiment.is_imported else (),
        **_progress_context(experiment),
    }
    return render(request, "experiments/detail.html", context)


@require_POST
def comment_add(request, pk: int):
    experiment = _get_experiment_for_user(request, pk)
    form = CommentForm(request.POST)
    comments = f"{reverse('experiments:detail', args=[experiment.pk])}#comments"
    if not form.is_valid():
        messages.error(request, "The comment was not saved: " + " ".join(form.errors["body"]))
        return redirect(comments)

    def write() -> str:
        services.comment_add(experiment=experiment, author=request.user, body=form.cleaned_data["body"])
        return comments

    return submissions.redirect_once(request, write)


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
        "workers": selectors.experiment_workers(experiment=experiment),
        "queue_notice": selectors.experiment_queue_notice(experiment=experiment),
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
