"""A deploy decision's guardrails from its evidence's stored rows: the file downloaded from the
decision page, its thresholds computed here from the recorded requests, and who may download it."""

from collections import defaultdict

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from experiments.analysis.breakdowns import categories_by_prompt
from experiments.decisions import services as decisions
from experiments.decisions.services import DecisionSpec
from experiments.measurement.deploy import alert_rules
from experiments.models import Decision, RunSummary
from experiments.prompt_sets.services import prompt_set_upload
from experiments.prompts.uploads import prompt_file_read
from tests.factories import seed_finished_experiment
from tests.teams.helpers import client_of, member

pytestmark = pytest.mark.django_db

PROMPTS = "\n".join(f'{{"prompt": "prompt {i}", "category": "{("code", "prose")[i % 2]}"}}' for i in range(24))


@pytest.fixture
def by_category(user):
    """The seeded arms on a set of code and prose prompts, as the user's team's evidence."""
    parsed = prompt_file_read("traffic.jsonl", PROMPTS.encode())
    prompt_set = prompt_set_upload(
        owner=user, name="traffic", file_name="traffic.jsonl", size_bytes=len(PROMPTS), parsed=parsed
    )
    return seed_finished_experiment(
        owner=user, workload_kind="uploaded", uploaded_prompt_set=prompt_set, prompt_set="traffic v1"
    )


def _decision(author, evidence, label="draft k=3", **changes) -> Decision:
    spec = {
        "service": "chat", "kind": Decision.Kind.DEPLOY, "arm": evidence.arms.get(label=label), "max_concurrency": 4,
        "metric": "server_tpot", "rationale": "Faster at 1.", "evidence": [evidence],
    } | changes  # fmt: skip
    return decisions.decision_propose(by=author, spec=DecisionSpec(**spec))


def _download(client, decision):
    return client.get(reverse("experiments:decision_guardrails", args=[decision.pk]))


def _lowest_rate_by_block_and_category(evidence, label: str) -> float:
    """The lowest accepted / proposed draft tokens of any (block, category), from the rows."""
    tokens: defaultdict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    categories = categories_by_prompt(evidence)
    for run in evidence.runs.filter(arm__label=label):
        for request in run.requests.all():
            cell = tokens[run.repetition, categories[request.prompt_index]]
            cell[0] += sum(request.spec_accepted_per_step)
            cell[1] += sum(request.spec_proposed_per_step)
    return min(accepted / proposed for accepted, proposed in tokens.values())


def test_the_decision_page_links_the_rules_and_the_file_carries_the_evidence(user, by_category):
    decision = _decision(user, by_category)
    client = client_of(user)

    page = client.get(reverse("experiments:decision", args=[decision.pk])).content.decode()
    response = _download(client, decision)

    assert reverse("experiments:decision_guardrails", args=[decision.pk]) in page
    assert response["Content-Type"] == "application/yaml; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="decision-{decision.pk}-guardrails.yaml"'
    rules = {rule.alert: rule for rule in alert_rules.read_rules(response.content.decode())}
    acceptance = rules["SpeculativeAcceptanceLow"]
    lowest = _lowest_rate_by_block_and_category(by_category, "draft k=3")
    assert lowest - 0.001 < acceptance.condition.threshold <= lowest
    assert acceptance.annotations["measured"].startswith("code: ")
    assert acceptance.annotations["source"] == (
        f"experiment #{by_category.pk}, arm “draft k=3”, blocks 1, 2, 3 at concurrency 1, 4"
    )
    assert [f"SpeculativeAcceptanceLowAtPosition{i}" in rules for i in range(3)] == [True] * 3
    assert rules["SpeculativeConcurrencyAboveDecision"].condition.threshold == 4


def test_without_categories_the_blocks_come_from_vllms_counters(user):
    evidence = seed_finished_experiment(owner=user)
    decision = _decision(user, evidence, label="n-gram k=4", max_concurrency=1)

    rules = {rule.alert: rule for rule in alert_rules.read_rules(_download(client_of(user), decision).content.decode())}

    # Concurrency 1 only: the decision covers no more.
    summaries = RunSummary.objects.filter(run__arm__label="n-gram k=4", run__concurrency=1)
    lowest = min(s.spec_num_accepted_tokens / s.spec_num_draft_tokens for s in summaries)
    acceptance = rules["SpeculativeAcceptanceLow"]
    assert lowest - 0.001 < acceptance.condition.threshold <= lowest
    assert acceptance.annotations["measured"].startswith("all prompts: ")
    assert acceptance.annotations["source"].endswith("blocks 1, 2, 3 at concurrency 1")
    assert rules["SpeculativeConcurrencyAboveDecision"].condition.threshold == 1


def test_a_decision_without_a_speculative_arm_has_no_rules_and_says_why(user, by_category):
    decision = _decision(user, by_category, kind=Decision.Kind.NEEDS_MORE_DATA, arm=None, max_concurrency=None)
    client = client_of(user)

    page = client.get(reverse("experiments:decision", args=[decision.pk])).content.decode()
    response = _download(client, decision)

    assert "guardrails.yaml" not in page
    assert response.status_code == 404
    assert "this decision deploys none, so it has no rules" in response.content.decode()


def test_the_rules_need_a_login_and_another_teams_decision_is_a_404(user, by_category):
    decision = _decision(user, by_category)
    outsider = member("bob", Group.objects.create(name="blue"))

    logged_out = _download(Client(), decision)
    other_team = _download(client_of(outsider), decision)

    assert logged_out.status_code == 302
    assert logged_out.url.startswith(reverse("login"))
    assert other_team.status_code == 404
    assert b"chat" not in other_team.content


@pytest.mark.parametrize(("level", "threshold"), [(13.52, 13.6), (None, 11.4)])  # sqrt(8 · 16) = 11.31
def test_a_break_even_search_s_bracket_becomes_the_break_even_rule(user, level, threshold):
    evidence = seed_finished_experiment(owner=user)
    arm = evidence.arms.get(label="n-gram k=4")
    analysis = evidence.analysis
    bracket = {"state": "bracketed", "level": level, "lo": 8, "hi": 16}
    analysis.verdicts = [
        row | {"break_even": bracket} if row["arm_id"] == arm.id and row["metric"] == "server_tpot" else row
        for row in analysis.verdicts
    ]
    analysis.save()
    decision = _decision(user, evidence, label="n-gram k=4", max_concurrency=4)

    rules = {rule.alert: rule for rule in alert_rules.read_rules(_download(client_of(user), decision).content.decode())}

    assert rules["SpeculativeConcurrencyAboveBreakEven"].condition.threshold == threshold
    assert "between 8.0 and 16.0" in rules["SpeculativeConcurrencyAboveBreakEven"].annotations["source"]
