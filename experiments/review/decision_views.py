"""The decision pages: every service's current decision, one decision with its evidence and
history, proposing, editing, and the second user's approval. Check access → validate →
call experiments/decisions/services.py → redirect; nothing changes on a refused request. A user
sees, cites and acts on their teams' decisions and experiments only: another team's
decision is a 404, another team's experiment is not offered."""

from collections.abc import Callable

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from experiments import submissions
from experiments.decisions import services as decisions
from experiments.models import Decision, Experiment, IllegalTransition
from experiments.review import guardrails, selectors
from experiments.review.filters import IdListField
from experiments.review.forms import DecisionActionForm, DecisionForm


def _get_decision(request, pk: int) -> Decision:
    try:
        return selectors.decision_with_record(pk=pk, user=request.user)
    except Decision.DoesNotExist:
        raise Http404("No such decision.") from None


def _experiments(request, ids: list[int], *, team_id: int | None = None) -> list[Experiment]:
    """The experiments the user may see (of one team when editing that team's decision)."""
    visible = Experiment.objects.visible_to(request.user)
    if team_id is not None:
        visible = visible.filter(team=team_id)
    found = visible.prefetch_related("arms").in_bulk(ids)
    return [found[i] for i in ids if i in found]


@require_GET
def decision_list(request):
    services = selectors.decisions_by_service(user=request.user)
    context = {"services": services, "several_teams": len({s.team for s in services}) > 1}
    return render(request, "experiments/decision_list.html", context)


@require_GET
def decision_detail(request, pk: int):
    decision = _get_decision(request, pk)
    evidence_ids = [citation.experiment_id for citation in decision.citations.all()]
    context = {"decision": decision, "action_form": DecisionActionForm(initial={"version": decision.version})}
    context["compare_ids"] = evidence_ids if len(evidence_ids) > 1 else []
    context["has_guardrails"] = guardrails.has_guardrails(decision)
    return render(request, "experiments/decision_detail.html", context)


@require_GET
def decision_guardrails(request, pk: int):
    """The decision's Prometheus alerting rules, as a file (experiments/review/guardrails.py);
    a decision that deploys no speculative arm has none, and the page says why."""
    decision = _get_decision(request, pk)
    try:
        rules = guardrails.decision_rules_file(decision)
    except guardrails.NoGuardrails as reason:
        return render(request, "error.html", {"title": "No guardrails", "message": str(reason)}, status=404)
    response = HttpResponse(rules, content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="decision-{decision.pk}-guardrails.yaml"'
    return response


def _form_page(request, form: DecisionForm, *, decision: Decision | None = None, replaces: Decision | None = None):
    status = 400 if form.is_bound else 200
    context = {"form": form, "decision": decision, "replaces": replaces, "services": _known_services(request)}
    return render(request, "experiments/decision_form.html", context, status=status)


def _known_services(request) -> list[str]:
    return sorted(set(Decision.objects.visible_to(request.user).values_list("service", flat=True)))


def _url_ids(request, name: str) -> list[int]:
    """Experiment or decision numbers from the URL; a malformed one is reported, not used."""
    try:
        return IdListField(required=False).clean(request.GET.getlist(name))
    except ValidationError as error:
        messages.error(request, error.messages[0])
        return []


# What a link may prefill (the experiment page's "Propose this decision", and a service
# profile's, which names its service): shown in the form, judged by it only when the user submits.
PREFILLED = ("service", "kind", "arm", "max_concurrency", "metric", "rationale")


def _prefill(request) -> dict:
    return {name: request.GET[name][:5000] for name in PREFILLED if name in request.GET}


@require_http_methods(["GET", "POST"])
def decision_new(request):
    """A proposal citing the experiments in the URL (?experiments=12&experiments=15), or
    replacing a decision (?replaces=7: its content and evidence to start from)."""
    ids = _url_ids(request, "experiments")
    replaces = Decision.objects.visible_to(request.user).filter(pk__in=_url_ids(request, "replaces")[:1]).first()
    initial = DecisionForm.initial_from(replaces) if replaces else {"evidence": ids, **_prefill(request)}
    ids = list(dict.fromkeys([*initial["evidence"], *ids]))
    form = DecisionForm(request.POST or None, experiments=_experiments(request, ids), initial=initial)
    if request.method == "POST" and form.is_valid():

        def write() -> str:
            decision = decisions.decision_propose(by=request.user, spec=form.spec())
            messages.success(
                request, f"Decision #{decision.pk} proposed: it becomes final when someone else approves it."
            )
            return reverse("experiments:decision", args=[decision.pk])

        return submissions.redirect_once(request, write)
    return _form_page(request, form, replaces=replaces)


@require_http_methods(["GET", "POST"])
def decision_edit(request, pk: int):
    decision = _get_decision(request, pk)
    if decision.proposed_by_id != request.user.id or not decision.is_open:
        raise PermissionDenied("Only the author may edit a proposal, and only while it is proposed.")
    initial = DecisionForm.initial_from(decision)
    ids = list(dict.fromkeys([*initial["evidence"], *_url_ids(request, "experiments")]))
    experiments = _experiments(request, ids, team_id=decision.team_id)
    form = DecisionForm(request.POST or None, experiments=experiments, initial=initial)
    version = DecisionActionForm(request.POST or None, initial={"version": decision.version})
    if request.method == "POST" and form.is_valid() and version.is_valid():
        try:
            changed = decisions.decision_edit(
                decision=decision, by=request.user, version=version.cleaned_data["version"], spec=form.spec()
            )
        except IllegalTransition as error:
            messages.error(request, str(error))
        else:
            messages.success(request, f"Version {decision.version + 1} saved." if changed else "Nothing changed.")
        return redirect("experiments:decision", pk=decision.pk)
    return _form_page(request, form, decision=decision)


# action: (service, whether a note is required); the services take different keywords.
ACTIONS: dict[str, tuple[Callable[..., object], bool]] = {
    "approve": (decisions.decision_approve, False),
    "reject": (decisions.decision_reject, True),
    "withdraw": (decisions.decision_withdraw, False),
    "dismiss-flag": (decisions.decision_dismiss_flag, True),
}


@require_POST
def decision_act(request, pk: int, action: str):
    """Approve, reject, withdraw, or dismiss a flag. Who may do what is the service's rule
    (a refusal is a 403); a stale version or state is reported and changes nothing."""
    decision = _get_decision(request, pk)
    service, note_required = ACTIONS[action]
    form = DecisionActionForm(request.POST, note_required=note_required)
    if not form.is_valid():
        if "version" in form.errors:
            messages.error(
                request, "The page sent no valid version of the decision (it was altered or is out of date): "
                "nothing changed. Reload the decision and act again.",
            )  # fmt: skip
        else:
            messages.error(request, "Say why in the note: this action keeps the reason with the decision.")
        return redirect("experiments:decision", pk=pk)
    arguments = {"version": form.cleaned_data["version"]} if action == "approve" else {}
    if note_required or action == "withdraw":
        arguments["note"] = form.cleaned_data["note"]
    try:
        service(decision=decision, by=request.user, **arguments)
    except IllegalTransition as error:
        messages.error(request, str(error))
    return redirect("experiments:decision", pk=pk)
