"""TTFT, TPOT and E2E speedups of imported files without per-request rows, from the means
the files report: point estimates, with no interval and no verdict.

A file saved without --save-detailed keeps each latency's mean, median and percentiles but
not its requests, so the analysis (experiments/measurement/stats/inference.py), which pairs the arm's and the
baseline's requests prompt by prompt, finds nothing to pair and stores no speedup. Here, in
each block (the arm's and the baseline's files with the same repetition number at a level),
the ratio is the baseline's mean over the arm's, and the estimate is the geometric mean of
the blocks' ratios, as for a measured speedup.

The mean rather than the median: the analysis' block ratio is a ratio of means over the
prompts both sides completed, so where no request failed the two agree (vLLM's mean TPOT is
over the same requests and the same formula as specdash's). No interval and no verdict: a
file's mean covers the requests it completed, not the prompts both completed, so its ratios
are not the paired ones the intervals and verdicts are checked for (scripts/check_verdicts.py).
Only cells where no block has rows on both sides get one; the others keep the analysis' figures.
"""

from collections import defaultdict

from experiments.measurement.stats import intervals
from experiments.models import Experiment, ExperimentAnalysis, RunSummary, SpeedupEstimate

Metric = SpeedupEstimate.Metric
MEAN_COLUMNS = {Metric.TTFT: "ttft_mean_ms", Metric.TPOT: "tpot_mean_ms", Metric.E2E: "e2e_mean_ms"}
POINT_ESTIMATE = "point estimate"  # the outcome word: not a verdict (experiments/measurement/stats/verdicts.py)
NOTE = "point estimate from the files' means, no interval"


def _means(experiment: Experiment) -> dict[tuple[int, int], dict[int, dict[str, float | None]]]:
    """{(arm, level): {block: {metric: the file's mean}}}."""
    means: defaultdict[tuple[int, int], dict[int, dict[str, float | None]]] = defaultdict(dict)
    summaries = RunSummary.objects.succeeded_of(experiment).values_list(
        "run__arm_id", "run__concurrency", "run__repetition", *MEAN_COLUMNS.values()
    )
    for arm, level, block, *values in summaries:
        means[(arm, level)][block] = dict(zip(MEAN_COLUMNS, values, strict=True))
    return means


def point_estimates_of(experiment: Experiment) -> list[SpeedupEstimate]:
    """The experiment's speedups from the files' means, for its page (TTFT among them, which the
    speedup section does not read)."""
    return list(SpeedupEstimate.objects.filter(experiment=experiment, outcome=POINT_ESTIMATE))


def block_ratios(baseline: dict[int, dict], arm: dict[int, dict], metric: str) -> list[float]:
    """Per block both sides ran, the baseline's mean over the arm's (above 1: the arm is faster)."""
    ratios = [
        intervals.run_ratio(baseline[block][metric], arm[block][metric], higher_is_better=False)
        for block in sorted(baseline.keys() & arm.keys())
    ]
    return [ratio for ratio in ratios if ratio is not None]


def _sentence(metric: str, estimates: list[SpeedupEstimate]) -> str:
    figures = ", ".join(f"{e.point:.2f}× at {e.concurrency}" for e in sorted(estimates, key=lambda e: e.concurrency))
    return (
        f" From the files' means (they hold no per-request rows): {Metric(metric).label} {figures}, "
        "point estimates without an interval or a verdict."
    )


def summary_estimates_add(*, experiment: Experiment, analysis: ExperimentAnalysis) -> list[SpeedupEstimate]:
    """Fill the latency speedups the analysis had no pairs for from the files' means, and say
    so in the arm's verdict sentences."""
    baseline = next(arm for arm in experiment.arms.compared_or_baseline() if arm.is_baseline)
    means = _means(experiment)
    empty = SpeedupEstimate.objects.filter(
        experiment=experiment, metric__in=MEAN_COLUMNS, point__isnull=True, n_pairs=0
    )
    filled = []
    for estimate in empty:
        level = estimate.concurrency
        ratios = block_ratios(means[(baseline.id, level)], means[(estimate.arm_id, level)], estimate.metric)
        if ratios:
            estimate.point = intervals.block_interval(ratios).point
            estimate.block_ratios, estimate.n_repetitions = ratios, len(ratios)
            estimate.note, estimate.outcome = NOTE, POINT_ESTIMATE
            filled.append(estimate)
    SpeedupEstimate.objects.bulk_update(filled, ["point", "block_ratios", "n_repetitions", "note", "outcome"])
    by_sentence = defaultdict(list)
    for estimate in filled:
        by_sentence[(estimate.arm_id, str(estimate.metric))].append(estimate)
    for verdict in analysis.verdicts:
        estimates = by_sentence.get((verdict["arm_id"], verdict["metric"]))
        if estimates:
            verdict["text"] += _sentence(verdict["metric"], estimates)
    analysis.save(update_fields=["verdicts"])
    return filled
