"""The review in the pages: comments shown inert, proposing and approving through the forms
with the permission rules, the decisions page, the history filtered by decision, and the
records in the admin, read-only."""

import pytest
from django.test import Client
from django.urls import reverse

from experiments.decisions import services as decisions
from experiments.decisions.services import DecisionSpec
from experiments.models import Comment, Decision, Experiment
from tests.factories import PASSWORD, ExperimentFactory, UserFactory, seed_finished_experiment

pytestmark = pytest.mark.django_db


@pytest.fixture
def bob_client():
    client = Client()
    client.force_login(UserFactory(username="bob"))
    return client


@pytest.fixture
def evidence():
    return seed_finished_experiment(name="chat on 0.32")


def _proposal(evidence, author, **changes) -> Decision:
    spec = {
        "service": "chat",
        "kind": Decision.Kind.DEPLOY,
        "arm": evidence.arms.get(label="n-gram k=4"),
        "max_concurrency": 4,
        "metric": "tpot",
        "rationale": "Faster at both levels.",
        "evidence": [evidence],
    }
    return decisions.decision_propose(by=author, spec=DecisionSpec(**spec | changes))


def _form(base, **changes) -> dict:
    """What the proposal form posts: deploy `base`'s n-gram arm, citing `base`."""
    return {
        "service": "Chat",
        "kind": "deploy",
        "evidence": [base.pk],
        "arm": base.arms.get(label="n-gram k=4").pk,
        "max_concurrency": "4",
        "metric": "tpot",
        "rationale": f"n-gram k=4 is faster at 1 and 4 in #{base.pk}.",
    } | changes


# ---------------------------------------------------------------- comments


def test_a_comment_is_kept_as_plain_text_with_experiment_links(logged_in_client, evidence):
    url = reverse("experiments:comment", args=[evidence.pk])

    response = logged_in_client.post(url, {"body": f"<script>alert(1)</script> <b>see</b> #{evidence.pk}"})

    assert response.status_code == 302
    assert response.url.endswith("#comments")
    page = logged_in_client.get(reverse("experiments:detail", args=[evidence.pk])).text
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &lt;b&gt;see&lt;/b&gt;" in page
    assert "<script>alert(1)" not in page
    assert f'<a href="/experiments/{evidence.pk}/">#{evidence.pk}</a>' in page
    assert Comment.objects.get().author.username == "alice"


def test_a_decision_reference_links_to_the_decision(logged_in_client, user, evidence):
    decision = _proposal(evidence, user)
    logged_in_client.post(reverse("experiments:comment", args=[evidence.pk]), {"body": f"Per Decision #{decision.pk}."})

    page = logged_in_client.get(reverse("experiments:detail", args=[evidence.pk])).text

    assert f'<a href="/decisions/{decision.pk}/">Decision #{decision.pk}</a>' in page


def test_an_empty_comment_is_refused_and_nothing_is_stored(logged_in_client, evidence):
    response = logged_in_client.post(reverse("experiments:comment", args=[evidence.pk]), {"body": "   "}, follow=True)

    assert "The comment was not saved" in response.text
    assert not Comment.objects.exists()
    assert logged_in_client.get(reverse("experiments:comment", args=[evidence.pk])).status_code == 405


def test_comments_need_the_csrf_token(user, evidence):
    client = Client(enforce_csrf_checks=True)
    client.login(username=user.username, password=PASSWORD)

    assert client.post(reverse("experiments:comment", args=[evidence.pk]), {"body": "hi"}).status_code == 403
    assert not Comment.objects.exists()


# ---------------------------------------------------------------- proposing


def test_the_proposal_form_offers_the_cited_experiments_and_their_arms(logged_in_client, evidence):
    response = logged_in_client.get(reverse("experiments:decision_new"), {"experiments": evidence.pk})

    form = response.context["form"]
    assert form["evidence"].value() == [evidence.pk]
    assert [label for _, label in form.fields["arm"].choices][1:] == [
        f'#{evidence.pk} n-gram k=4 — --speculative-config \'{{"method": "ngram", "num_speculative_tokens": 4, '
        '"prompt_lookup_max": 4, "prompt_lookup_min": 2}\'',
        f'#{evidence.pk} draft k=3 — --speculative-config \'{{"method": "draft_model", "model": "/models/draft", '
        '"num_speculative_tokens": 3}\'',
    ]


def test_a_proposal_through_the_form(logged_in_client, evidence):
    url = reverse("experiments:decision_new") + f"?experiments={evidence.pk}"

    response = logged_in_client.post(url, _form(evidence))

    decision = Decision.objects.get()
    assert response.url == reverse("experiments:decision", args=[decision.pk])
    assert (decision.service, decision.state, decision.proposed_by.username) == ("chat", "proposed", "alice")
    page = logged_in_client.get(response.url).text
    assert "Deploy n-gram k=4 up to concurrency 4" in page
    assert f'<a href="/experiments/{evidence.pk}/">#{evidence.pk}</a>' in page  # in the rationale
    assert "Waiting for someone else to approve it" in page
    assert 'id="approve"' not in page


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"arm": ""}, "arm", "A deploy decision names the arm to deploy."),
        ({"max_concurrency": ""}, "max_concurrency", "A deploy decision says up to which concurrency."),
        ({"max_concurrency": "16"}, "max_concurrency", "The evidence measured this arm up to concurrency 4"),
        ({"evidence": []}, "evidence", "This field is required."),
        ({"rationale": ""}, "rationale", "This field is required."),
        ({"service": "chat service!"}, "service", "Enter a valid “slug”"),
    ],
)
def test_a_refused_proposal_saves_nothing(logged_in_client, evidence, changes, field, message):
    url = reverse("experiments:decision_new") + f"?experiments={evidence.pk}"

    response = logged_in_client.post(url, _form(evidence, **changes))

    assert response.status_code == 400
    assert any(message in error for error in response.context["form"].errors[field])
    assert not Decision.objects.exists()


def test_evidence_must_be_finished_and_the_arm_cited(logged_in_client, evidence):
    running = ExperimentFactory(status=Experiment.Status.RUNNING)
    other = seed_finished_experiment(name="other", seed=3)
    url = (
        reverse("experiments:decision_new")
        + f"?experiments={evidence.pk}&experiments={running.pk}&experiments={other.pk}"
    )

    unfinished = logged_in_client.post(url, _form(evidence, evidence=[evidence.pk, running.pk]))
    uncited = logged_in_client.post(url, _form(evidence, evidence=[other.pk]))

    assert f"#{running.pk} has no verdicts" in unfinished.context["form"].errors["evidence"][0]
    assert uncited.context["form"].errors["arm"] == [f"The arm comes from #{evidence.pk}, which is not cited."]
    assert not Decision.objects.exists()


# ---------------------------------------------------------------- approving


def test_the_author_is_refused_approval_and_the_second_user_approves(logged_in_client, bob_client, user, evidence):
    decision = _proposal(evidence, user)
    approve = reverse("experiments:decision_act", args=[decision.pk, "approve"])

    assert logged_in_client.post(approve, {"version": 1}).status_code == 403
    decision.refresh_from_db()
    assert decision.state == "proposed"

    page = bob_client.get(reverse("experiments:decision", args=[decision.pk])).text
    assert "Approve version 1" in page
    assert bob_client.post(approve, {"version": 1}).status_code == 302
    decision.refresh_from_db()
    assert (decision.state, decision.decided_by.username) == ("final", "bob")
    final_page = bob_client.get(reverse("experiments:decision", args=[decision.pk])).text
    assert "Final: it can no longer be edited" in final_page


def test_a_stale_approval_is_reported_and_changes_nothing(bob_client, user, evidence):
    decision = _proposal(evidence, user)
    decisions.decision_edit(
        decision=decision,
        by=user,
        version=1,
        spec=DecisionSpec("chat", "deploy", evidence.arms.get(label="n-gram k=4"), 1, "tpot", "Only 1.", [evidence]),
    )

    response = bob_client.post(
        reverse("experiments:decision_act", args=[decision.pk, "approve"]), {"version": 1}, follow=True
    )

    assert "was edited since you opened it" in response.text
    decision.refresh_from_db()
    assert decision.state == "proposed"


def test_a_rejection_needs_a_note(bob_client, user, evidence):
    decision = _proposal(evidence, user)
    reject = reverse("experiments:decision_act", args=[decision.pk, "reject"])

    bob_client.post(reject, {"version": 1, "note": ""})
    decision.refresh_from_db()
    assert decision.state == "proposed"
    bob_client.post(reject, {"version": 1, "note": "Only one host."})
    decision.refresh_from_db()
    assert decision.state == "rejected"


def test_only_the_author_opens_the_edit_page_and_an_edit_is_a_new_version(logged_in_client, bob_client, user, evidence):
    decision = _proposal(evidence, user)
    url = reverse("experiments:decision_edit", args=[decision.pk])

    assert bob_client.get(url).status_code == 403
    assert logged_in_client.get(url).context["form"]["max_concurrency"].value() == 4
    response = logged_in_client.post(url, _form(evidence, max_concurrency="1") | {"version": 1})

    assert response.status_code == 302
    decision.refresh_from_db()
    assert (decision.version, decision.max_concurrency) == (2, 1)
    history = logged_in_client.get(reverse("experiments:decision", args=[decision.pk])).text
    assert "<del>4</del> → <ins>1</ins>" in history


# ---------------------------------------------------------------- decisions page and history


def test_the_decisions_page_lists_each_service_current_pending_and_past(logged_in_client, user, evidence):
    bob = UserFactory(username="bob")
    old = _proposal(evidence, user)
    decisions.decision_approve(decision=old, by=bob, version=1)
    new = _proposal(evidence, bob, max_concurrency=1)
    decisions.decision_approve(decision=new, by=user, version=1)
    pending = _proposal(evidence, user, kind=Decision.Kind.NEEDS_MORE_DATA, max_concurrency=None)
    _proposal(evidence, user, service="code-assist")

    response = logged_in_client.get(reverse("experiments:decisions"))

    chat, code = response.context["services"]
    assert (chat.service, chat.current, chat.proposals, chat.history) == ("chat", new, [pending], [old])
    assert (code.current, len(code.proposals)) == (None, 1)
    assert "Deploy n-gram k=4 up to concurrency 1" in response.text


def test_the_history_filters_by_decision(logged_in_client, user, evidence):
    bob = UserFactory(username="bob")
    decided = evidence
    proposed = seed_finished_experiment(name="proposed", seed=2)
    seed_finished_experiment(name="undecided", seed=3)
    decisions.decision_approve(decision=_proposal(decided, user), by=bob, version=1)
    _proposal(proposed, user, service="code", kind=Decision.Kind.NEEDS_MORE_DATA, max_concurrency=None)
    url = reverse("experiments:list")

    def names(**params):
        return sorted(row.experiment.name for row in logged_in_client.get(url, params).context["rows"])

    assert names(decision="final") == ["chat on 0.32"]
    assert names(decision="proposed") == ["proposed"]
    assert names(decision="cited") == ["chat on 0.32", "proposed"]
    assert names(decision="none") == ["undecided"]
    assert names(decision_kind="deploy") == ["chat on 0.32"]
    assert names(decision="final", decision_kind="needs_more_data") == []
    assert names(decision="flagged") == []
    page = logged_in_client.get(url).text
    assert f"decision #{Decision.objects.get(state='final').pk} · deploy · final" in page
    assert logged_in_client.get(url, {"decision": "maybe"}).status_code == 400


def test_the_experiment_page_lists_the_decisions_citing_it(logged_in_client, user, evidence):
    decision = _proposal(evidence, user)

    page = logged_in_client.get(reverse("experiments:detail", args=[evidence.pk])).text

    assert f'<a href="/decisions/{decision.pk}/">#{decision.pk}</a>' in page
    assert f"/decisions/new/?experiments={evidence.pk}" in page


# ---------------------------------------------------------------- admin


@pytest.mark.parametrize("model", ["decision", "decisionevent", "comment"])
def test_the_admin_shows_review_records_and_never_changes_or_deletes_them(client, user, evidence, model):
    decision = _proposal(evidence, user)
    Comment.objects.create(experiment=evidence, author=user, body="x")
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    obj = {"decision": decision, "decisionevent": decision.events.get(), "comment": Comment.objects.get()}[model]

    assert client.get(reverse(f"admin:experiments_{model}_changelist")).status_code == 200
    assert client.get(reverse(f"admin:experiments_{model}_change", args=[obj.pk])).status_code == 200
    assert client.get(reverse(f"admin:experiments_{model}_add")).status_code == 403
    assert client.post(reverse(f"admin:experiments_{model}_delete", args=[obj.pk]), {"post": "yes"}).status_code == 403
    assert type(obj).objects.filter(pk=obj.pk).exists()


def test_more_evidence_is_added_through_the_url(logged_in_client, user, evidence):
    other = seed_finished_experiment(name="other", seed=4)
    decision = _proposal(evidence, user)

    new = logged_in_client.get(reverse("experiments:decision_new"), {"experiments": [evidence.pk, other.pk]})
    edit = logged_in_client.get(reverse("experiments:decision_edit", args=[decision.pk]), {"experiments": other.pk})

    for response in (new, edit):
        assert [value for value, _ in response.context["form"].fields["evidence"].choices] == [evidence.pk, other.pk]
        assert 'id="add-evidence"' in response.text


@pytest.mark.parametrize(
    ("method", "name", "needs"),
    [
        ("get", "experiments:compare", ()),
        ("get", "experiments:decisions", ()),
        ("get", "experiments:decision_new", ()),
        ("get", "experiments:decision", ("decision",)),
        ("get", "experiments:rerun", ("experiment",)),
        ("get", "experiments:clone", ("experiment",)),
        ("post", "experiments:cancel", ("experiment",)),
        ("post", "experiments:comment", ("experiment",)),
    ],
)
def test_the_review_pages_need_a_login(client, user, evidence, method, name, needs):
    decision = _proposal(evidence, user)
    args = [{"decision": decision.pk, "experiment": evidence.pk}[need] for need in needs]

    response = getattr(client, method)(reverse(name, args=args))

    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


def test_approving_needs_a_login(client, user, evidence):
    decision = _proposal(evidence, user)

    client.post(reverse("experiments:decision_act", args=[decision.pk, "approve"]), {"version": 1})

    decision.refresh_from_db()
    assert decision.state == "proposed"


def test_a_deploy_decision_cannot_rest_on_a_level_where_the_arm_costs_the_service(logged_in_client):
    """The n-gram arm's output throughput halved under the interactive objective: it costs the
    service at 4, so deploying it up to 4 is refused, naming the experiment and the level."""
    from experiments.analysis.services import experiment_analyse
    from experiments.models import RunSummary

    guards = [{"metric": "e2e", "margin": 0.05}, {"metric": "output_throughput", "margin": 0.05}]
    evidence = seed_finished_experiment(name="costs", objective="interactive", guards=guards)
    arm = evidence.arms.get(label="n-gram k=4")
    for summary in RunSummary.objects.filter(run__arm=arm, run__concurrency=4):
        summary.output_throughput *= 0.4
        summary.save(update_fields=["output_throughput"])
    experiment_analyse(experiment=evidence)
    url = reverse("experiments:decision_new") + f"?experiments={evidence.pk}"

    refused = logged_in_client.post(url, _form(evidence))
    allowed = logged_in_client.post(url, _form(evidence, max_concurrency="1"))

    assert refused.status_code == 400
    (error,) = refused.context["form"].errors["max_concurrency"]
    assert f"#{evidence.pk} found this arm costing the service at concurrency 4" in error
    assert allowed.status_code == 302
    assert Decision.objects.get().max_concurrency == 1
