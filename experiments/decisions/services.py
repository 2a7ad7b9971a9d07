"""Everything that writes a deployment decision, and the rule that flags a final decision
that a newer experiment contradicts.

A decision is proposed by one user and becomes final when another approves the version
they read; its author may edit or withdraw it until then. Each change is a DecisionEvent
(who, when, what: every changed field before and after). A final decision is never
edited: the next final decision for its service supersedes it.

A decision belongs to the team of the experiments it cites: its author must be in that team,
and every cited experiment must belong to it (a decision citing no experiment goes to the
author's only team).

Contradiction. A newer experiment of the decision's team is on "the same service and
configuration" as a final decision when it ran the decision's target model on the same
worker queue (the service's hardware pool), with the same workload (kind and prompt set)
and the same sampling regime (greedy or sampled), and has an arm with the decision's
--speculative-config exactly; it is newer when it finished after every experiment the
decision cites. vLLM version, host, levels and blocks may differ: a new runtime saying
otherwise is what a review must see. Another team's experiments never flag it: its members
could not open them. Its verdicts on the decision's metric contradict
- "deploy up to N" when the arm is called slower at any level up to N;
- "do not deploy" when the arm is called faster at every level it measured (up to N, if
  the decision names one): it now pays wherever the service runs;
- "needs more data" never: it takes no direction.
"""

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from experiments import teams
from experiments.analysis.verdict_grid import GridCell
from experiments.measurement.stats import verdicts
from experiments.models import (
    Arm,
    Decision,
    DecisionEvent,
    DecisionEvidence,
    Experiment,
    IllegalTransition,
    SpeedupEstimate,
)


@dataclass(frozen=True)
class DecisionSpec:
    """What a proposal or an edit says."""

    service: str
    kind: str
    arm: Arm | None
    max_concurrency: int | None
    metric: str
    rationale: str
    evidence: list[Experiment]


# ---------------------------------------------------------------- the record and its events


def _arm_label(arm: Arm | None) -> str | None:
    return f"#{arm.experiment_id} {arm.label}" if arm else None


def _describe(decision: Decision) -> dict[str, Any]:
    """The decision's content as its events record it."""
    cited = decision.citations.select_related("experiment").order_by("experiment_id")
    return {
        "service": decision.service,
        "kind": decision.kind,
        "arm": _arm_label(decision.arm),
        "speculative_config": decision.speculative_config,
        "max_concurrency": decision.max_concurrency,
        "metric": decision.metric,
        "rationale": decision.rationale,
        "evidence": [f"#{c.experiment_id} {c.experiment.name}" for c in cited],
    }


def _event(decision: Decision, by, action: str, *, changes: dict | None = None, note: str = "") -> None:
    DecisionEvent.objects.create(
        decision=decision, actor=by, action=action, version=decision.version, changes=changes or {}, note=note
    )


def evidence_verdicts(experiment: Experiment, *, config: dict | None, metric: str) -> list[dict]:
    """The experiment's stored verdicts on `metric` for its arms with `config` (for every
    speculative arm when it has none such): what a citation keeps."""
    arms = [arm for arm in experiment.arms.order_by("position") if arm.is_speculative]
    matching = [arm for arm in arms if arm.speculative_config() == config]
    estimates = SpeedupEstimate.objects.filter(arm__in=matching or arms, metric=metric).select_related("arm")
    return [
        {
            "arm_id": e.arm_id,
            "arm": e.arm.label,
            "level": e.concurrency,
            "outcome": e.outcome,
            "figure": GridCell(e.concurrency, e).figure,
        }
        for e in estimates.order_by("arm__position", "concurrency")
    ]


def _cite(decision: Decision, experiments: list[Experiment]) -> dict[str, list]:
    """Make the decision cite exactly these experiments; returns what uncited ones said."""
    wanted = {experiment.id for experiment in experiments}
    dropped = decision.citations.exclude(experiment_id__in=wanted).select_related("experiment")
    uncited = {f"#{c.experiment_id} {c.experiment.name}": c.verdicts for c in dropped}
    dropped.delete()
    kept = set(decision.citations.values_list("experiment_id", flat=True))
    DecisionEvidence.objects.bulk_create(
        DecisionEvidence(
            decision=decision,
            experiment=experiment,
            verdicts=evidence_verdicts(experiment, config=decision.speculative_config, metric=decision.metric),
        )
        for experiment in experiments
        if experiment.id not in kept
    )
    return uncited


def _apply(decision: Decision, spec: DecisionSpec) -> None:
    decision.service = spec.service
    decision.kind = spec.kind
    decision.arm = spec.arm
    decision.speculative_config = spec.arm.speculative_config() if spec.arm else None
    decision.max_concurrency = spec.max_concurrency
    decision.metric = spec.metric
    decision.rationale = spec.rationale


# ---------------------------------------------------------------- checks


def _lock(decision: Decision) -> Decision:
    return Decision.objects.select_for_update(of=("self",)).select_related("arm", "team").get(pk=decision.pk)


def _check_open(decision: Decision) -> None:
    if decision.state != Decision.State.PROPOSED:
        raise IllegalTransition(
            f"Decision #{decision.pk} is {decision.get_state_display().lower()}: it cannot change any more"
            + (" (a newer decision can supersede it)." if decision.state == Decision.State.FINAL else ".")
        )


def _check_version(decision: Decision, version: int) -> None:
    if decision.version != version:
        raise IllegalTransition(
            f"Decision #{decision.pk} was edited since you opened it (now version {decision.version}); read it again."
        )


def _check_author(decision: Decision, by) -> None:
    if decision.proposed_by_id != by.id:
        raise PermissionDenied("Only the author of a proposal may edit or withdraw it.")


def _team(by, evidence: list[Experiment], team=None):
    """The team a decision citing `evidence` belongs to (see the module's docstring)."""
    cited = {experiment.team_id for experiment in evidence}
    if len(cited) > 1:
        raise teams.TeamRefused("A decision cites experiments of one team only.")
    if team is not None and cited and cited != {team.pk}:
        raise teams.TeamRefused(f"A decision of the team “{team.name}” cites its experiments only.")
    return teams.team_for_write(by, team or (evidence[0].team if evidence else None))


def _check_reviewer(decision: Decision, by) -> None:
    """Someone of the decision's team other than its author."""
    if decision.proposed_by_id == by.id:
        raise PermissionDenied("A proposal needs a second person: its author cannot approve or reject it.")
    teams.team_for_write(by, decision.team)


# ---------------------------------------------------------------- services


@transaction.atomic
def decision_propose(*, by, spec: DecisionSpec) -> Decision:
    decision = Decision(proposed_by=by, team=_team(by, spec.evidence))
    _apply(decision, spec)
    decision.save()
    _cite(decision, spec.evidence)
    _event(decision, by, DecisionEvent.Action.PROPOSED, changes={k: [None, v] for k, v in _describe(decision).items()})
    return decision


@transaction.atomic
def decision_edit(*, decision: Decision, by, version: int, spec: DecisionSpec) -> bool:
    """Change a proposal: its author only, while proposed, from the version they read.
    Returns False when nothing changed (then nothing is written)."""
    locked = _lock(decision)
    _check_author(locked, by)
    _check_open(locked)
    _check_version(locked, version)
    _team(by, spec.evidence, locked.team)
    before = _describe(locked)
    _apply(locked, spec)
    uncited = _cite(locked, spec.evidence)
    after = _describe(locked)
    changes = {name: [before[name], after[name]] for name in before if before[name] != after[name]}
    if not changes:
        return False
    if uncited:
        changes["verdicts of uncited evidence"] = [uncited, None]
    locked.version += 1
    locked.save()
    _event(locked, by, DecisionEvent.Action.EDITED, changes=changes)
    return True


@transaction.atomic
def decision_approve(*, decision: Decision, by, version: int) -> Decision:
    """Make the proposal final: another user than its author, on the version they read.
    The service's current final decision, if any, is superseded by it."""
    locked = _lock(decision)
    _check_reviewer(locked, by)
    _check_open(locked)
    _check_version(locked, version)
    finals = Decision.objects.select_for_update().filter(team=locked.team_id, service=locked.service)
    current = finals.filter(state=Decision.State.FINAL).first()
    if current is not None:
        current.state = Decision.State.SUPERSEDED
        current.save(update_fields=["state"])
        _event(current, by, DecisionEvent.Action.SUPERSEDED, changes={"state": ["final", "superseded"]},
               note=f"Superseded by decision #{locked.pk}.")  # fmt: skip
    locked.state, locked.supersedes = Decision.State.FINAL, current
    locked.decided_by, locked.decided_at = by, timezone.now()
    locked.save()
    _event(locked, by, DecisionEvent.Action.APPROVED, changes={"state": ["proposed", "final"]})
    decision_check_contradictions(decision=locked)
    return locked


@transaction.atomic
def decision_reject(*, decision: Decision, by, note: str) -> None:
    locked = _lock(decision)
    _check_reviewer(locked, by)
    _check_open(locked)
    locked.state, locked.decided_by, locked.decided_at = Decision.State.REJECTED, by, timezone.now()
    locked.save()
    _event(locked, by, DecisionEvent.Action.REJECTED, changes={"state": ["proposed", "rejected"]}, note=note)


@transaction.atomic
def decision_withdraw(*, decision: Decision, by, note: str = "") -> None:
    locked = _lock(decision)
    _check_author(locked, by)
    _check_open(locked)
    locked.state = Decision.State.WITHDRAWN
    locked.save()
    _event(locked, by, DecisionEvent.Action.WITHDRAWN, changes={"state": ["proposed", "withdrawn"]}, note=note)


@transaction.atomic
def decision_dismiss_flag(*, decision: Decision, by, note: str) -> None:
    """Keep a flagged final decision after review; the note says why."""
    locked = _lock(decision)
    teams.team_for_write(by, locked.team)
    if not locked.is_flagged:
        raise IllegalTransition(f"Decision #{locked.pk} is not flagged for review.")
    changes = {"flag": [locked.flag_reason, None]}
    locked.flagged_at, locked.flag_reason, locked.flag_experiment = None, "", None
    locked.save()
    _event(locked, by, DecisionEvent.Action.FLAG_DISMISSED, changes=changes, note=note)


# ---------------------------------------------------------------- contradictions


def contradiction(*, kind: str, max_concurrency: int | None, outcomes: dict[int, str]) -> str:
    """Why these verdicts (level → outcome) contradict a decision of this kind; "" if they do not."""
    in_range = {level: o for level, o in outcomes.items() if max_concurrency is None or level <= max_concurrency}
    if kind == Decision.Kind.DEPLOY:
        slower = sorted(level for level, outcome in in_range.items() if outcome == verdicts.SLOWER)
        return f"called slower at concurrency {', '.join(map(str, slower))}" if slower else ""
    if kind == Decision.Kind.DO_NOT_DEPLOY and in_range and set(in_range.values()) == {verdicts.FASTER}:
        return f"called faster at every level measured ({', '.join(map(str, sorted(in_range)))})"
    return ""


def _same_service(decided: Arm, experiment: Experiment) -> bool:
    base = decided.experiment
    return (
        experiment.target_model == base.target_model
        and experiment.worker_queue == base.worker_queue
        and experiment.workload_kind == base.workload_kind
        and experiment.prompt_set == base.prompt_set
        and experiment.is_greedy == base.is_greedy
    )


def _contradicting(decision: Decision, experiment: Experiment) -> str:
    """Why the experiment contradicts the decision (see the module's docstring), or ""."""
    if decision.arm is None or not _same_service(decision.arm, experiment):
        return ""
    arms = [
        a for a in experiment.arms.all() if a.is_speculative and a.speculative_config() == decision.speculative_config
    ]
    for arm in arms:
        estimates = SpeedupEstimate.objects.filter(arm=arm, metric=decision.metric)
        why = contradiction(
            kind=decision.kind,
            max_concurrency=decision.max_concurrency,
            outcomes={e.concurrency: e.outcome for e in estimates},
        )
        if why:
            label = SpeedupEstimate.Metric(decision.metric).label
            return f"Experiment #{experiment.pk} ({experiment.name}): {arm.label} {why} on {label}."
    return ""


def _flag(decision: Decision, experiment: Experiment, reason: str) -> None:
    decision.flagged_at, decision.flag_reason, decision.flag_experiment = timezone.now(), reason, experiment
    decision.save(update_fields=["flagged_at", "flag_reason", "flag_experiment"])
    _event(decision, None, DecisionEvent.Action.FLAGGED, changes={"flag": [None, reason]})


def _newest_evidence(decision: Decision):
    return decision.evidence.aggregate(newest=Max("finished_at"))["newest"]


def decisions_flag_contradicted(*, experiment: Experiment) -> list[Decision]:
    """Flag the final, unflagged decisions this newly finished experiment contradicts."""
    candidates = Decision.objects.filter(
        team=experiment.team_id,
        state=Decision.State.FINAL,
        flagged_at__isnull=True,
        arm__experiment__target_model=experiment.target_model,
        arm__experiment__worker_queue=experiment.worker_queue,
    ).exclude(evidence=experiment)
    flagged = []
    for decision in candidates.select_related("arm__experiment"):
        newest = _newest_evidence(decision)
        reason = _contradicting(decision, experiment) if newest and experiment.finished_at > newest else ""
        if reason:
            _flag(decision, experiment, reason)
            flagged.append(decision)
    return flagged


def decision_check_contradictions(*, decision: Decision) -> bool:
    """At approval: flag the decision if an experiment finished after its evidence already
    contradicts it. True when flagged."""
    newest = _newest_evidence(decision)
    if decision.arm is None or newest is None:
        return False
    base = decision.arm.experiment
    newer = (
        Experiment.objects.filter(
            team=decision.team_id,
            status=Experiment.Status.FINISHED,
            target_model=base.target_model,
            worker_queue=base.worker_queue,
            finished_at__gt=newest,
        )
        .exclude(decisions=decision)
        .order_by("finished_at")
    )
    for experiment in newer:
        reason = _contradicting(decision, experiment)
        if reason:
            _flag(decision, experiment, reason)
            return True
    return False
