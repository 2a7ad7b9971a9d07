"""Decisions: proposed by one user, final when a second approves, every change an event, a
final decision superseded but never edited, and flagged when a newer experiment on the
same service and configuration says the opposite."""

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.utils import timezone

from experiments import lifecycle
from experiments.decisions import services as decisions
from experiments.decisions.services import DecisionSpec, contradiction
from experiments.models import Decision, DecisionEvent, Experiment, IllegalTransition, SpeedupEstimate
from tests.factories import UserFactory, seed_finished_experiment

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice():
    return UserFactory(username="alice")


@pytest.fixture
def bob():
    return UserFactory(username="bob")


def _finished(days_ago: float, **fields) -> Experiment:
    experiment = seed_finished_experiment(**fields)
    Experiment.objects.filter(pk=experiment.pk).update(finished_at=timezone.now() - timedelta(days=days_ago))
    experiment.refresh_from_db()
    return experiment


@pytest.fixture
def evidence():
    return _finished(10, name="chat on 0.32")


def _spec(base, *, kind=Decision.Kind.DEPLOY, arm_label="n-gram k=4", limit=4, **changes) -> DecisionSpec:
    """A decision on `base`'s arm, citing `base` unless `evidence` says otherwise."""
    arm = base.arms.get(label=arm_label) if arm_label else None
    fields = {
        "service": "chat",
        "kind": kind,
        "arm": arm,
        "max_concurrency": limit,
        "metric": "tpot",
        "rationale": f"Faster at 1 and 4 in #{base.pk}.",
        "evidence": [base],
    }
    return DecisionSpec(**fields | changes)


def _actions(decision) -> list[tuple[str, str | None]]:
    return [(e.action, e.actor.username if e.actor else None) for e in decision.events.order_by("id")]


# ---------------------------------------------------------------- proposing, editing, approving


def test_a_proposal_keeps_its_content_and_the_cited_verdicts(alice, evidence):
    decision = decisions.decision_propose(by=alice, spec=_spec(evidence))

    assert (decision.state, decision.version, decision.proposed_by) == ("proposed", 1, alice)
    assert decision.speculative_config == {
        "method": "ngram",
        "num_speculative_tokens": 4,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
    }
    assert decision.headline == "Deploy n-gram k=4 up to concurrency 4"
    citation = decision.citations.get()
    assert [(c["arm"], c["level"], c["outcome"]) for c in citation.verdicts] == [
        ("n-gram k=4", 1, "faster"),
        ("n-gram k=4", 4, "faster"),
    ]
    assert all(c["figure"].endswith("]") for c in citation.verdicts)
    (event,) = decision.events.all()
    assert (event.action, event.actor, event.version) == ("proposed", alice, 1)
    assert event.changes["arm"] == [None, f"#{evidence.pk} n-gram k=4"]
    assert event.changes["evidence"] == [None, [f"#{evidence.pk} chat on 0.32"]]


def test_the_author_cannot_approve_their_own_proposal(alice, evidence):
    decision = decisions.decision_propose(by=alice, spec=_spec(evidence))

    with pytest.raises(PermissionDenied):
        decisions.decision_approve(decision=decision, by=alice, version=1)
    with pytest.raises(PermissionDenied):
        decisions.decision_reject(decision=decision, by=alice, note="no")
    decision.refresh_from_db()
    assert decision.state == "proposed"
    assert _actions(decision) == [("proposed", "alice")]


def test_a_second_user_makes_it_final(alice, bob, evidence):
    decision = decisions.decision_propose(by=alice, spec=_spec(evidence))

    decisions.decision_approve(decision=decision, by=bob, version=1)

    decision.refresh_from_db()
    assert (decision.state, decision.decided_by) == ("final", bob)
    assert decision.decided_at is not None
    assert _actions(decision) == [("proposed", "alice"), ("approved", "bob")]


def test_an_approval_names_the_version_it_read(alice, bob, evidence):
    decision = decisions.decision_propose(by=alice, spec=_spec(evidence))
    decisions.decision_edit(decision=decision, by=alice, version=1, spec=_spec(evidence, limit=1))

    with pytest.raises(IllegalTransition, match="edited since you opened it"):
        decisions.decision_approve(decision=decision, by=bob, version=1)
    decisions.decision_approve(decision=decision, by=bob, version=2)


def test_an_edit_is_recorded_field_by_field(alice, evidence):
    other = _finished(5, name="chat again")
    decision = decisions.decision_propose(by=alice, spec=_spec(evidence))

    changed = decisions.decision_edit(
        decision=decision, by=alice, version=1,
        spec=_spec(evidence, limit=1, rationale="Only at 1.", evidence=[other, evidence]),
    )  # fmt: skip

    assert changed
    decision.refresh_from_db()
    assert (decision.version, decision.max_concurrency) == (2, 1)
    edit = decision.events.get(action="edited")
    assert (edit.actor, edit.version) == (alice, 2)
    assert edit.changes["max_concurrency"] == [4, 1]
    assert edit.changes["rationale"] == [f"Faster at 1 and 4 in #{evidence.pk}.", "Only at 1."]
    assert edit.changes["evidence"] == [
        [f"#{evidence.pk} chat on 0.32"],
        [f"#{evidence.pk} chat on 0.32", f"#{other.pk} chat again"],
    ]
    assert set(edit.changes) == {"max_concurrency", "rationale", "evidence"}


def test_dropping_a_citation_keeps_what_it_said_in_the_event(alice, evidence):
    other = _finished(5, name="chat again")
    decision = decisions.decision_propose(by=alice, spec=_spec(evidence, evidence=[evidence, other]))

    decisions.decision_edit(decision=decision, by=alice, version=1, spec=_spec(evidence))

    kept = decision.events.get(action="edited").changes["verdicts of uncited evidence"][0]
    assert [cell["outcome"] for cell in kept[f"#{other.pk} chat again"]] == ["faster", "faster"]


def test_an_edit_that_changes_nothing_writes_nothing(alice, evidence):
    decision = decisions.decision_propose(by=alice, spec=_spec(evidence))

    assert decisions.decision_edit(decision=decision, by=alice, version=1, spec=_spec(evidence)) is False
    decision.refresh_from_db()
    assert decision.version == 1
    assert _actions(decision) == [("proposed", "alice")]


def test_only_the_author_edits_or_withdraws(alice, bob, evidence):
    decision = decisions.decision_propose(by=alice, spec=_spec(evidence))

    with pytest.raises(PermissionDenied):
        decisions.decision_edit(decision=decision, by=bob, version=1, spec=_spec(evidence, limit=1))
    with pytest.raises(PermissionDenied):
        decisions.decision_withdraw(decision=decision, by=bob)
    decisions.decision_withdraw(decision=decision, by=alice, note="wrong service")
    decision.refresh_from_db()
    assert decision.state == "withdrawn"


def test_a_rejection_is_final_and_says_why(alice, bob, evidence):
    decision = decisions.decision_propose(by=alice, spec=_spec(evidence))

    decisions.decision_reject(decision=decision, by=bob, note="Too few blocks at 4.")

    decision.refresh_from_db()
    assert (decision.state, decision.decided_by) == ("rejected", bob)
    assert decision.events.get(action="rejected").note == "Too few blocks at 4."
    with pytest.raises(IllegalTransition):
        decisions.decision_approve(decision=decision, by=bob, version=1)


def test_a_final_decision_cannot_be_edited_only_superseded(alice, bob, evidence):
    first = decisions.decision_propose(by=alice, spec=_spec(evidence))
    decisions.decision_approve(decision=first, by=bob, version=1)

    with pytest.raises(IllegalTransition, match=r"cannot change any more \(a newer decision can supersede it"):
        decisions.decision_edit(decision=first, by=alice, version=1, spec=_spec(evidence, limit=1))
    with pytest.raises(IllegalTransition):
        decisions.decision_withdraw(decision=first, by=alice)

    second = decisions.decision_propose(by=bob, spec=_spec(evidence, kind=Decision.Kind.NEEDS_MORE_DATA, limit=None))
    first.refresh_from_db()
    assert first.state == "final"  # until the replacement is approved
    decisions.decision_approve(decision=second, by=alice, version=1)

    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.state, second.state, second.supersedes) == ("superseded", "final", first)
    assert _actions(first) == [("proposed", "alice"), ("approved", "bob"), ("superseded", "alice")]
    assert first.events.get(action="superseded").note == f"Superseded by decision #{second.pk}."


def test_the_database_holds_one_final_decision_per_service(alice, evidence):
    decisions.decision_propose(by=alice, spec=_spec(evidence))
    Decision.objects.update(state="final")
    duplicate = decisions.decision_propose(by=alice, spec=_spec(evidence))

    with pytest.raises(IntegrityError), transaction.atomic():
        Decision.objects.filter(pk=duplicate.pk).update(state="final")


def test_decisions_in_other_services_do_not_supersede_each_other(alice, bob, evidence):
    chat = decisions.decision_propose(by=alice, spec=_spec(evidence))
    code = decisions.decision_propose(by=alice, spec=_spec(evidence, service="code-assist"))
    decisions.decision_approve(decision=chat, by=bob, version=1)
    decisions.decision_approve(decision=code, by=bob, version=1)

    assert set(Decision.objects.values_list("service", "state")) == {("chat", "final"), ("code-assist", "final")}


# ---------------------------------------------------------------- contradictions


@pytest.mark.parametrize(
    ("kind", "limit", "outcomes", "expected"),
    [
        ("deploy", 8, {1: "faster", 8: "slower"}, "called slower at concurrency 8"),
        ("deploy", 4, {1: "faster", 8: "slower"}, ""),  # slower only beyond the decided range
        ("deploy", 8, {1: "faster", 8: "inconclusive"}, ""),
        ("deploy", 8, {1: "equivalent", 8: "too few blocks"}, ""),
        ("do_not_deploy", None, {1: "faster", 8: "faster"}, "called faster at every level measured (1, 8)"),
        ("do_not_deploy", None, {1: "faster", 8: "equivalent"}, ""),
        ("do_not_deploy", 4, {1: "faster", 8: "slower"}, "called faster at every level measured (1)"),
        ("needs_more_data", None, {1: "slower", 8: "slower"}, ""),
        ("deploy", 8, {}, ""),
    ],
)
def test_which_verdicts_contradict_which_decision(kind, limit, outcomes, expected):
    assert contradiction(kind=kind, max_concurrency=limit, outcomes=outcomes) == expected


def _final(alice, bob, evidence, **spec) -> Decision:
    decision = decisions.decision_propose(by=alice, spec=_spec(evidence, **spec))
    return decisions.decision_approve(decision=decision, by=bob, version=1)


def _call(experiment, label, level, outcome):
    SpeedupEstimate.objects.filter(
        arm__experiment=experiment, arm__label=label, concurrency=level, metric="tpot"
    ).update(outcome=outcome)


def test_a_newer_experiment_calling_the_deployed_arm_slower_flags_the_decision(alice, bob, evidence):
    decision = _final(alice, bob, evidence)
    newer = _finished(1, name="chat on 0.33")
    _call(newer, "n-gram k=4", 4, "slower")

    flagged = decisions.decisions_flag_contradicted(experiment=newer)

    decision.refresh_from_db()
    assert flagged == [decision]
    assert decision.is_flagged
    assert decision.flag_experiment == newer
    assert (
        decision.flag_reason
        == f"Experiment #{newer.pk} (chat on 0.33): n-gram k=4 called slower at concurrency 4 on TPOT."
    )
    assert _actions(decision)[-1] == ("flagged", None)


@pytest.mark.parametrize(
    "difference",
    [
        {"worker_queue": "h100"},
        {"prompt_set": "code_edit"},
        {"target_model": "/models/other"},
        {"temperature": 0.7},
    ],
)
def test_an_experiment_on_another_service_or_configuration_does_not_flag(alice, bob, evidence, difference):
    decision = _final(alice, bob, evidence)
    other = _finished(1, name="elsewhere", **difference)
    _call(other, "n-gram k=4", 4, "slower")

    assert decisions.decisions_flag_contradicted(experiment=other) == []
    decision.refresh_from_db()
    assert not decision.is_flagged


def test_another_k_or_an_older_experiment_does_not_flag(alice, bob, evidence):
    decision = _final(alice, bob, evidence)
    older = _finished(20, name="before the evidence")
    _call(older, "n-gram k=4", 4, "slower")
    other_k = _finished(1, name="k=3")
    other_k.arms.filter(label="n-gram k=4").update(num_speculative_tokens=3)
    _call(other_k, "n-gram k=4", 4, "slower")

    assert decisions.decisions_flag_contradicted(experiment=older) == []
    assert decisions.decisions_flag_contradicted(experiment=other_k) == []
    decision.refresh_from_db()
    assert not decision.is_flagged


def test_finishing_an_experiment_runs_the_check(alice, bob, evidence):
    """A final "do not deploy n-gram" meets a newer experiment, finished by the service and
    analysed for real, in which n-gram is faster at every level."""
    decision = _final(alice, bob, evidence, kind=Decision.Kind.DO_NOT_DEPLOY, limit=None)
    newer = seed_finished_experiment(name="newer", seed=5)
    Experiment.objects.filter(pk=newer.pk).update(status=Experiment.Status.RUNNING)
    newer.refresh_from_db()

    lifecycle.experiment_finish(experiment=newer)

    decision.refresh_from_db()
    assert decision.is_flagged
    assert "n-gram k=4 called faster at every level measured (1, 4)" in decision.flag_reason


def test_an_approval_flags_at_once_when_a_newer_experiment_already_contradicts(alice, bob, evidence):
    newer = _finished(1, name="already newer")
    _call(newer, "n-gram k=4", 1, "slower")

    decision = _final(alice, bob, evidence)

    decision.refresh_from_db()
    assert decision.is_flagged
    assert decision.flag_experiment == newer


def test_a_flag_is_dismissed_with_a_reason(alice, bob, evidence):
    decision = _final(alice, bob, evidence)
    newer = _finished(1, name="newer")
    _call(newer, "n-gram k=4", 4, "slower")
    decisions.decisions_flag_contradicted(experiment=newer)

    decisions.decision_dismiss_flag(decision=decision, by=alice, note="That host was overloaded.")

    decision.refresh_from_db()
    assert not decision.is_flagged
    dismissed = decision.events.get(action=DecisionEvent.Action.FLAG_DISMISSED)
    assert (dismissed.actor, dismissed.note) == (alice, "That host was overloaded.")
    assert dismissed.changes["flag"][0].startswith(f"Experiment #{newer.pk}")
    with pytest.raises(IllegalTransition):
        decisions.decision_dismiss_flag(decision=decision, by=alice, note="again")
