"""What acceptance an arm would need: its synthetic acceptance sweep, read against the baseline.

An arm with a sweep also runs, at each swept mean acceptance length τ, on a server whose
vLLM accepts each draft position at random at the rate that gives that τ
(Arm.synthetic_config): the proposer and the target's verification pass still run, so the
run costs what the arm costs, only the acceptance is set. Per level, the speedup of each
such run over the baseline (output throughput, same level, same block) against τ shows how
much acceptance the arm needs to pay off there. Definitions are on the page and in
docs/metrics.md.

These runs are never the arm's measurements: RunSummary.objects.succeeded_of and
RequestRecord.objects.succeeded_of leave them out of every statistic, verdict and step
accounting; this module is the only reader of their summaries.
"""

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from experiments.measurement.engine.steps import geometric_mean
from experiments.measurement.stats import acceptance
from experiments.models import Arm, Experiment, Run, RunSummary

BETWEEN = "between"  # interpolated between two swept lengths
AT_OR_BELOW = "at_or_below"  # the lowest swept length already breaks even
BEYOND = "beyond"  # no swept length breaks even
NO_POINTS = "none"  # no level had both a synthetic run and the baseline


@dataclass(frozen=True)
class SweepPoint:
    """One swept length at one level: the geometric mean over `blocks` of the block ratios
    synthetic output throughput / baseline output throughput, and the τ vLLM reported for
    the synthetic runs (accepted draft tokens and drafts summed over the blocks)."""

    length: float
    speedup: float
    blocks: int
    measured_tau: float | None


@dataclass(frozen=True)
class BreakEven:
    """The acceptance length at which the speedup reaches 1, and how it was found."""

    state: str
    length: float | None = None


def break_even(points: Sequence[SweepPoint]) -> BreakEven:
    """The smallest τ at which the speedup, interpolated linearly between consecutive swept
    lengths, reaches 1. A sweep that is not monotone (noise, or a cost that changes with τ)
    gives its first crossing from below; nothing is extrapolated past the swept range."""
    ordered = sorted(points, key=lambda point: point.length)
    if not ordered:
        return BreakEven(NO_POINTS)
    if ordered[0].speedup >= 1:
        return BreakEven(AT_OR_BELOW, ordered[0].length)
    for low, high in itertools.pairwise(ordered):
        if low.speedup < 1 <= high.speedup:
            share = (1 - low.speedup) / (high.speedup - low.speedup)
            return BreakEven(BETWEEN, low.length + share * (high.length - low.length))
    return BreakEven(BEYOND)


@dataclass(frozen=True)
class LevelSweep:
    level: int
    points: list[SweepPoint]
    break_even: BreakEven


@dataclass(frozen=True)
class ArmSweep:
    """One arm's sweep: its real τ (from its real runs, all levels pooled) beside the levels."""

    arm_id: int
    label: str
    k: int
    tau: float | None
    lengths: list[float]
    levels: list[LevelSweep]
    runs: int
    servers: int
    failed_runs: int
    first_error: str

    @property
    def sentence(self) -> str:
        return sweep_sentence(self)

    def as_json(self) -> dict:
        return {
            "arm": self.arm_id,
            "label": self.label,
            "tau": self.tau,
            "lengths": self.lengths,
            "levels": [
                {
                    "level": row.level,
                    "points": [{"x": p.length, "y": p.speedup} for p in row.points],
                    "break_even": row.break_even.length if row.break_even.state == BETWEEN else None,
                }
                for row in self.levels
            ],
        }


def _requests(level: int) -> str:
    return f"{level} concurrent request{'' if level == 1 else 's'}"


def _level_clause(row: LevelSweep, top: float) -> str:
    found = row.break_even
    if found.state == BETWEEN:
        return f"at {_requests(row.level)} it would need {found.length:.2f}"
    if found.state == AT_OR_BELOW:
        return f"at {_requests(row.level)} it pays off already at {found.length:g}, the lowest length swept"
    if found.state == BEYOND:
        return f"at {_requests(row.level)} it would need more than {top:g}, beyond the swept range"
    return f"at {_requests(row.level)} no synthetic run could be compared with the baseline"


def sweep_sentence(sweep: ArmSweep) -> str:
    """E.g. "Your draft gives τ 2.40; at 16 concurrent requests it would need 3.10."."""
    tau = "no measured τ (no real run drafted)" if sweep.tau is None else f"τ {sweep.tau:.2f}"
    clauses = "; ".join(_level_clause(row, max(sweep.lengths)) for row in sweep.levels)
    return f"{sweep.label}: your draft gives {tau}; {clauses}."


# ---------------------------------------------------------------- reading the runs


def sweep_points(
    baseline: dict[tuple[int, int], float], synthetic: dict[tuple[float, int, int], tuple[float, int, int]]
) -> dict[int, list[SweepPoint]]:
    """Per level, the swept lengths in order. `baseline`: {(level, block): output throughput};
    `synthetic`: {(length, level, block): (output throughput, drafts, accepted)}. Only blocks
    in which both ran count; a length without such a block has no point."""
    cells = defaultdict(list)
    for (length, level, block), figures in synthetic.items():
        base = baseline.get((level, block))
        if base and figures[0] > 0:
            cells[(length, level)].append((figures[0] / base, figures[1], figures[2]))
    levels = defaultdict(list)
    for (length, level), blocks in sorted(cells.items()):
        drafts, accepted = sum(b[1] for b in blocks), sum(b[2] for b in blocks)
        speedup = geometric_mean([b[0] for b in blocks])
        levels[level].append(SweepPoint(length, speedup, len(blocks), acceptance.acceptance_length(accepted, drafts)))
    return dict(levels)


def _real_tau(experiment: Experiment, arm: Arm) -> float | None:
    drafts = accepted = 0
    for s in RunSummary.objects.succeeded_of(experiment).filter(run__arm=arm):
        drafts += s.spec_num_drafts or 0
        accepted += s.spec_num_accepted_tokens or 0
    return acceptance.acceptance_length(accepted, drafts)


def _baseline(experiment: Experiment) -> dict[tuple[int, int], float]:
    summaries = RunSummary.objects.succeeded_of(experiment).filter(
        run__arm__method=Arm.Method.BASELINE, run__arm__is_replicate=False
    )
    return {
        (s.run.concurrency, s.run.repetition): s.output_throughput
        for s in summaries.select_related("run", "run__arm")
        if s.run.arm.is_baseline
    }


def _synthetic(experiment: Experiment, arm: Arm) -> dict[tuple[float, int, int], tuple[float, int, int]]:
    summaries = RunSummary.objects.synthetic_sweep_of(experiment).filter(run__arm=arm).select_related("run")
    # synthetic_sweep_of reads only runs with a synthetic acceptance length.
    return {
        (cast(float, s.run.synthetic_acceptance_length), s.run.concurrency, s.run.repetition): (
            s.output_throughput,
            s.spec_num_drafts or 0,
            s.spec_num_accepted_tokens or 0,
        )
        for s in summaries
    }


def arm_sweep(experiment: Experiment, arm: Arm, baseline: dict[tuple[int, int], float]) -> ArmSweep:
    points = sweep_points(baseline, _synthetic(experiment, arm))
    runs = Run.objects.synthetic().filter(arm=arm)
    failed = runs.filter(status=Run.Status.FAILED).order_by("id")
    first = failed.first()
    blocks = experiment.repetitions if experiment.server_per_block else 1
    # Only a speculative arm takes a sweep, and arm_k_matches_method gives every such arm a k.
    assert arm.num_speculative_tokens is not None, f"arm {arm.id} has a synthetic sweep but no k"
    return ArmSweep(
        arm_id=arm.id,
        label=arm.label,
        k=arm.num_speculative_tokens,
        tau=_real_tau(experiment, arm),
        lengths=list(arm.synthetic_sweep),
        levels=[
            LevelSweep(level, points.get(level, []), break_even(points.get(level, [])))
            for level in sorted(experiment.concurrency_levels)
        ],
        runs=runs.count(),
        servers=len(arm.synthetic_sweep) * blocks,
        failed_runs=failed.count(),
        first_error=first.error.split("\n\n")[0] if first else "",
    )


def acceptance_sweeps(*, experiment: Experiment) -> list[ArmSweep]:
    """Every arm's sweep, in arm order; [] when no arm asked for one."""
    arms = [arm for arm in experiment.arms.order_by("position") if arm.synthetic_sweep]
    if not arms:
        return []
    baseline = _baseline(experiment)
    return [arm_sweep(experiment, arm, baseline) for arm in arms]
