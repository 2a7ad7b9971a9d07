"""What the A/A replicate says of an experiment's host: a warning when the question's test
called it different from the baseline, which blames the host only where the replicate's
spread between blocks is itself out of line with the host's earlier replicates.

The replicate is a family of its own (experiments/measurement/stats/question.py), tested like the
candidates: with nothing differing, it is called at some primary level in at most 5 % of
experiments. A call alone is therefore weak evidence that the host changed; a spread between
blocks above what the same host's earlier replicates showed is stronger.
"""

import math
import statistics

import numpy as np

from experiments.measurement.stats import question, sequential
from experiments.models import EnvironmentSnapshot, Experiment, SpeedupEstimate

HISTORY_MIN = 5  # earlier replicates on the host before its spread is judged against them
HISTORY_LIMIT = 50
OUT_OF_LINE_QUANTILE = 0.95


def _log_sd(ratios) -> float | None:
    logs = [math.log(ratio) for ratio in ratios if ratio > 0]
    return statistics.stdev(logs) if len(logs) >= 3 else None


def host_spreads(experiment: Experiment) -> list[float]:
    """The spread between blocks (sd of the block log ratios) of the earlier finished
    experiments' replicates on this experiment's host(s), on its primary metric, newest first."""
    hosts = EnvironmentSnapshot.objects.filter(run__experiment=experiment).values("host_name")
    rows = (
        SpeedupEstimate.objects.filter(
            arm__is_replicate=True,
            metric=experiment.primary_metric,
            experiment__status=Experiment.Status.FINISHED,
            experiment__runs__environment__host_name__in=hosts,
        )
        .exclude(experiment=experiment)
        .distinct()
        .order_by("-experiment__created_at", "-id")
        .values_list("block_ratios", flat=True)[:HISTORY_LIMIT]
    )
    return [sd for ratios in rows if (sd := _log_sd(ratios)) is not None]


def _host_judgement(spread: float | None, history: list[float]) -> str:
    if spread is None:
        return "With too few blocks for a spread, nothing tells chance from a changed host."
    if len(history) < HISTORY_MIN:
        return (
            f"This host has {len(history)} earlier A/A replicate(s) on this metric, too few to tell whether its "
            f"spread between blocks ({spread:.1%}) is unusual: the call may be chance."
        )
    limit = float(np.quantile(history, OUT_OF_LINE_QUANTILE))
    if spread > limit:
        return (
            f"Its spread between blocks ({spread:.1%}) is above {OUT_OF_LINE_QUANTILE:.0%} of this host's "
            f"{len(history)} earlier replicates (up to {limit:.1%}): the host most likely changed during the "
            "experiment (other load came and went). Read every verdict here with that in mind, and repeat the "
            "experiment on a quieter host."
        )
    return (
        f"Its spread between blocks ({spread:.1%}) is in line with this host's {len(history)} earlier replicates "
        f"(up to {limit:.1%}), so nothing says the host changed: most likely the design's 5% chance."
    )


def replicate_warnings(experiment: Experiment, decided: question.QuestionDecisions, label: str) -> list[str]:
    """A warning when the replicate was called faster or slower at a primary level."""
    called = [d for d in decided.replicate if d.outcome in (sequential.FASTER, sequential.SLOWER)]
    if not called:
        return []
    cells = "; ".join(f"{d.outcome} at {d.key[1]} ({d.estimate.point:.3f}×)" for d in called)
    spreads = [d.estimate.log_sd for d in called if d.estimate.log_sd is not None]
    text = (
        f"The {label}, identical to the baseline, was called different from it on the question's metric: {cells}. "
        "A design like this one does that in at most 5% of experiments with nothing differing. "
    )
    return [text + _host_judgement(max(spreads) if spreads else None, host_spreads(experiment))]
