"""The variance components of each compared arm's block log ratios (server start against run,
and between the hosts of a fleet), the start-up and run times, and the rounds per server session
they would call for (experiments/measurement/stats/variance_components.py, host_effects.py;
definitions on the page and in docs/verdicts.md); and whether one host's block ratios differ
from the others' beyond chance (host_test, the page's warning).

Shown, not acted on: the worker runs every level once per server session. Stored by
experiments/analysis/services.py as the analysis' series["variance_components"].
"""

import math

from experiments.analysis.loader import block_order
from experiments.measurement.stats import host_effects as he
from experiments.measurement.stats import inference
from experiments.measurement.stats import variance_components as vc
from experiments.models import Arm, Block, Experiment, Run, SpeedupEstimate

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


def block_hosts(experiment: Experiment) -> dict[int, str]:
    """{block: the host of the worker that ran it} for an experiment dispatched by block, keyed
    as the loaded runs' blocks are (their place in completion order, loader.block_order); empty
    for one held whole by one worker (one host)."""
    order = block_order(experiment)
    if order is None:
        return {}
    rows = Block.objects.filter(experiment_id=experiment.id).exclude(worker_host="")
    return {order.places[number]: host for number, host in rows.values_list("number", "worker_host")}


NOT_BY_BLOCK = "one worker ran every block (the blocks were not dispatched one by one): one host"


def _host_effect(by_level: dict, hosts: dict[int, str]) -> he.HostEffect:
    if not hosts:
        return he.HostEffect(reason=NOT_BY_BLOCK)
    return he.host_effect(he.block_values(by_level), hosts)


def _hosts_text(hosts: tuple[tuple[str, int], ...]) -> str:
    return ", ".join(f"{host} ({blocks})" for host, blocks in hosts)


def _host_note(effect: he.HostEffect) -> str:
    note = effect.reason
    if effect.left_out:
        left_out = f"left out with fewer than {he.MIN_HOST_BLOCKS} blocks: {_hosts_text(effect.left_out)}"
        note = f"{note}; {left_out}" if note else left_out
    if effect.var_host_raw is not None and effect.var_host_raw < 0:
        note = f"{note}; " if note else ""
        note += "the hosts' means vary less than their blocks predict; σ_host² set to 0"
    return note


def _row(arm: Arm, metric: str, components: vc.Components, costs: vc.Costs, host: he.HostEffect) -> dict:
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
        "hosts": _hosts_text(host.hosts),
        "sigma_host_pct": _pct(host.var_host),
        "host_note": _host_note(host),
    }


def _mean_pct(mean: float | None) -> float | None:
    return None if mean is None else 100 * math.expm1(mean)


def _host_test_row(
    arm: Arm, effect: he.HostEffect, decided: dict[int, tuple[float, bool]], values: dict[int, float], hosts: dict
) -> dict:
    p_holm, warn = decided.get(arm.id, (None, False))
    means = dict(effect.means)
    return {
        "arm_id": arm.id,
        "arm": arm.label,
        "replicate": arm.is_replicate,
        "hosts": [
            {"host": host, "blocks": blocks, "mean_pct": _mean_pct(means.get(host))} for host, blocks in effect.hosts
        ],
        "f": effect.f if effect.f is not None and math.isfinite(effect.f) else None,
        "df": [effect.df_between, effect.df_within],
        "p": effect.p,
        "p_holm": p_holm,
        "warn": warn,
        "farthest": he.farthest_host(effect) if effect.estimable else "",
        "note": _host_note(effect),
        # The chart's points: every block with a value, its host ("" where none is recorded).
        "points": [
            {"block": block, "host": hosts.get(block, ""), "ratio": math.exp(value)} for block, value in values.items()
        ],
    }


def host_test(experiment: Experiment, ratios: dict, compared: list[Arm], metric: str, hosts: dict[int, str]) -> dict:
    """Per compared arm, the one-way test of its block values (log ratio of `metric`, mean over
    levels) by host, Holm-adjusted over the arms tested: the page warns where it rejects."""
    values = {arm.id: he.block_values(ratios.get((arm.id, metric), {})) for arm in compared}
    effects = {arm.id: _host_effect(ratios.get((arm.id, metric), {}), hosts) for arm in compared}
    decided = he.hosts_differ(effects)
    return {
        "metric": str(metric),
        "metric_name": SpeedupEstimate.Metric(metric).label,
        "level": he.HOST_TEST_LEVEL,
        "min_blocks": he.MIN_HOST_BLOCKS,
        "min_hosts": he.MIN_HOSTS,
        "hosts_seen": len(set(hosts.values())),
        "arms": [_host_test_row(arm, effects[arm.id], decided, values[arm.id], hosts) for arm in compared],
    }


def host_warnings(variance: dict | None) -> list[str]:
    """The page's warning for each arm whose block ratios differ by host beyond chance."""
    test = (variance or {}).get("host_test")
    if not test:
        return []
    warnings = []
    for row in test["arms"]:
        if not row["warn"]:
            continue
        f = "∞ (each host's blocks agree exactly)" if row["f"] is None else f"{row['f']:.3g}"
        means = "; ".join(f"{h['host']}: {h['mean_pct']:+.1f} % over {h['blocks']} blocks" for h in row["hosts"])
        warnings.append(
            f"{row['arm']}: its block ratios of {test['metric_name']} differ between hosts beyond chance "
            f"(one-way analysis of variance of the block log ratios by host, F = {f} on "
            f"{row['df'][0]} and {row['df'][1]} degrees of freedom, p = {row['p']:.3g}, Holm-adjusted over the "
            f"arms {row['p_holm']:.3g} < {test['level']}); {row['farthest']} is the farthest from the others. "
            f"Mean block speedup by host (geometric, as a change): {means}. The intervals pool the hosts' blocks "
            "as one population; a difference between hosts widens them and the verdict speaks for this mix of hosts."
        )
    return warnings


def variance_components(
    experiment: Experiment, runs: list[inference.RunData], baseline: Arm, compared: list[Arm]
) -> dict:
    """Per compared arm and metric of METRICS: σ_start and σ_run of its block log ratios, c_start
    and c_run of its comparison with the baseline, and r*."""
    levels = experiment.concurrency_levels
    tested = experiment.primary_metric
    metrics = list(dict.fromkeys([*METRICS, tested]))
    ratios = vc.block_ratios(
        runs, baseline=baseline.id, arms=[arm.id for arm in compared], levels=levels, metrics=metrics
    )
    hosts = block_hosts(experiment)
    timings = run_timings(experiment)
    base_costs = vc.arm_costs(timings, baseline.id)
    rows = []
    for arm in compared:
        costs = vc.comparison_costs(base_costs, vc.arm_costs(timings, arm.id))
        reason = _not_shared(experiment, baseline, arm)
        for metric in METRICS:
            by_level = ratios.get((arm.id, metric), {})
            components = vc.components(by_level)
            if reason:
                components = vc.Components(components.levels, components.blocks, reason=reason)
            rows.append(_row(arm, metric, components, costs, _host_effect(by_level, hosts)))
    return {
        "rows": rows,
        "rounds_in_experiment": vc.ROUNDS_IN_EXPERIMENT,
        "max_rounds": vc.MAX_ROUNDS,
        "min_host_blocks": he.MIN_HOST_BLOCKS,
        "min_hosts": he.MIN_HOSTS,
        "host_test": host_test(experiment, ratios, compared, tested, hosts),
    }
