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


def in_sentence(label: str) -> str:
    """A label inside a sentence: "End-to-end latency" → "end-to-end latency", but "TTFT" and
    "Engine-timed TPOT" keep their acronyms."""
    if len(label) > 1 and label[1].islower():
        return label[0].lower() + label[1:]
    return label


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
    return f"{in_sentence(metric_label(guard.metric))} {_change(guard)}{capacity if guard.implied else ''}"


def sentence(joint: objective.JointDecision, primary_label: str) -> str:
    """Why the arm's word at this level is what it is, naming the guard that blocked it."""
    primary = joint.primary
    faster = primary.outcome == "faster"
    worse = [g for g in joint.guards if g.status == objective.WORSE]
    unsure = [g for g in joint.guards if g.status == objective.UNSURE]
    if joint.word == objective.PAYS:
        shown = ", ".join(f"{in_sentence(metric_label(g.metric))} within {g.margin:.0%}" for g in joint.guards)
        return f"pays: faster on {in_sentence(primary_label)}" + (f", no worse on {shown}" if shown else "")
    if joint.word == objective.COSTS:
        costs = "; ".join(f"{_guard_phrase(g)}, beyond its {g.margin:.0%} margin" for g in worse)
        if faster:
            kind = "capacity" if any(g.metric in objective.CAPACITY_GUARDS for g in worse) else "latency"
            return f"faster per token but costs {kind}: {costs}"
        return f"does not pay: {costs}"
    if joint.word == objective.NOT_WORTH_IT:
        return f"does not pay: {primary.outcome} on {in_sentence(primary_label)}"
    if faster and unsure:
        names = ", ".join(f"{_guard_phrase(g)} not shown within {g.margin:.0%}" for g in unsure)
        return f"{joint.word}: faster on {in_sentence(primary_label)}, but {names}"
    return f"{WORDS.get(joint.word, joint.word)}: {primary.outcome} on {in_sentence(primary_label)}"


def joint_json(joint: objective.JointDecision, primary_label: str) -> dict:
    # The guard that blocks it most: one shown worse before one not shown yet.
    ordered = sorted(joint.blocking, key=lambda g: g.status != objective.WORSE)
    blocking = ordered[0] if ordered else None
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
        "primary_in_sentence": in_sentence(metric_label(experiment.primary_metric)),
        "guards": [
            {
                "metric": g["metric"],
                "label": metric_label(g["metric"]),
                "in_sentence": in_sentence(metric_label(g["metric"])),
                "margin": g["margin"],
                "margin_percent": f"{g['margin']:.0%}",
            }
            for g in experiment.guards
        ],
    }


def service_break_evens(decisions: list[objective.JointDecision], labels: dict[int, str]) -> list[dict]:
    """Per candidate arm, where it stops paying for the service, by its joint words along the
    levels: pays at every level, at none, up to a level and not from the next settled one (the
    bracket, without interpolation: a guard's loss need not fall through 1 with the primary), or
    not settled while a level between them is open."""
    by_arm: dict[int, list[objective.JointDecision]] = {}
    for joint in decisions:
        by_arm.setdefault(joint.key[0], []).append(joint)
    rows = []
    for arm, cells in by_arm.items():
        cells = sorted(cells, key=lambda j: j.key[1])
        words = [j.word for j in cells]
        levels = [j.key[1] for j in cells]
        row = {"arm_id": arm, "arm": labels.get(arm, ""), "below": None, "above": None}
        if all(w == objective.PAYS for w in words):
            rows.append(row | {"state": "pays at every level", "sentence": f"{row['arm']} pays at every level"})
            continue
        if all(w in (objective.COSTS, objective.NOT_WORTH_IT) for w in words):
            rows.append(row | {"state": "pays at no level", "sentence": f"{row['arm']} pays at no level"})
            continue
        below = next((i for i in range(len(words) - 1, -1, -1) if words[i] == objective.PAYS), None)
        start = -1 if below is None else below
        settled_against = (objective.COSTS, objective.NOT_WORTH_IT)
        above = next((i for i, w in enumerate(words) if i > start and w in settled_against), None)
        if below is not None and above is not None and above == below + 1:
            why = "costs the service" if words[above] == objective.COSTS else "is not worth it"
            sentence = f"{row['arm']} pays up to {levels[below]} and {why} from {levels[above]}"
            rows.append(row | {"state": "stops paying", "below": levels[below], "above": levels[above],
                               "sentence": sentence})  # fmt: skip
            continue
        states = ", ".join(f"{w} at {lvl}" for w, lvl in zip(words, levels, strict=True))
        rows.append(row | {"state": "not settled", "sentence": f"{row['arm']}: not settled ({states})"})
    return rows
