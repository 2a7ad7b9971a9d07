"""The experiment page's recommendation: what to deploy at each level of the question, from
the primary cells' words the analysis stored (experiments/measurement/deploy/recommendation.py), and
the derived --speculative-config when an arm pays only up to some batch size."""

import json
from urllib.parse import urlencode

from django.urls import reverse

from experiments.measurement.deploy import recommendation
from experiments.measurement.stats import objective
from experiments.models import Experiment
from experiments.rules import commands


def page_context(*, experiment: Experiment, question: dict) -> dict:
    """{"recommendation": ...} for the page, or None under that key when the question has no
    cells (no analysis yet, or no speculative arm)."""
    cells = question.get("cells") or []
    if not cells:
        return {"recommendation": None}
    arms = {arm.id: arm for arm in experiment.arms.filter(id__in={cell["arm_id"] for cell in cells})}
    points = {
        (s.arm_id, s.concurrency): s.point
        for s in experiment.speedups.filter(primary=True, metric=experiment.primary_metric)
    }
    by_arm: dict[int, dict[int, tuple[str, float | None]]] = {}
    for cell in cells:
        key = (cell["arm_id"], cell["level"])
        by_arm.setdefault(cell["arm_id"], {})[cell["level"]] = (objective.deploy_outcome(cell), points.get(key))
    measured = [
        recommendation.ArmCells(arm_id, arms[arm_id].label, arms[arm_id].num_speculative_tokens or 1, levels,
                                arms[arm_id].speculative_config() or {})
        for arm_id, levels in by_arm.items() if arm_id in arms
    ]  # fmt: skip
    levels = sorted({cell["level"] for cell in cells})
    max_batch = max(experiment.max_num_seqs or 0, levels[-1])
    advice = recommendation.recommend(measured, levels, max_batch=max_batch)
    labels = {arm_id: arm.label for arm_id, arm in arms.items()}
    derived = advice.derived
    proposal = _proposal(experiment, advice, labels, derived_config=derived.config if derived else None)
    return {
        "recommendation": {
            "levels": [
                {"level": a.level, "word": a.word, "arm": labels.get(a.arm, "") if a.arm else "", "speedup": a.speedup}
                for a in advice.levels
            ],
            "derived": {
                "arm": labels[derived.arm],
                "schedule": json.dumps([list(band) for band in derived.schedule]),
                "config": json.dumps(derived.config, sort_keys=True),
                "max_batch": max_batch,
                "max_batch_from": "max_num_seqs" if experiment.max_num_seqs else "the highest level measured",
            }
            if derived
            else None,
            "propose_url": reverse("experiments:decision_new") + "?" + urlencode(proposal, doseq=True),
        }
    }


def _proposal(
    experiment: Experiment, advice: recommendation.Recommendation, labels: dict[int, str],
    derived_config: dict | None,
) -> dict:  # fmt: skip
    """The decision form's prefill: deploy the arm recommended at the lowest level up to the
    last level it is recommended at without a break; do not deploy when no level recommends
    speculation and all are settled; else more data is needed. The evidence is this experiment."""
    levels = advice.levels
    words = [f"{a.level}: {('run ' + labels.get(a.arm, '')) if a.arm else a.word}" for a in levels]
    rationale = f"From experiment #{experiment.pk}'s recommendation per concurrency level ({'; '.join(words)})."
    fields: dict = {"experiments": [experiment.pk], "metric": experiment.primary_metric}
    first = levels[0] if levels else None
    if first is not None and first.arm is not None:
        upto = first.level
        for item in levels[1:]:
            if item.arm != first.arm:
                break
            upto = item.level
        fields.update(kind="deploy", arm=first.arm, max_concurrency=upto)
        if derived_config is not None:
            rationale += f" Derived, to confirm as an arm first: {commands.speculative_config_flag(derived_config)}."
    elif levels and all(item.word == recommendation.NO_SPECULATION for item in levels):
        fields["kind"] = "do_not_deploy"
    else:
        fields["kind"] = "needs_more_data"
    return {**fields, "rationale": rationale}
