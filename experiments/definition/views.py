"""Defining experiments: the form that creates one, clone (the form filled in from another),
re-run (the same protocol again) and cancel."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from experiments import submissions
from experiments.definition import cost_estimate, prefill
from experiments.definition import services as definition
from experiments.definition.forms.arms import ARM_FORMSET_PREFIX, ArmFormSet, BaseArmFormSet
from experiments.definition.forms.experiment import BudgetForm, ExperimentForm, protocol_is_valid
from experiments.definition.prefill import OriginForm, RerunForm
from experiments.execution import services as execution
from experiments.execution import worker_queues
from experiments.models import Experiment, IllegalTransition
from experiments.results import selectors


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


def _protocol_forms(request) -> tuple[ExperimentForm, BaseArmFormSet]:
    """The experiment form and its arms, bound to what the page posted (unbound on GET)."""
    arms = ArmFormSet(request.POST or None, prefix=ARM_FORMSET_PREFIX)
    form = ExperimentForm(
        request.POST or None,
        user=request.user,
        speculative_arms=arms.total_form_count() if arms.is_bound else 1,
        sweep_lengths=arms.posted_sweep_lengths() if arms.is_bound else 0,
        draft_arms=arms.posted_draft_arms() if arms.is_bound else None,
        per_run_arms=arms.posted_per_run_arms() if arms.is_bound else 0,
    )
    return form, arms


@require_http_methods(["GET", "POST"])
def experiment_create(request):
    form, arms = _protocol_forms(request)
    origin_form = OriginForm(request.POST or None, user=request.user)
    # Validate all, so that every error shows at once.
    valid = [protocol_is_valid(form, arms), origin_form.is_valid()]
    origin = origin_form.cleaned_data.get("origin") if valid[1] else None
    if request.method == "POST" and all(valid):
        lineage = {"origin": origin, "origin_kind": Experiment.OriginKind.CLONE} if origin else {}
        return _queued(
            request,
            lambda: definition.experiment_create(
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


@require_POST
def experiment_estimate(request):
    """The device-minutes of the plan the experiment form holds, as a fragment the form page asks
    for while it is edited (experiments/definition/cost_estimate.py). Nothing is saved."""
    form, arms = _protocol_forms(request)
    protocol_is_valid(form, arms)
    return render(request, "experiments/partials/cost_estimate.html", cost_estimate.estimate_context(form, arms))


@require_GET
def experiment_clone(request, pk: int):
    """The experiment form filled in with this experiment's protocol."""
    origin = selectors.experiment_for_user(user=request.user, pk=pk)
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
    origin = selectors.experiment_for_user(user=request.user, pk=pk)
    if request.method == "POST":
        form = RerunForm(request.POST, user=request.user)
    else:
        form = RerunForm.for_origin(origin, user=request.user)
    protocol_errors = []
    if request.method == "POST" and form.is_valid():
        experiment_form = ExperimentForm(prefill.experiment_data(origin) | form.cleaned_data, user=request.user)
        arms = ArmFormSet(prefill.arm_data(origin), prefix=ARM_FORMSET_PREFIX)
        if protocol_is_valid(experiment_form, arms):
            return _queued(
                request,
                lambda: definition.experiment_create(
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
def experiment_budget(request, pk: int):
    """Change a queued or running experiment's device-minute budget: its owner or staff only.
    It applies from the next block the worker decides on."""
    experiment = selectors.experiment_for_user(user=request.user, pk=pk)
    if request.user != experiment.owner and not request.user.is_staff:
        raise PermissionDenied("Only the experiment's owner (or staff) may change its budget.")
    form = BudgetForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Budget not changed: {' '.join(map(str, form.errors['max_device_minutes']))}")
        return redirect("experiments:detail", pk=experiment.pk)
    minutes = form.cleaned_data["max_device_minutes"]
    try:
        execution.experiment_budget_set(experiment=experiment, minutes=minutes)
    except IllegalTransition:
        messages.error(
            request, f"The experiment is {experiment.get_status_display().lower()}: no block is left to budget."
        )
    else:
        said = "no budget (blocks only)" if minutes is None else f"{minutes:g} device-minutes"
        messages.success(request, f"Budget set to {said}: it applies from the next block the worker decides on.")
    return redirect("experiments:detail", pk=experiment.pk)


@require_POST
def experiment_cancel(request, pk: int):
    """Cancel a queued or running experiment: its owner or staff only."""
    experiment = selectors.experiment_for_user(user=request.user, pk=pk)
    if request.user != experiment.owner and not request.user.is_staff:
        raise PermissionDenied("Only the experiment's owner (or staff) may cancel it.")
    try:
        execution.experiment_cancel(experiment=experiment, by=request.user)
    except IllegalTransition:
        messages.error(request, f"The experiment is {experiment.get_status_display().lower()}: nothing to cancel.")
    else:
        messages.success(request, "Cancelled: the runs that completed are kept, the others will not run.")
    return redirect("experiments:detail", pk=experiment.pk)
