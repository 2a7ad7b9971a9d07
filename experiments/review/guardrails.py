"""What a deploy decision's guardrails are built from, read from its evidence: the blocks of
every cited experiment's arm with the decided --speculative-config (runs at the levels up to
the decision's concurrency), counted per prompt category from the requests' per-step counts
where the prompt set has categories, else from the runs' vLLM counters; and the break-even
concurrency each experiment's stored analysis found for the decision's metric.
experiments/measurement/deploy/guardrails.py turns them into the rules file."""

import math
from collections import defaultdict

from experiments.analysis import breakdowns, search
from experiments.measurement.deploy import guardrails
from experiments.measurement.deploy.guardrails import BreakEven, Counts, Deployment, Measured
from experiments.measurement.stats import break_even
from experiments.models import Arm, Decision, ExperimentAnalysis, RequestRecord, RunSummary


class NoGuardrails(Exception):
    """A decision that deploys no speculative arm: nothing to guard."""


def has_guardrails(decision: Decision) -> bool:
    """Whether the decision deploys a speculative arm, which is what the guardrails watch."""
    arm = decision.arm
    return decision.kind == Decision.Kind.DEPLOY and arm is not None and arm.is_speculative


def _deployment(decision: Decision) -> Deployment:
    if not has_guardrails(decision):
        raise NoGuardrails(
            "Guardrails watch a deployed speculative arm: this decision deploys none, so it has no rules."
        )
    arm = decision.arm
    assert arm is not None, "has_guardrails checked it"
    return Deployment(
        decision=decision.pk,
        service=decision.service,
        arm=arm.label,
        positions=arm.num_speculative_tokens or 0,
        max_concurrency=decision.max_concurrency or 0,
        metric=decision.get_metric_display(),
    )


def _evidence_arms(decision: Decision) -> list[Arm]:
    """The cited experiments' arms that ran the decided --speculative-config."""
    assert decision.arm is not None, "has_guardrails checked it"
    config = decision.arm.speculative_config()
    arms = Arm.objects.filter(experiment__citations__decision=decision).select_related("experiment")
    return [arm for arm in arms.order_by("experiment_id", "position") if arm.speculative_config() == config]


def _levels(arm: Arm, limit: int) -> tuple[int, ...]:
    return tuple(level for level in sorted(arm.experiment.concurrency_levels) if level <= limit)


def _by_category(arm: Arm, levels: tuple[int, ...]) -> list[Measured]:
    """Per block and category, the counts vLLM reported for each request's steps."""
    categories = breakdowns.categories_by_prompt(arm.experiment)
    if not categories:
        return []
    counts: defaultdict[tuple[int, str], Counts] = defaultdict(lambda: Counts(0, 0, 0))
    rows = (
        RequestRecord.objects.succeeded_of(arm.experiment)
        .filter(run__arm=arm, run__concurrency__in=levels, spec_accepted_per_step__isnull=False)
        .values_list("run__repetition", "prompt_index", "spec_accepted_per_step", "spec_proposed_per_step")
    )
    for block, prompt, accepted, proposed in rows.iterator(chunk_size=5000):
        if prompt in categories and accepted and proposed:
            counts[block, categories[prompt]] += Counts.of_steps(accepted, proposed)
    return [
        Measured(arm.experiment_id, arm.label, block, levels, category, value)
        for (block, category), value in sorted(counts.items())
    ]


def _by_block(arm: Arm, levels: tuple[int, ...]) -> list[Measured]:
    """Per block, the differences of vLLM's counters its runs recorded."""
    counts: defaultdict[int, Counts] = defaultdict(lambda: Counts(0, 0, 0))
    summaries = RunSummary.objects.succeeded_of(arm.experiment).filter(
        run__arm=arm, run__concurrency__in=levels, spec_num_draft_tokens__isnull=False
    )
    for s in summaries.select_related("run").order_by("run_id"):
        recorded = Counts(
            s.spec_num_drafts or 0,
            s.spec_num_draft_tokens or 0,
            s.spec_num_accepted_tokens or 0,
            tuple(s.spec_accepted_per_pos or ()),
        )
        counts[s.run.repetition] += recorded
    return [
        Measured(arm.experiment_id, arm.label, block, levels, guardrails.ALL_PROMPTS, value)
        for block, value in sorted(counts.items())
    ]


def _measured(arms: list[Arm], limit: int) -> list[Measured]:
    measured = []
    for arm in arms:
        levels = _levels(arm, limit)
        measured += _by_category(arm, levels) or _by_block(arm, levels)
    return measured


def _break_evens(arms: list[Arm], metric: str) -> list[BreakEven]:
    """Where each experiment's stored analysis found the arm's speedup fall to 1: the crossing of
    its intervals, or a break-even search's bracket (experiments/analysis/search.py), at the
    crossing of its points inside it, or the bracket's geometric middle where they give none."""
    experiment_of = {arm.id: arm.experiment_id for arm in arms}
    found = []
    analyses = ExperimentAnalysis.objects.filter(experiment__in=set(experiment_of.values()))
    for analysis in analyses.order_by("experiment_id"):
        for row in analysis.verdicts:
            even = row["break_even"]
            if row["arm_id"] not in experiment_of or row["metric"] != metric:
                continue
            level = even["level"]
            if even["state"] == search.BRACKETED and level is None:
                level = math.sqrt(even["lo"] * even["hi"])
            if even["state"] in (break_even.CROSSES, search.BRACKETED):
                found.append(BreakEven(experiment_of[row["arm_id"]], row["arm"], level, even["lo"], even["hi"]))
    return found


def decision_rules_file(decision: Decision) -> str:
    """The decision's Prometheus rules file; NoGuardrails for a decision without a speculative arm."""
    deployment = _deployment(decision)
    arms = _evidence_arms(decision)
    measured = _measured(arms, deployment.max_concurrency)
    return guardrails.rules_file(deployment, measured, _break_evens(arms, decision.metric))
