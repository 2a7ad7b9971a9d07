"""What the decision pages read: the current decision of every service with its history,
one decision with its evidence and events, and who is waiting for whom."""

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Prefetch, QuerySet

from experiments.models import Decision, DecisionEvent, DecisionEvidence


@dataclass(frozen=True)
class ServiceDecisions:
    """A service's final decision (if any), the proposals open for it, and the rest, newest first."""

    service: str
    current: Decision | None
    proposals: list[Decision]
    history: list[Decision]


def _with_people(decisions: QuerySet[Decision]) -> QuerySet[Decision]:
    return decisions.select_related("arm", "proposed_by", "decided_by", "flag_experiment", "supersedes")


def decisions_by_service() -> list[ServiceDecisions]:
    """Every service that has a decision, by name: two queries."""
    citations = Prefetch("citations", queryset=DecisionEvidence.objects.select_related("experiment"))
    grouped = defaultdict(list)
    for decision in _with_people(Decision.objects.prefetch_related(citations)).order_by("-proposed_at", "-id"):
        grouped[decision.service].append(decision)
    return [
        ServiceDecisions(
            service=service,
            current=next((d for d in decisions if d.state == Decision.State.FINAL), None),
            proposals=[d for d in decisions if d.is_open],
            history=[d for d in decisions if d.state not in (Decision.State.FINAL, Decision.State.PROPOSED)],
        )
        for service, decisions in sorted(grouped.items())
    ]


def decision_with_record(*, pk: int) -> Decision:
    """One decision with its citations (and their experiments) and its events (and who)."""
    citations = Prefetch("citations", queryset=DecisionEvidence.objects.select_related("experiment__owner"))
    events = Prefetch("events", queryset=DecisionEvent.objects.select_related("actor"))
    return _with_people(Decision.objects.prefetch_related(citations, events)).get(pk=pk)


def decisions_awaiting(*, user) -> QuerySet[Decision]:
    """Proposals someone else wrote, which this user may approve."""
    return _with_people(Decision.objects.filter(state=Decision.State.PROPOSED).exclude(proposed_by=user))


def decisions_flagged() -> QuerySet[Decision]:
    """Final decisions that a newer experiment contradicts, most recently flagged first."""
    flagged = Decision.objects.filter(state=Decision.State.FINAL, flagged_at__isnull=False)
    return _with_people(flagged).order_by("-flagged_at")


def decisions_citing(*, experiment_ids: list[int]) -> dict[int, list[Decision]]:
    """The decisions that cite each of these experiments, newest first: one query."""
    cited = defaultdict(list)
    rows = DecisionEvidence.objects.filter(experiment_id__in=experiment_ids).select_related("decision__arm")
    for citation in rows.order_by("-decision__proposed_at"):
        cited[citation.experiment_id].append(citation.decision)
    return cited
