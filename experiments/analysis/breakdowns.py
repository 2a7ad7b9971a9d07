"""Speedup and acceptance by group of prompts: by the categories of an uploaded prompt set,
and by input length (the tokens the server counted for each prompt).

A group's engine-timed TPOT speedup (what speculation changes, whatever the stream did) is
computed by the same code as the experiment's (inference.speedup_cells, blocks as the unit),
on the runs restricted to that group's prompts, so its interval and outcome read the same
way; with few prompts per group they are wide. Failures are counted
per run, not per group. Acceptance per group pools the per-step counts vLLM reported for each
request (accepted / proposed draft tokens, and τ = 1 + accepted / steps).

experiments/analysis/services.py stores breakdown_series() in the analysis' chart series.
"""

from collections import defaultdict
from dataclasses import replace

from experiments.measurement.stats import inference, verdicts
from experiments.models import Arm, Experiment, RequestRecord
from experiments.prompts import catalog

TPOT = "server_tpot"
# Upper bounds of the input-length buckets, in tokens.
LENGTH_BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


def categories_by_prompt(experiment: Experiment) -> dict[int, str]:
    """prompt index → category, for an uploaded set with categories; {} otherwise."""
    prompt_set = experiment.uploaded_prompt_set
    if prompt_set is None or not prompt_set.categories:
        return {}
    categories = prompt_set.item_categories()
    selection = catalog.uploaded_selection(prompt_set, experiment.input_lengths)
    return {prompt: categories[item] for prompt, item in enumerate(selection)}


def length_bucket(tokens: int) -> str:
    low = 1
    for high in LENGTH_BUCKETS:
        if tokens <= high:
            return f"{low}–{high} tokens"
        low = high + 1
    return f"over {LENGTH_BUCKETS[-1]} tokens"


def lengths_by_prompt(experiment: Experiment) -> dict[int, str]:
    """prompt index → input-length bucket, from the tokens the server counted for it."""
    rows = RequestRecord.objects.succeeded_of(experiment)
    tokens = dict(rows.values_list("prompt_index", "input_tokens").distinct("prompt_index").order_by("prompt_index"))
    return {prompt: length_bucket(count) for prompt, count in tokens.items()}


def _restricted(run: inference.RunData, prompts: set[int]) -> inference.RunData:
    latencies = {metric: {p: v for p, v in values.items() if p in prompts} for metric, values in run.latencies.items()}
    return replace(run, latencies=latencies, outputs={})


def _cell_json(cell: inference.CellResult, labels: dict[int, str]) -> dict:
    e = cell.estimate
    return {
        "arm_id": cell.arm, "arm": labels[cell.arm], "level": cell.level, "point": e.point, "lo": e.lo, "hi": e.hi,
        "outcome": cell.outcome, "figure": verdicts.figure(e), "n_pairs": cell.n_pairs,
    }  # fmt: skip


def _acceptance(experiment: Experiment, groups: dict[int, str], labels: dict[int, str]) -> dict[str, list[dict]]:
    pooled: defaultdict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0, 0])  # accepted, proposed, steps
    rows = (
        RequestRecord.objects.succeeded_of(experiment)
        .filter(spec_accepted_per_step__isnull=False)
        .values_list("run__arm_id", "prompt_index", "spec_accepted_per_step", "spec_proposed_per_step")
    )
    for arm_id, prompt, accepted, proposed in rows.iterator(chunk_size=5000):
        if prompt in groups and accepted and proposed:
            cell = pooled[(groups[prompt], arm_id)]
            cell[0], cell[1], cell[2] = cell[0] + sum(accepted), cell[1] + sum(proposed), cell[2] + len(accepted)
    by_group = defaultdict(list)
    for (group, arm_id), (n_accepted, n_proposed, steps) in sorted(pooled.items()):
        rate, tau = n_accepted / n_proposed, 1 + n_accepted / steps
        by_group[group].append({"arm_id": arm_id, "arm": labels[arm_id], "rate": rate, "tau": tau, "steps": steps})
    return by_group


def group_breakdown(experiment: Experiment, runs, groups: dict[int, str], baseline: Arm, compared: list[Arm], order):
    """Per group (sorted by `order`): its prompts, engine-timed TPOT speedup cells and acceptance per arm."""
    labels = {arm.id: arm.label for arm in [baseline, *compared]}
    acceptance = _acceptance(experiment, groups, labels)
    members = defaultdict(set)
    for prompt, group in groups.items():
        members[group].add(prompt)
    breakdown = []
    for group in sorted(members, key=order):
        cells = inference.speedup_cells(
            [_restricted(run, members[group]) for run in runs],
            baseline=baseline.id, arms=[arm.id for arm in compared], levels=experiment.concurrency_levels,
            margin=experiment.equivalence_margin, metrics=[TPOT],
        )  # fmt: skip
        breakdown.append(
            {
                "group": group,
                "prompts": len(members[group]),
                "cells": [_cell_json(cell, labels) for cell in cells],
                "acceptance": acceptance.get(group, []),
            }
        )
    return breakdown


def breakdown_series(experiment: Experiment, runs, baseline: Arm, compared: list[Arm]) -> dict:
    """The breakdowns that apply: by category when the measured prompts have several, by input
    length when they span several buckets."""
    kinds = (
        ("by_category", categories_by_prompt(experiment), str),
        ("by_input_length", lengths_by_prompt(experiment), bucket_order),
    )
    measured = {prompt for run in runs for values in run.latencies.values() for prompt in values}
    series = {}
    for name, all_groups, order in kinds:
        groups = {prompt: group for prompt, group in all_groups.items() if prompt in measured}
        if len(set(groups.values())) > 1:
            series[name] = group_breakdown(experiment, runs, groups, baseline, compared, order)
    return series


def bucket_order(bucket: str) -> float:
    """Sort key of a length_bucket: its lower bound."""
    return float(bucket.split("–")[0]) if bucket[0].isdigit() else float("inf")
