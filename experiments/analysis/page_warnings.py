"""The warnings an experiment's analysis stores and the page prints above its results: the
design's limits, runs and requests that failed or fell short of their level, environments
that differ between arms, what vLLM decided otherwise for an arm than for the baseline (its
runner, scheduling, CUDA graphs, KV-cache size: experiments/analysis/engine_decisions.py),
streams the client did not see as the engine made them, runs under foreign load and blocks
that ran under different host states (experiments/analysis/host_states.py), an A/A
replicate called different (experiments/analysis/replicate.py), outputs that differ
from the baseline's more often than the replicate's, and block ratios that differ between the
hosts of a fleet beyond chance (experiments/analysis/variance.py).
"""

from collections import defaultdict

from experiments.analysis import engine_decisions, host_states, replicate, variance
from experiments.measurement.engine import stream_fidelity
from experiments.measurement.stats import question, verdicts
from experiments.models import Arm, EnvironmentSnapshot, Experiment, RequestRecord, Run, RunSummary

LOW_ACHIEVED_CONCURRENCY = 0.9


def _replicate_label(compared: list[Arm]) -> str:
    return next((arm.label for arm in compared if arm.is_replicate), "A/A replicate")


def fidelity_warnings(fidelity: list[dict], labels: dict[int, str]) -> list[str]:
    """An arm whose prompts differ from the baseline's clearly more often than the replicate's.
    Speculative decoding is lossless only up to the hardware's numerics (vLLM's wording), so the
    warning claims no more than that difference."""
    replicate = {row["level"]: row for row in fidelity if row.get("replicate")}
    return [
        f"{labels[row['arm_id']]} at concurrency {row['level']}: the output differed from the baseline's "
        f"in at least one block for {row['prompts_differing']} of {row['prompts']} prompts, against "
        f"{replicate[row['level']]['prompts_differing']} of {replicate[row['level']]['prompts']} for the A/A "
        "replicate: clearly more often (one-sided Fisher exact test on prompts, "
        f"p = {row['p_more_than_replicate']:.3g}). Speculative decoding is lossless up to the precision of the "
        "hardware's numerics, so at temperature 0 a few outputs may differ through batch-dependent numerics, "
        "as the replicate's do; this arm's differ more often than that."
        for row in fidelity
        if row["warn"]
    ]


def stream_warnings(rows: list[dict], labels: dict[int, str]) -> list[str]:
    flagged = [row for row in rows if row["flagged"] and row["arm_id"] in labels]
    if not flagged:
        return []
    runs = "; ".join(
        f"{labels[row['arm_id']]} at {row['level']}, block {row['block']} ({row['distorted']} of {row['checked']})"
        for row in flagged
    )
    return [
        f"In {len(flagged)} run(s) more than {stream_fidelity.DISTORTED_RUN_SHARE:.0%} of the requests did not reach "
        f"the client as the engine made them (a burst, a stall, or a decode span off the engine's): {runs}. "
        "The client's TPOT and TTFT get no verdict where those runs take part; the engine-timed TPOT, "
        "E2E and throughput are not affected."
    ]


def _environment_warnings(experiment: Experiment) -> list[str]:
    fields = {
        "host_name": "worker host",
        "vllm_version": "vLLM version",
        "torch_version": "torch version",
        "gpu_name": "GPU",
        "cpu_model": "CPU",
    }
    snapshots = EnvironmentSnapshot.objects.filter(run__experiment=experiment).values("run__arm__label", *fields)
    warnings = []
    for name_field, name in fields.items():
        seen = defaultdict(set)
        for snap in snapshots:
            seen[snap[name_field]].add(snap["run__arm__label"])
        if len(seen) > 1:
            detail = "; ".join(
                f"{value or 'unknown'}: {', '.join(sorted(arms))}" for value, arms in sorted(seen.items())
            )
            warnings.append(f"The arms did not all run with the same {name} ({detail}).")
    return warnings


def _design_warnings(experiment: Experiment) -> list[str]:
    warnings = []
    if experiment.repetitions < verdicts.MIN_BLOCKS:
        warnings.append(
            f"{experiment.repetitions} block(s): the page shows estimates but no verdicts; "
            f"at least {verdicts.MIN_BLOCKS} repetitions are needed to call an arm faster, slower or equivalent."
        )
    if not experiment.server_per_block:
        warnings.append(
            "One server per arm for all blocks: the intervals leave out the variance between server starts, "
            "and the arms did not interleave, so drift of the host is confounded with the arm."
        )
    if experiment.request_rate:
        warnings.append(
            "Requests arrived at a fixed Poisson rate: throughput then measures the arrival rate, "
            "so it gets no verdict."
        )
    return warnings


def _run_warnings(experiment: Experiment) -> list[str]:
    warnings = []
    failed_runs = experiment.runs.real().filter(status=Run.Status.FAILED).count()
    if failed_runs:
        warnings.append(f"{failed_runs} run(s) failed; their blocks are missing from the comparison.")
    failed_requests = RequestRecord.objects.filter(run__in=experiment.runs.real()).exclude(error="").count()
    if failed_requests:
        warnings.append(
            f"{failed_requests} request(s) failed. Where the arm and the baseline failed different numbers, "
            "that level gets no verdict."
        )
    low = sorted(
        {
            s.run.concurrency
            for s in RunSummary.objects.succeeded_of(experiment).select_related("run")
            if s.achieved_concurrency is not None
            and s.achieved_concurrency < LOW_ACHIEVED_CONCURRENCY * s.run.concurrency
        }
    )
    if low:
        warnings.append(
            f"At concurrency {', '.join(map(str, low))} some runs reached less than "
            f"{LOW_ACHIEVED_CONCURRENCY:.0%} of the nominal level (sum of E2E / duration): too few requests "
            "were in flight for that level to be measured as named."
        )
    return warnings


def analysis_warnings(
    experiment: Experiment,
    *,
    compared: list[Arm],
    decided: question.QuestionDecisions,
    stream: list[dict],
    fidelity: list[dict],
    labels: dict[int, str],
    components: dict | None = None,
) -> list[str]:
    """Every warning of the stored analysis, in the order the page prints them; `components`:
    the analysis' series["variance_components"], which holds the test of the hosts."""
    return (
        experiment.protocol_warnings()
        + _design_warnings(experiment)
        + _environment_warnings(experiment)
        + engine_decisions.experiment_flags(experiment)
        + _run_warnings(experiment)
        + stream_warnings(stream, labels)
        + host_states.host_warnings(host_states.host_runs(experiment), labels)
        + replicate.replicate_warnings(experiment, decided, _replicate_label(compared))
        + fidelity_warnings(fidelity, labels)
        + variance.host_warnings(components)
    )
