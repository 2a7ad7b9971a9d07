"""What the decision pages read: the current decision of every service with its history,
one decision with its evidence and events, and who is waiting for whom. Each reads the
decisions of the user's teams only (experiments/teams.py)."""

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Prefetch, QuerySet

from experiments import teams
from experiments.models import Decision, DecisionEvent, DecisionEvidence


@dataclass(frozen=True)
class ServiceDecisions:
    """A team's service: its final decision (if any), the proposals open for it, and the rest,
    newest first."""

    team: str
    service: str
    current: Decision | None
    proposals: list[Decision]
    history: list[Decision]


def _with_people(decisions: QuerySet[Decision]) -> QuerySet[Decision]:
    return decisions.select_related("arm", "proposed_by", "decided_by", "flag_experiment", "supersedes", "team")


def decisions_by_service(*, user) -> list[ServiceDecisions]:
    """Every service that has a decision the user may see, by name then team: two queries."""
    citations = Prefetch("citations", queryset=DecisionEvidence.objects.select_related("experiment"))
    decisions = _with_people(Decision.objects.visible_to(user).prefetch_related(citations))
    grouped = defaultdict(list)
    for decision in decisions.order_by("-proposed_at", "-id"):
        grouped[decision.service, decision.team.name].append(decision)
    return [
        ServiceDecisions(
            team=team,
            service=service,
            current=next((d for d in decisions if d.state == Decision.State.FINAL), None),
            proposals=[d for d in decisions if d.is_open],
            history=[d for d in decisions if d.state not in (Decision.State.FINAL, Decision.State.PROPOSED)],
        )
        for (service, team), decisions in sorted(grouped.items())
    ]


def decision_with_record(*, pk: int, user) -> Decision:
    """One decision the user may see, with its citations (and their experiments) and its
    events (and who); Decision.DoesNotExist for another team's."""
    citations = Prefetch("citations", queryset=DecisionEvidence.objects.select_related("experiment__owner"))
    events = Prefetch("events", queryset=DecisionEvent.objects.select_related("actor"))
    return _with_people(Decision.objects.visible_to(user).prefetch_related(citations, events)).get(pk=pk)


def _of_my_teams(user) -> QuerySet[Decision]:
    """Decisions of the teams `user` is in: the ones they may review (experiments.decisions.services
    lets only members approve, reject or dismiss a flag). A superuser sees every team's
    decisions but is asked to act on their own teams' only."""
    return Decision.objects.filter(team__in=teams.teams_of(user).values("pk"))


def decisions_awaiting(*, user) -> QuerySet[Decision]:
    """Proposals of the user's teams someone else wrote, which this user may approve."""
    proposed = _of_my_teams(user).filter(state=Decision.State.PROPOSED)
    return _with_people(proposed.exclude(proposed_by=user))


def decisions_flagged(*, user) -> QuerySet[Decision]:
    """Final decisions of the user's teams that a newer experiment contradicts, most recently
    flagged first."""
    flagged = _of_my_teams(user).filter(state=Decision.State.FINAL, flagged_at__isnull=False)
    return _with_people(flagged).order_by("-flagged_at")


def decisions_citing(*, experiment_ids: list[int]) -> dict[int, list[Decision]]:
    """The decisions that cite each of these experiments, newest first: one query."""
    cited = defaultdict(list)
    rows = DecisionEvidence.objects.filter(experiment_id__in=experiment_ids).select_related("decision__arm")
    for citation in rows.order_by("-decision__proposed_at"):
        cited[citation.experiment_id].append(citation.decision)
    return cited
