"""What the page and the API say of a break-even search (experiments/measurement/planning/planner.py):
per candidate arm where its search stopped, the bracket of settled words, the concurrency where
the point estimates cross 1 inside it, the levels it measured and when each entered, and the
confirmation arm that ran the derived schedule."""

import json

from experiments.analysis import continuation, device_time
from experiments.measurement.deploy import batch_schedule
from experiments.measurement.planning import planner
from experiments.measurement.stats import question, sequential, verdicts
from experiments.measurement.stats.break_even import log_crossing
from experiments.models import Arm, Experiment

BRACKETED = "bracketed"  # the chart's break-even state for a found search: between two settled levels
CONFIRMATION = "confirmation"  # a confirmation arm's: it measures a derived schedule, not a break-even
STATE_SENTENCE = {
    planner.FOUND: "pays up to {below}: settled faster at {below}, not faster at {above}, its neighbour on the grid",
    planner.PAYS_EVERYWHERE: "pays across the range: settled faster at its highest level, {high}",
    planner.PAYS_NOWHERE: "pays nowhere in the range: not faster even at its lowest level, {low}",
    planner.SEARCHING: "not found yet{bracket}",
    planner.NARROWED: "not found at the resolution{bracket}: no level was left to add, or no blocks for its looks",
}


def _bracket_words(search: planner.ArmSearch) -> str:
    below, above = search.settled.below, search.settled.above
    if below is not None and above is not None:
        return f": it pays at {below} and not at {above}, levels between them unsettled"
    if below is not None:
        return f": it pays at {below}, no level above settled as not paying"
    if above is not None:
        return f": it does not pay at {above}, no level below settled as paying"
    return ": no level settled"


def state_sentence(experiment: Experiment, search: planner.ArmSearch) -> str:
    """The arm's search in one sentence, as the page says it."""
    return STATE_SENTENCE[search.state].format(
        below=search.settled.below, above=search.settled.above, low=experiment.search_low,
        high=experiment.search_high, bracket=_bracket_words(search),
    )  # fmt: skip


def crossing(search: planner.ArmSearch, decided: dict[question.CellKey, question.Decision], arm: int) -> float | None:
    """Where the bracket's point estimates, interpolated on log concurrency, cross 1."""
    below, above = search.settled.below, search.settled.above
    if below is None or above is None:
        return None
    low, high = decided[(arm, below)].estimate.point, decided[(arm, above)].estimate.point
    if low is None or high is None:
        return None
    return log_crossing(below, low, above, high)


def _levels(arm: int, decided: dict[question.CellKey, question.Decision], entered: dict) -> list[dict]:
    return [
        {"level": level, "entered": entered.get((arm, level), 1), "outcome": decision.outcome,
         "figure": verdicts.figure(decision.estimate), "blocks": decision.blocks}
        for (cell_arm, level), decision in sorted(decided.items())
        if cell_arm == arm
    ]  # fmt: skip


def _confirmation(arm: Arm, decided: dict[question.CellKey, question.Decision], entered: dict) -> dict:
    """The confirmation arm's schedule and its words: it confirms the derivation when it is
    faster at the bracket's lower level and not slower at its upper one (k = 0 there)."""
    rows = _levels(arm.id, decided, entered)
    return {
        "arm_id": arm.id,
        "arm": arm.label,
        "config": json.dumps(arm.speculative_config(), sort_keys=True),
        "levels": rows,
        "verdict": confirmation_verdict([row["outcome"] for row in rows]),
    }


def _unconfirmed(experiment: Experiment, arm: Arm, search: planner.ArmSearch, confirming: Arm | None) -> dict:
    """For a found break-even that no confirmation arm ran: the derived --speculative-config,
    labelled derived, and why it was not run."""
    schedule = None if confirming else continuation.derived_schedule(experiment, arm, search)
    if schedule is None:
        return {"derived": None, "unconfirmed_because": ""}
    versions = sorted(set(experiment.runs.values_list("environment__vllm_version", flat=True)) - {None, ""})
    because = (
        f"the worker's vLLM ({', '.join(versions) or 'version not recorded'}) does not take "
        "num_speculative_tokens_per_batch_size (0.32 on)"
        if not continuation.vllm_runs_schedules(experiment)
        else f"fewer than {sequential.FIRST_LOOK} blocks were left for its looks when the break-even was found"
    )
    config = {**(arm.speculative_config() or {}), batch_schedule.KEY: batch_schedule.stored(schedule)}
    return {"derived": json.dumps(config, sort_keys=True), "unconfirmed_because": because}


def confirmation_verdict(outcomes: list[str]) -> str:
    """A confirmation's word from its cells' outcomes, lowest level first: refuted when it is
    slower anywhere or settled not faster at the lowest level (where the schedule drafts k);
    confirmed when every cell is settled and the lowest is faster; else not settled."""
    if not outcomes:
        return "not settled"
    if sequential.SLOWER in outcomes or outcomes[0] in planner.STOPS:
        return "refuted"
    if outcomes[0] == sequential.FASTER and all(outcome in sequential.SETTLED for outcome in outcomes):
        return "confirmed"
    return "not settled"


def search_summary(
    experiment: Experiment, decided: question.QuestionDecisions, step: continuation.Step, labels: dict[int, str],
    entered: dict[question.CellKey, int],
) -> dict | None:  # fmt: skip
    """The search's part of the page's question, or None for an experiment of listed levels."""
    search = experiment.search_range
    if search is None:
        return None
    by_key = decided.by_key()
    confirmations = {arm.confirms_id: arm for arm in experiment.arms.exclude(confirms=None)}
    searched = experiment.arms.in_bulk(list(step.searches))
    arms = []
    for arm_id, arm_search in step.searches.items():
        point = crossing(arm_search, by_key, arm_id)
        confirming = confirmations.get(arm_id)
        arms.append({
            "arm_id": arm_id, "arm": labels.get(arm_id, ""), "state": arm_search.state,
            "sentence": state_sentence(experiment, arm_search), "below": arm_search.settled.below,
            "above": arm_search.settled.above, "crossing": point, "faster_above": list(arm_search.faster_above),
            "levels": _levels(arm_id, by_key, entered),
            "confirmation": _confirmation(confirming, by_key, entered) if confirming else None,
            **_unconfirmed(experiment, searched[arm_id], arm_search, confirming),
        })  # fmt: skip
    return {
        "low": search.low, "high": search.high, "resolution": search.resolution, "grid": list(search.grid()),
        "family_size": search.family_size, "arms": arms, "device": device_saving(experiment, len(search.grid())),
    }  # fmt: skip


def device_saving(experiment: Experiment, grid_levels: int) -> dict | None:
    """The device-minutes the search spent on its servers and runs, and about what a fixed grid
    of the same resolution would have spent on the same server sessions: each session (an arm in
    a block; the confirmation arms' left out, a fixed grid does not confirm) starting a server
    and running every grid level, at this experiment's own mean start-up and mean run time. The
    same sessions: the simulation (scripts/bench_planner.py) finds a fixed grid needs about as
    many blocks. None before any start-up was recorded."""
    recorded = device_time.spent(experiment).recorded
    if not recorded.starts or not recorded.runs:
        return None
    compared = experiment.runs.filter(arm__confirms__isnull=True, started_at__isnull=False)
    sessions = compared.values("arm_id", "repetition").distinct().count()
    runs = compared.count()
    mean_start, mean_run = recorded.start_s / recorded.starts, recorded.load_s / recorded.runs
    scale = recorded.tensor_parallel_size / 60
    spent = (sessions * mean_start + runs * mean_run) * scale
    fixed = sessions * (mean_start + grid_levels * mean_run) * scale
    return {
        "minutes": recorded.minutes, "start_minutes": recorded.start_minutes, "load_minutes": recorded.load_minutes,
        "search_minutes": spent, "confirmation_minutes": max(0.0, recorded.minutes - spent), "sessions": sessions,
        "runs": runs, "fixed_runs": sessions * grid_levels, "fixed_minutes": fixed, "saved_minutes": fixed - spent,
        "mean_start_s": mean_start, "mean_run_s": mean_run,
    }  # fmt: skip


def break_even(arm: dict) -> dict:
    """The search's answer as the chart's break-even for the primary metric (static/js): the
    bracket and the crossing inside it, or where the range holds none."""
    if arm["state"] == planner.FOUND:
        return {"state": BRACKETED, "level": arm["crossing"], "lo": arm["below"], "hi": arm["above"]}
    return {"state": arm["state"], "level": None, "lo": arm["below"], "hi": arm["above"], "reason": arm["sentence"]}


def with_search_break_evens(verdict_rows: list[dict], summary: dict | None, metric: str) -> list[dict]:
    """The verdict rows, the primary metric's break-even of each searched arm replaced by its
    search's answer: the bracket of settled words, not a crossing of intervals between levels
    the search placed for another purpose; a confirmation arm's says what it measures instead."""
    if summary is None:
        return verdict_rows
    answers = {arm["arm_id"]: break_even(arm) for arm in summary["arms"]}
    for arm in summary["arms"]:
        if arm["confirmation"]:
            reason = f"it runs the schedule derived from {arm['arm']}'s break-even, at its bracket's two levels"
            answers[arm["confirmation"]["arm_id"]] = {
                "state": CONFIRMATION,
                "level": None,
                "lo": None,
                "hi": None,
                "reason": reason,
            }
    return [
        row | {"break_even": answers[row["arm_id"]]} if row["metric"] == metric and row["arm_id"] in answers else row
        for row in verdict_rows
    ]
