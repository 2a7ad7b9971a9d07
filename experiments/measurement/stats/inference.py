"""From recorded runs to speedups with intervals, verdicts, break-even and output fidelity.

Django-free: experiments/analysis/loader.py reads the runs from PostgreSQL into RunData, and
experiments/analysis/services.py calls `speedup_cells`, `break_evens` and `fidelity_cells`;
scripts/check_verdicts.py feeds the same functions simulated runs with known effects. One code
path, so the simulation checks what the page shows.

The unit of inference is the block (docs/verdicts.md): at each level, the arm's run and
the baseline's run of the same block give one ratio (per-request values paired by prompt
for latencies, one value per run for throughputs), and the interval comes from the
spread of those ratios between blocks. TPOT has two estimands (docs/metrics.md): the
verdict's pools decode time over decode tokens, the per-request one is the ratio of mean
TPOTs; the page shows the second where the two differ by more than the margin.
"""

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from experiments.measurement.stats import break_even, intervals, latency, output_fidelity, verdicts

LATENCY_METRICS = ("server_tpot", "tpot", "e2e", "ttft")
# Timed at the client from the first chunk on: only as good as the stream
# (experiments/measurement/engine/stream_fidelity.py).
# E2E ends at the last token whenever it arrives, so a late or merged chunk does not move it.
STREAM_TIMED_METRICS = ("tpot", "ttft")
THROUGHPUT_METRICS = ("output_throughput", "request_throughput", "goodput")
# A tail of a latency's distribution over a run's requests: (the latency, the quantile). Its block
# ratio is the baseline run's quantile over the arm's, over the prompts both answered.
TAIL_METRICS = {"e2e_p95": ("e2e", 0.95)}
# Counts per second that a fixed arrival rate sets for both sides alike (goodput is not one:
# it counts the requests within the SLOs).
RATE_SET_METRICS = ("output_throughput", "request_throughput")
# Per-token metrics: their block ratio pools decode time over decode tokens (intervals.pooled_per_token_ratio).
POOLED_METRICS = ("server_tpot", "tpot")
FIDELITY_WARN_P = 0.01


@dataclass(frozen=True)
class RunData:
    """One succeeded run as the statistics see it.

    `latencies[metric][prompt_index]` holds the successful requests' values (None where a
    request has none, e.g. TPOT of a one-token output); `throughputs[metric]` the run's
    value; `failed` its failed requests; `outputs[prompt_index]` the output token ids of
    its successful requests, where recorded. `stream_flagged`: too many of its requests'
    streams were distorted for the client's TTFT and TPOT to be called (RunSummary.stream_flagged).
    `output_tokens[prompt_index]`: the successful requests' output tokens, which weigh their
    TPOT in the pooled estimand; `requests`: the measured requests it sent, succeeded and
    failed, against which its failures are a rate.
    """

    arm: int
    level: int
    block: int
    latencies: Mapping[str, Mapping[int, float | None]] = field(default_factory=dict)
    throughputs: Mapping[str, float | None] = field(default_factory=dict)
    failed: int = 0
    outputs: Mapping[int, Sequence[int]] = field(default_factory=dict)
    stream_flagged: bool = False
    output_tokens: Mapping[int, int] = field(default_factory=dict)
    requests: int = 0


@dataclass(frozen=True)
class CellResult:
    """The speedup of one arm over the baseline at one level for one metric.

    `estimate` is the verdict's estimand; for TPOT (POOLED_METRICS) `per_request` is the
    other one, the ratio of mean TPOTs, over the same blocks (None for other metrics).
    """

    arm: int
    level: int
    metric: str
    estimate: intervals.RatioEstimate
    outcome: str
    failed_baseline: int
    failed_arm: int
    n_pairs: int  # requests paired by prompt over the blocks (0 for throughputs)
    per_request: intervals.RatioEstimate | None = None

    def estimands_differ(self, margin: float) -> bool:
        """Whether the per-request TPOT speedup lies further than the margin from the pooled
        one, either way (a ratio of the two points beyond 1 + margin)."""
        if self.per_request is None or self.per_request.point is None or self.estimate.point is None:
            return False
        ratio = self.per_request.point / self.estimate.point
        return max(ratio, 1 / ratio) > 1 + margin


def _by_cell(runs: Sequence[RunData]) -> dict[tuple[int, int], dict[int, RunData]]:
    """{(arm, level): {block: run}}."""
    cells: dict[tuple[int, int], dict[int, RunData]] = defaultdict(dict)
    for run in runs:
        cells[(run.arm, run.level)][run.block] = run
    return cells


def _block_ratio(metric: str, base: RunData, arm: RunData, *, per_request: bool = False) -> tuple[float | None, int]:
    """The verdict's block ratio, or with `per_request` a TPOT's ratio of mean TPOTs."""
    if metric in THROUGHPUT_METRICS:
        return intervals.run_ratio(base.throughputs.get(metric), arm.throughputs.get(metric)), 0  # arm / baseline
    if metric in TAIL_METRICS:
        source, quantile = TAIL_METRICS[metric]
        return _tail_ratio(base.latencies.get(source, {}), arm.latencies.get(source, {}), quantile)
    values = base.latencies.get(metric, {}), arm.latencies.get(metric, {})
    if metric in POOLED_METRICS and not per_request:
        return intervals.pooled_per_token_ratio(
            *values, baseline_tokens=base.output_tokens, arm_tokens=arm.output_tokens
        )
    return intervals.ratio_of_means(*values)


def _tail_ratio(
    baseline: Mapping[int, float | None], arm: Mapping[int, float | None], quantile: float
) -> tuple[float | None, int]:
    """One block's speedup of a latency's tail: the baseline's quantile over the arm's, over the
    prompts both sides have a value for (the tails of the same requests), and the number of pairs."""
    pairs = [(baseline[k], arm[k]) for k in sorted(baseline.keys() & arm.keys())]
    known = [(b, a) for b, a in pairs if b is not None and a is not None]
    base_tail = latency.percentile((b for b, _ in known), 100 * quantile)
    arm_tail = latency.percentile((a for _, a in known), 100 * quantile)
    if base_tail is None or arm_tail is None:
        return None, 0
    return intervals.run_ratio(base_tail, arm_tail, higher_is_better=False), len(known)


def _cell(
    metric: str, base_runs: dict[int, RunData], arm_runs: dict[int, RunData], *, per_request: bool = False
) -> tuple[intervals.RatioEstimate, int]:
    """The estimate over the blocks both sides ran in, and the number of paired requests."""
    ratios, pairs, skipped = [], 0, 0
    for block in sorted(base_runs.keys() & arm_runs.keys()):
        ratio, n = _block_ratio(metric, base_runs[block], arm_runs[block], per_request=per_request)
        pairs += n
        if ratio is None:
            skipped += 1
        else:
            ratios.append(ratio)
    estimate = intervals.block_interval(ratios)
    if skipped:
        note = f"{skipped} block(s) without a ratio (no pairs or a zero value)"
        estimate = replace(estimate, note=note)
    return estimate, pairs


def speedup_cells(
    runs: Sequence[RunData],
    *,
    baseline: int,
    arms: Sequence[int],
    levels: Sequence[int],
    margin: float,
    metrics: Sequence[str] = LATENCY_METRICS + THROUGHPUT_METRICS,
    fixed_arrival_rate: bool = False,
) -> list[CellResult]:
    """Every (arm, level, metric) compared with the baseline, in that order."""
    cells = _by_cell(runs)
    results = []
    for arm in arms:
        for level in sorted(levels):
            base_runs, arm_runs = cells.get((baseline, level), {}), cells.get((arm, level), {})
            common = base_runs.keys() & arm_runs.keys()
            failed_base = sum(base_runs[b].failed for b in common)
            failed_arm = sum(arm_runs[b].failed for b in common)
            sent_base = sum(base_runs[b].requests for b in common)
            sent_arm = sum(arm_runs[b].requests for b in common)
            flagged = any(base_runs[b].stream_flagged or arm_runs[b].stream_flagged for b in common)
            for metric in metrics:
                estimate, pairs = _cell(metric, base_runs, arm_runs)
                outcome = verdicts.classify(
                    estimate,
                    margin=margin,
                    failed_baseline=failed_base,
                    failed_arm=failed_arm,
                    requests_baseline=sent_base,
                    requests_arm=sent_arm,
                    applicable=not (fixed_arrival_rate and metric in RATE_SET_METRICS),
                    stream_faithful=not (flagged and metric in STREAM_TIMED_METRICS),
                )
                per_request = None
                if metric in POOLED_METRICS:
                    per_request, _ = _cell(metric, base_runs, arm_runs, per_request=True)
                results.append(
                    CellResult(arm, level, metric, estimate, outcome, failed_base, failed_arm, pairs, per_request)
                )
    return results


def break_evens(cells: Sequence[CellResult]) -> dict[tuple[int, str], break_even.BreakEven]:
    """{(arm, metric): break-even} over the levels of each arm and metric, from the levels'
    verdicts: a level without one (too few blocks, failures differ, …) is open."""
    rows: dict[tuple[int, str], list[break_even.LevelCall]] = defaultdict(list)
    for cell in cells:
        faster, slower = cell.outcome == verdicts.FASTER, cell.outcome == verdicts.SLOWER
        rows[(cell.arm, cell.metric)].append(break_even.LevelCall(cell.level, cell.estimate, faster, slower))
    return {key: break_even.break_even(level_rows) for key, level_rows in rows.items()}


# ---------------------------------------------------------------- output fidelity


@dataclass(frozen=True)
class FidelityCell:
    """How often an arm's output equals the baseline's for the same prompt in the same block.

    `compared` and `identical` count outputs (prompt × block); `prompts` counts the prompts
    compared in at least one block and `prompts_differing` those whose output differed from
    the baseline's in at least one of them. The prompt is the unit of the test: a prompt whose
    output is fragile under batch-dependent numerics differs in every block or in none, so its
    blocks are not independent samples. `divergence_at` lists, for the outputs that differ,
    the index of the first differing token; `p_more_than_replicate` is the one-sided Fisher
    p-value, on prompts, that the arm's differ more often than the A/A replicate's (None for
    the replicate itself or without one).
    """

    arm: int
    level: int
    compared: int
    identical: int
    prompts: int
    prompts_differing: int
    divergence_at: tuple[int, ...]
    p_more_than_replicate: float | None = None

    @property
    def identical_share(self) -> float | None:
        return self.identical / self.compared if self.compared else None

    @property
    def median_divergence(self) -> float | None:
        return statistics.median(self.divergence_at) if self.divergence_at else None

    @property
    def warn(self) -> bool:
        return self.p_more_than_replicate is not None and self.p_more_than_replicate < FIDELITY_WARN_P


@dataclass
class _Comparison:
    """Outputs of one side compared with the baseline's at one level."""

    compared: int = 0
    identical: int = 0
    divergence: list[int] = field(default_factory=list)
    prompts: set[int] = field(default_factory=set)
    differing: set[int] = field(default_factory=set)

    def diverges_more(self, reference: "_Comparison") -> float | None:
        """The test on prompts (output_fidelity.diverges_more) against the replicate's comparison."""
        return output_fidelity.diverges_more(
            len(self.differing), len(self.prompts), len(reference.differing), len(reference.prompts)
        )

    def cell(self, arm: int, level: int, p: float | None) -> FidelityCell:
        counts = (self.compared, self.identical, len(self.prompts), len(self.differing))
        return FidelityCell(arm, level, *counts, tuple(self.divergence), p)


def _compare_outputs(base_runs: dict[int, RunData], arm_runs: dict[int, RunData]) -> _Comparison:
    result = _Comparison()
    for block in sorted(base_runs.keys() & arm_runs.keys()):
        base_outputs, arm_outputs = base_runs[block].outputs, arm_runs[block].outputs
        for prompt in sorted(base_outputs.keys() & arm_outputs.keys()):
            at = output_fidelity.first_divergence(base_outputs[prompt], arm_outputs[prompt])
            result.compared += 1
            result.prompts.add(prompt)
            if at is None:
                result.identical += 1
            else:
                result.divergence.append(at)
                result.differing.add(prompt)
    return result


def fidelity_cells(
    runs: Sequence[RunData], *, baseline: int, arms: Sequence[int], levels: Sequence[int], replicate: int | None
) -> list[FidelityCell]:
    """Per arm (the replicate included) and level, outputs compared with the baseline's.

    Meaningful at temperature 0 only: the caller decides. Speculative decoding is lossless
    up to the precision of the hardware's numerics (vLLM's wording), so even at temperature 0
    a few outputs may differ through batch-dependent numerics; the replicate, run exactly like
    the baseline, shows how often that happens without speculation. An arm whose prompts
    differ clearly more often than the replicate's (Fisher's exact test on prompts, p <
    FIDELITY_WARN_P) is flagged.
    """
    cells = _by_cell(runs)
    results = []
    for level in sorted(levels):
        base_runs = cells.get((baseline, level), {})
        # Without a replicate (or its runs) nothing is compared, and diverges_more gives None.
        # (None, level) finds no cell; the stubs give dict.get's key the dict's key type, which get does not need.
        replicate_runs = cells.get((replicate, level), {})  # type: ignore[arg-type]
        reference = _compare_outputs(base_runs, replicate_runs)
        for arm in arms:
            own = _compare_outputs(base_runs, cells.get((arm, level), {}))
            results.append(own.cell(arm, level, own.diverges_more(reference) if arm != replicate else None))
    return results


# ---------------------------------------------------------------- block ratios by block


def block_ratios(runs: Sequence[RunData], metric: str, *, baseline: int, arm: int, level: int) -> dict[int, float]:
    """{block: the arm's ratio over the baseline in that block} at one level for one metric,
    over the blocks both ran in and that have a ratio (experiments/measurement/stats/question.py
    replays the looks of a sequential design over them in block order)."""
    cells = _by_cell(runs)
    base_runs, arm_runs = cells.get((baseline, level), {}), cells.get((arm, level), {})
    ratios = {}
    for block in sorted(base_runs.keys() & arm_runs.keys()):
        ratio, _ = _block_ratio(metric, base_runs[block], arm_runs[block])
        if ratio is not None:
            ratios[block] = ratio
    return ratios


def block_ratios_over(
    runs: Sequence[RunData], metric: str, *, references: Sequence[int], arm: int, level: int
) -> dict[int, float]:
    """{block: the arm's ratio over the references'} where the first reference (the baseline) has a
    ratio: the geometric mean of the arm's ratios over each reference that ran in the block. With
    the A/A replicate beside the baseline, the two runs of the baseline's configuration halve the
    baseline's share of every block's spread (experiments/measurement/stats/block_decisions.py)."""
    over = [block_ratios(runs, metric, baseline=reference, arm=arm, level=level) for reference in references]
    result = {}
    for block, ratio in over[0].items():
        logs = [math.log(ratio)] + [math.log(other[block]) for other in over[1:] if block in other]
        result[block] = math.exp(math.fsum(logs) / len(logs))
    return result
