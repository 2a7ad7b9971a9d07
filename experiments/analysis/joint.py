"""What the page, the API and the recommendation say of the joint word per arm and level
(experiments/measurement/stats/objective.py): the word, why, and the guard that blocked it, in
words a team reads ("faster per token but costs capacity: output throughput −12 % […]")."""

from experiments.measurement.stats import objective, verdicts
from experiments.models import Experiment, SpeedupEstimate

# The word a team reads for each joint word; "costs" is completed by the guard that costs.
WORDS = {
    objective.PAYS: "pays",
    objective.COSTS: "costs",
    objective.NOT_WORTH_IT: "not worth it",
    objective.INCONCLUSIVE: "inconclusive",
    objective.OPEN: "open",
}


def metric_label(metric: str) -> str:
    return SpeedupEstimate.Metric(metric).label if metric in SpeedupEstimate.Metric.values else metric


def _change(guard: objective.GuardLook) -> str:
    """A guard's estimate as a change: "−12 % [−20 %, −4 %]" (of the arm against the baseline)."""
    estimate = guard.estimate
    if estimate.point is None:
        return "no estimate"
    point = f"{(estimate.point - 1) * 100:+.0f} %"
    if not estimate.has_interval:
        return point
    return f"{point} [{(estimate.interval.lo - 1) * 100:+.0f} %, {(estimate.interval.hi - 1) * 100:+.0f} %]"


def guard_json(guard: objective.GuardLook) -> dict:
    return {
        "metric": guard.metric, "label": metric_label(guard.metric), "margin": guard.margin,
        "margin_percent": f"{guard.margin:.0%}", "status": guard.status, "figure": verdicts.figure(guard.estimate),
        "change": _change(guard), "blocks": guard.blocks, "confidence": guard.confidence, "implied": guard.implied,
    }  # fmt: skip


def _guard_phrase(guard: objective.GuardLook) -> str:
    capacity = " (its requests queued or were preempted where the baseline's were not, or the reverse)"
    return f"{metric_label(guard.metric).lower()} {_change(guard)}{capacity if guard.implied else ''}"


def sentence(joint: objective.JointDecision, primary_label: str) -> str:
    """Why the arm's word at this level is what it is, naming the guard that blocked it."""
    primary = joint.primary
    faster = primary.outcome == "faster"
    worse = [g for g in joint.guards if g.status == objective.WORSE]
    unsure = [g for g in joint.guards if g.status == objective.UNSURE]
    if joint.word == objective.PAYS:
        shown = ", ".join(f"{metric_label(g.metric).lower()} within {g.margin:.0%}" for g in joint.guards)
        return f"pays: faster on {primary_label.lower()}" + (f", no worse on {shown}" if shown else "")
    if joint.word == objective.COSTS:
        costs = "; ".join(f"{_guard_phrase(g)}, beyond its {g.margin:.0%} margin" for g in worse)
        if faster:
            kind = "capacity" if any(g.metric in objective.CAPACITY_GUARDS for g in worse) else "latency"
            return f"faster per token but costs {kind}: {costs}"
        return f"does not pay: {costs}"
    if joint.word == objective.NOT_WORTH_IT:
        return f"does not pay: {primary.outcome} on {primary_label.lower()}"
    if faster and unsure:
        names = ", ".join(f"{_guard_phrase(g)} not shown within {g.margin:.0%}" for g in unsure)
        return f"{joint.word}: faster on {primary_label.lower()}, but {names}"
    return f"{WORDS.get(joint.word, joint.word)}: {primary.outcome} on {primary_label.lower()}"


def joint_json(joint: objective.JointDecision, primary_label: str) -> dict:
    blocking = joint.blocking[0] if joint.blocking else None
    return {
        "word": joint.word,
        "sentence": sentence(joint, primary_label),
        "primary_outcome": joint.primary.outcome,
        "guards": [guard_json(g) for g in joint.guards],
        "blocked_by": metric_label(blocking.metric) if blocking is not None and joint.word != objective.PAYS else "",
    }


def objective_json(experiment: Experiment) -> dict:
    """The objective the experiment declared: its preset, the primary metric and the guards."""
    preset = objective.PRESETS.get(experiment.objective)
    if experiment.objective == objective.SINGLE_METRIC:
        label = "The primary metric alone (an experiment from before objectives, or asked so)"
    elif preset is not None:
        label = preset.label
    else:
        label = "Custom"
    return {
        "name": experiment.objective,
        "label": label,
        "explanation": preset.explanation if preset is not None else "",
        "primary": experiment.primary_metric,
        "primary_label": metric_label(experiment.primary_metric),
        "guards": [
            {
                "metric": g["metric"],
                "label": metric_label(g["metric"]),
                "margin": g["margin"],
                "margin_percent": f"{g['margin']:.0%}",
            }
            for g in experiment.guards
        ],  # fmt: skip
    }
