"""The variance components of each compared arm's block log ratios (server start against run),
the start-up and run times, and the rounds per server session they would call for
(experiments/measurement/stats/variance_components.py; definitions on the page and in docs/verdicts.md).

Shown, not acted on: the worker runs every level once per server session. Stored by
experiments/analysis/services.py as the analysis' series["variance_components"].
"""

import math

from experiments.measurement.stats import inference
from experiments.measurement.stats import variance_components as vc
from experiments.models import Arm, Experiment, Run, SpeedupEstimate

METRICS = (SpeedupEstimate.Metric.SERVER_TPOT, SpeedupEstimate.Metric.E2E)
# As workers/sessions.py's ONE_SERVER_PER_RUN_METHODS: such an arm starts a server for every run.
ONE_SERVER_PER_RUN_METHODS = {Arm.Method.SUFFIX}


def _session(run_id: int, arm_id: int, method: str, block: int, server_per_block: bool) -> tuple[int, ...]:
    """The server a run ran on, as the worker groups runs (workers/sessions.session_key)."""
    if method in ONE_SERVER_PER_RUN_METHODS:
        return (arm_id, run_id)
    return (arm_id, block) if server_per_block else (arm_id,)


def run_timings(experiment: Experiment) -> list[vc.RunTiming]:
    """Every real run that started and finished, with its server session."""
    rows = experiment.runs.real().values_list(
        "id", "arm_id", "arm__method", "repetition", "started_at", "finished_at", "status"
    )
    return [
        vc.RunTiming(
            arm=arm_id,
            session=_session(run_id, arm_id, method, block, experiment.server_per_block),
            started_s=started.timestamp(),
            finished_s=finished.timestamp(),
            succeeded=status == Run.Status.SUCCEEDED,
        )
        for run_id, arm_id, method, block, started, finished, status in rows
        if started is not None and finished is not None
    ]


def _not_shared(experiment: Experiment, baseline: Arm, arm: Arm) -> str:
    """Why the levels of a block did not share one server per side, or ""."""
    if not experiment.server_per_block:
        return "one server per arm for all blocks: every block shares the start, so it cannot be told from the run"
    if {baseline.method, arm.method} & ONE_SERVER_PER_RUN_METHODS:
        return "suffix decoding gets a fresh server for every run, so its levels share no server"
    return ""


def _notes(components: vc.Components, rounds: vc.Rounds) -> list[str]:
    notes = []
    if components.start_floored:
        notes.append(f"the covariance across levels came out negative ({components.start_raw:.3g}); σ_start² set to 0")
    if components.run_floored_levels:
        levels = ", ".join(map(str, components.run_floored_levels))
        notes.append(f"at concurrency {levels} the level's own variance was below σ_start² (its σ_run² alone < 0)")
    if rounds.reason:
        notes.append(rounds.reason)
    return notes


def _pct(variance: float | None) -> float | None:
    return None if variance is None else 100 * math.sqrt(variance)


def _row(arm: Arm, metric: str, components: vc.Components, costs: vc.Costs) -> dict:
    rounds = vc.rounds_per_server(components, costs)
    return {
        "arm_id": arm.id,
        "arm": arm.label,
        "replicate": arm.is_replicate,
        "metric": str(metric),
        "metric_name": SpeedupEstimate.Metric(metric).label,
        "levels": components.levels,
        "blocks": components.blocks,
        "sigma_start_pct": _pct(components.var_start),
        "sigma_run_pct": _pct(components.var_run),
        "c_start_s": costs.start_s,
        "c_run_s": costs.run_s,
        "start_sessions": costs.sessions,
        "rounds": rounds.rounds,
        # JSON has no infinity: r* is unbounded exactly when σ_start² is 0, which the note says.
        "rounds_exact": rounds.exact if rounds.exact is not None and math.isfinite(rounds.exact) else None,
        "note": "; ".join(_notes(components, rounds)),
    }


def variance_components(
    experiment: Experiment, runs: list[inference.RunData], baseline: Arm, compared: list[Arm]
) -> dict:
    """Per compared arm and metric of METRICS: σ_start and σ_run of its block log ratios, c_start
    and c_run of its comparison with the baseline, and r*."""
    levels = experiment.concurrency_levels
    ratios = vc.block_ratios(
        runs, baseline=baseline.id, arms=[arm.id for arm in compared], levels=levels, metrics=METRICS
    )
    timings = run_timings(experiment)
    base_costs = vc.arm_costs(timings, baseline.id)
    rows = []
    for arm in compared:
        costs = vc.comparison_costs(base_costs, vc.arm_costs(timings, arm.id))
        reason = _not_shared(experiment, baseline, arm)
        for metric in METRICS:
            components = vc.components(ratios.get((arm.id, metric), {}))
            if reason:
                components = vc.Components(components.levels, components.blocks, reason=reason)
            rows.append(_row(arm, metric, components, costs))
    return {"rows": rows, "rounds_in_experiment": vc.ROUNDS_IN_EXPERIMENT, "max_rounds": vc.MAX_ROUNDS}
