"""The history page's notices: the user's experiments that finished or failed since their
last visit, the proposals waiting for their approval, and the final decisions flagged for
review. Records the visit too: a visit is a run of page views less than VISIT_GAP apart."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from experiments.models import Decision, Experiment, HistoryVisit
from experiments.review.selectors import decisions_awaiting, decisions_flagged

VISIT_GAP = timedelta(minutes=30)
SHOWN = 10


def history_visit_record(*, user, now: datetime | None = None) -> datetime | None:
    """Note this view of the history; returns when the previous visit ended (None on the
    first). Views within VISIT_GAP of each other are one visit and keep its start's notices."""
    now = now or timezone.now()
    visit, created = HistoryVisit.objects.get_or_create(user=user, defaults={"seen_at": now})
    if created:
        return None
    if now - visit.seen_at > VISIT_GAP:
        visit.previous_seen_at = visit.seen_at
    visit.seen_at = now
    visit.save(update_fields=["seen_at", "previous_seen_at"])
    return visit.previous_seen_at


@dataclass(frozen=True)
class Notices:
    since: datetime | None
    ended: list[Experiment]
    awaiting: list[Decision]
    flagged: list[Decision]

    def __bool__(self) -> bool:
        return bool(self.ended or self.awaiting or self.flagged)


def notices_for(*, user, since: datetime | None) -> Notices:
    """Three queries; at most SHOWN of each."""
    ended: list[Experiment] = []
    if since is not None:
        ended = list(
            Experiment.objects.visible_to(user)
            .filter(
                owner=user,
                status__in=(Experiment.Status.FINISHED, Experiment.Status.FAILED),
                finished_at__gt=since,
            )
            .order_by("-finished_at")[:SHOWN]
        )
    return Notices(
        since=since,
        ended=ended,
        awaiting=list(decisions_awaiting(user=user).order_by("proposed_at")[:SHOWN]),
        flagged=list(decisions_flagged(user=user)[:SHOWN]),
    )
