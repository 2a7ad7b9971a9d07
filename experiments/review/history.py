"""The history page: experiments filtered, sorted and paginated, each with its headline (the
best arm and its verdict at every level, in the words of the results page).

A page costs the same few queries whatever its size: the count, the page's ids, their rows,
then their arms, speedups, run counts and citing decisions, each in one query over the ids.
It lists the experiments the viewer may see (experiments/teams.py), and offers as choices
only what those experiments hold and the members of the viewer's teams.
"""

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.paginator import EmptyPage, Page, Paginator
from django.db import connection
from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet
from django.db.models.expressions import OrderBy
from django.utils import timezone

from experiments import teams
from experiments.analysis.verdict_grid import SPEEDUP_METRICS, GridCell, ServiceCell
from experiments.measurement.stats import objective, verdicts
from experiments.models import Arm, Decision, DecisionEvidence, Experiment, Run, SpeedupEstimate
from experiments.review.selectors import decisions_citing

# value: (label, ordering)
SORTS: dict[str, tuple[str, tuple[str | OrderBy, ...]]] = {
    "newest": ("Newest first", ("-created_at", "-id")),
    "oldest": ("Oldest first", ("created_at", "id")),
    "finished": ("Recently finished", (F("finished_at").desc(nulls_last=True), "-id")),
    "name": ("Name", ("name", "id")),
    "model": ("Model", ("target_model", "-created_at", "-id")),
    "status": ("Status", ("status", "-created_at", "-id")),
    "owner": ("Owner", ("owner__username", "-created_at", "-id")),
}
DEFAULT_SORT = "newest"
PAGE_SIZES = (20, 50, 100)
# value: (label, the citing decision's condition); "none" keeps experiments no such decision cites.
DECISION_STATES = {
    "cited": ("cited by a decision", Q()),
    "proposed": ("cited by a proposal", Q(decision__state=Decision.State.PROPOSED)),
    "final": ("cited by a final decision", Q(decision__state=Decision.State.FINAL)),
    "flagged": (
        "cited by a decision flagged for review",
        Q(decision__state=Decision.State.FINAL, decision__flagged_at__isnull=False),
    ),
    "superseded": ("cited by a superseded decision", Q(decision__state=Decision.State.SUPERSEDED)),
    "none": ("cited by no decision", Q()),
}
HEADLINE_METRICS = tuple(str(metric) for metric in SPEEDUP_METRICS)
LISTED_FIELDS = (
    "name", "status", "target_model", "worker_queue", "vllm_versions", "hardware", "concurrency_levels", "created_at",
    "owner__username",
)  # fmt: skip


@dataclass(frozen=True)
class HistoryQuery:
    """What the history is filtered and sorted by; empty values do not filter."""

    text: str = ""
    status: str = ""
    owner_id: int | None = None
    model: str = ""
    method: str = ""
    queue: str = ""
    hardware: str = ""
    vllm_version: str = ""
    since: date | None = None
    until: date | None = None
    decision: str = ""
    decision_kind: str = ""
    sort: str = DEFAULT_SORT


def _start_of(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


def _filters(query: HistoryQuery) -> Q:
    """Every filter as one condition; they combine with AND."""
    conditions = {
        "status": query.status,
        "owner_id": query.owner_id,
        "target_model": query.model,
        "worker_queue": query.queue,
        "hardware__contains": [query.hardware] if query.hardware else None,
        "vllm_versions__contains": [query.vllm_version] if query.vllm_version else None,
        "created_at__gte": _start_of(query.since) if query.since else None,
        "created_at__lt": _start_of(query.until + timedelta(days=1)) if query.until else None,
    }
    q = Q(**{lookup: value for lookup, value in conditions.items() if value})
    if query.text:
        q &= Q(name__icontains=query.text) | Q(target_model__icontains=query.text)
    if query.method:
        q &= Q(Exists(Arm.objects.filter(experiment=OuterRef("pk"), method=query.method)))
    if query.decision or query.decision_kind:
        q &= _decision_filter(query.decision, query.decision_kind)
    return q


def _decision_filter(state: str, kind: str) -> Q:
    """Experiments cited by a decision in this state (and of this kind), or by none."""
    citations = DecisionEvidence.objects.filter(experiment=OuterRef("pk"))
    if kind:
        citations = citations.filter(decision__kind=kind)
    if state == "none":
        return ~Q(Exists(citations))
    return Q(Exists(citations.filter(DECISION_STATES.get(state, ("", Q()))[1])))


def experiment_history(*, query: HistoryQuery, user) -> QuerySet[Experiment]:
    """The experiments `user` may see that match, in the chosen order."""
    ordering = SORTS.get(query.sort, SORTS[DEFAULT_SORT])[1]
    return Experiment.objects.visible_to(user).filter(_filters(query)).order_by(*ordering)


@dataclass(frozen=True)
class FilterChoices:
    """The values the history's select boxes offer: those some visible experiment has, and the
    users who share a team with the viewer."""

    models: list[str]
    queues: list[str]
    hardware: list[str]
    vllm_versions: list[str]
    owners: list[tuple[int, str]]


# Experiment columns the history offers as choices, each with a B-tree index of its own.
CHOICE_COLUMNS = ("target_model", "worker_queue", "hardware", "vllm_versions")


def _distinct_sql(*, by_team: bool) -> str:
    """One statement that lists the distinct values of every CHOICE_COLUMNS column, of the
    experiments whose team is in the parameter's array when `by_team`.

    A plain DISTINCT reads the whole table (tens of milliseconds at 10,000 experiments);
    this walks each column's index from one value to the next ("loose index scan"), so
    its cost grows with the number of distinct values, not of experiments. Scalar values
    come back as one-element arrays."""
    table = Experiment._meta.db_table
    team = f"{Experiment._meta.get_field('team').column} = ANY(%(teams)s)"
    walks, selects = [], []
    for column in CHOICE_COLUMNS:
        where = f"WHERE {team}" if by_team else ""
        walks.append(
            f"{column} AS ((SELECT {column} AS v FROM {table} {where} ORDER BY 1 LIMIT 1) UNION ALL "
            f"SELECT (SELECT {column} FROM {table} WHERE {column} > w.v {'AND ' + team if by_team else ''} "
            f"ORDER BY 1 LIMIT 1) FROM {column} w WHERE w.v IS NOT NULL)"
        )
        value = "v" if Experiment._meta.get_field(column).get_internal_type() == "ArrayField" else "ARRAY[v]"
        selects.append(f"SELECT '{column}', {value}::text[] FROM {column} WHERE v IS NOT NULL")
    return f"WITH RECURSIVE {', '.join(walks)} {' UNION ALL '.join(selects)}"


def filter_choices(*, user) -> FilterChoices:
    values = defaultdict(set)
    users = get_user_model().objects.order_by(get_user_model().USERNAME_FIELD)
    visible = teams.visible_teams(user)
    team_ids = None if visible is None else list(visible.values_list("pk", flat=True))
    with connection.cursor() as cursor:
        cursor.execute(_distinct_sql(by_team=team_ids is not None), None if team_ids is None else {"teams": team_ids})
        for column, found in cursor.fetchall():
            values[column].update(found)
    if team_ids is not None:
        users = users.filter(groups__in=team_ids).distinct()
    return FilterChoices(
        models=sorted(values["target_model"]),
        queues=sorted(values["worker_queue"]),
        hardware=sorted(values["hardware"]),
        vllm_versions=sorted(values["vllm_versions"]),
        owners=list(users.values_list("id", get_user_model().USERNAME_FIELD)),
    )


# ---------------------------------------------------------------- headlines


@dataclass(frozen=True)
class Headline:
    """The best speculative arm of an experiment and its verdict at every level, for one metric."""

    arm_label: str
    cells: list[GridCell]


def _rank(estimates: list[SpeedupEstimate]) -> tuple[int, float]:
    """Primary levels called faster less those called slower, then the geometric mean speedup.
    Only the question's words count: a metric's unadjusted words would pick an arm by chance
    in about one no-effect experiment in eight (docs/verdicts.md)."""
    primary = [e for e in estimates if e.primary]
    pays = sum((e.word == objective.PAYS) if e.word else (e.outcome == verdicts.FASTER) for e in primary)
    calls = pays - sum(e.outcome == verdicts.SLOWER for e in primary)
    points = [e.point for e in estimates if e.point]
    mean_log = sum(math.log(p) for p in points) / len(points) if points else -math.inf
    return calls, mean_log


def headline(*, arms: list[Arm], levels: list[int], estimates: list[SpeedupEstimate]) -> Headline | None:
    """The speculative arm (never the A/A replicate) called faster at the most primary levels,
    net of those called slower, ties broken by its geometric mean speedup; None without estimates."""
    by_arm = defaultdict(list)
    for estimate in estimates:
        by_arm[estimate.arm_id].append(estimate)
    candidates = [arm for arm in arms if arm.is_speculative and by_arm[arm.id]]
    if not candidates:
        return None
    best = max(candidates, key=lambda arm: _rank(by_arm[arm.id]))
    by_level = {e.concurrency: e for e in by_arm[best.id]}
    return Headline(best.label, [ServiceCell(level, by_level.get(level)) for level in sorted(levels)])


@dataclass(frozen=True)
class HistoryRow:
    experiment: Experiment
    arms: list[Arm]
    runs_total: int = 0
    runs_done: int = 0
    headline: Headline | None = None
    decisions: list[Decision] = field(default_factory=list)


def _run_counts(ids: list[int]) -> dict[int, tuple[int, int]]:
    rows = (
        Run.objects.filter(experiment_id__in=ids)
        .values("experiment_id")
        .annotate(total=Count("id"), done=Count("id", filter=~Q(status__in=Run.OPEN_STATUSES)))
    )
    return {row["experiment_id"]: (row["total"], row["done"]) for row in rows}


def history_rows(*, experiments: list[Experiment], metric: str) -> list[HistoryRow]:
    """The page's experiments with their arms, run counts, headline and the decisions citing
    them: four queries."""
    ids = [experiment.id for experiment in experiments]
    arms, estimates = defaultdict(list), defaultdict(list)
    for arm in Arm.objects.filter(experiment_id__in=ids).order_by("experiment_id", "position"):
        arms[arm.experiment_id].append(arm)
    speedups = SpeedupEstimate.objects.filter(experiment_id__in=ids, metric=metric).only(
        "experiment_id", "arm_id", "concurrency", "point", "ci_low", "ci_high", "outcome", "failed_arm",
        "failed_baseline", "primary", "confidence", "word",
    )  # fmt: skip
    for estimate in speedups:
        estimates[estimate.experiment_id].append(estimate)
    counts = _run_counts(ids)
    cited = decisions_citing(experiment_ids=ids)
    return [
        HistoryRow(
            experiment=experiment,
            arms=arms[experiment.id],
            runs_total=counts.get(experiment.id, (0, 0))[0],
            runs_done=counts.get(experiment.id, (0, 0))[1],
            headline=headline(
                arms=arms[experiment.id], levels=experiment.concurrency_levels, estimates=estimates[experiment.id]
            ),
            decisions=cited[experiment.id],
        )
        for experiment in experiments
    ]


class NoSuchPage(ValueError):
    """A page number past the last page."""


def history_page(*, query: HistoryQuery, user, number: int, per_page: int) -> Page[Experiment]:
    """One page of the history `user` sees, its experiments with their owners; NoSuchPage past
    the last one."""
    # A page of ids, whose object_list becomes their experiments below.
    paginator: Paginator[Any] = Paginator(
        experiment_history(query=query, user=user).values_list("id", flat=True), per_page
    )
    try:
        page = paginator.page(number)
    except EmptyPage:
        pages = paginator.num_pages
        raise NoSuchPage(f"There is no page {number}: the list has {pages} page{'s' * (pages != 1)}.") from None
    # The page's ids come first, from the narrow id column (an index-only scan for the
    # indexed orders); then only their rows are read, only what a row shows. A middle page
    # of the sort by name took 17 ms of PostgreSQL at 10,000 experiments read whole, 2 ms so.
    rows = Experiment.objects.select_related("owner").only(*LISTED_FIELDS).in_bulk(list(page.object_list))
    page.object_list = [rows[pk] for pk in page.object_list]
    return page
