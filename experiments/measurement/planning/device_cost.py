"""Device-minutes (issue #23): what an experiment holds its accelerators for, counted as
scripts/orchestration_efficiency.py counts it, and what a plan is expected to cost.

A server holds its devices while it starts (launch to answering /health: Run.server_start_s,
on the first run of each server session) and while its runs run (each run from its claim to
its results stored: warm-up, measured requests, storing). Device-minutes are the sum of the
two, in minutes, times the GPUs each server spans (tensor parallel size). Stopping servers
and the gaps between runs are not counted: they are specdash's, not the measurement's.

A plan's estimate rests on its worker queue's recorded costs: the median start-up, and the
median seconds per *token step* of a run (a run's seconds over the decode steps it would take
if every request generated max_tokens, `concurrency` at a time), so that runs of other sizes
and levels inform it. experiments/analysis/device_time.py reads them; without records a stated
default stands in. Plain Python, no Django.
"""

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from experiments.measurement.planning.limits import Size
from experiments.measurement.planning.planner import SearchRange
from experiments.measurement.stats.sequential import FIRST_LOOK


@dataclass(frozen=True)
class Median:
    """A recorded median and how many records it rests on; with none, `value` is the default."""

    value: float
    count: int

    @property
    def recorded(self) -> bool:
        return self.count > 0


def median_or(samples: Sequence[float], default: float) -> Median:
    return Median(statistics.median(samples), len(samples)) if samples else Median(default, 0)


@dataclass(frozen=True)
class QueueCosts:
    """A worker queue's costs: seconds a server takes to start, seconds per token step of a run."""

    start: Median
    step: Median


def token_steps(size: Size, concurrency: int) -> float:
    """The decode steps of a run whose requests, warm-up included, all generate max_tokens,
    `concurrency` at a time (no more at a time than there are prompts)."""
    return (size.warmup + size.prompts) * size.max_tokens / max(1, min(concurrency, size.prompts))


def run_seconds(size: Size, concurrency: int, step_s: float) -> float:
    """A run's expected length: its token steps at `step_s` each, and under a request rate no
    less than its measured requests take to arrive."""
    arrivals = size.prompts / size.request_rate if size.request_rate else 0.0
    return max(token_steps(size, concurrency) * step_s, arrivals)


@dataclass(frozen=True)
class DeviceTime:
    """Seconds of server start-up and of runs, `starts` and `runs` of them, on servers that span
    `tensor_parallel_size` GPUs each."""

    start_s: float
    load_s: float
    tensor_parallel_size: int
    starts: int = 0
    runs: int = 0

    @property
    def start_minutes(self) -> float:
        return self.start_s * self.tensor_parallel_size / 60

    @property
    def load_minutes(self) -> float:
        return self.load_s * self.tensor_parallel_size / 60

    @property
    def minutes(self) -> float:
        return self.start_minutes + self.load_minutes


@dataclass(frozen=True)
class Spent:
    """What an experiment has used. `wall_clock_minutes` is set for one recorded before start-ups
    were (it has runs, and no start-up on any): its wall minutes since it started × GPUs per
    server, the count it had then, stand in for the total."""

    recorded: DeviceTime
    wall_clock_minutes: float | None = None

    @property
    def wall_clock(self) -> bool:
        return self.wall_clock_minutes is not None

    @property
    def minutes(self) -> float:
        return self.recorded.minutes if self.wall_clock_minutes is None else self.wall_clock_minutes


@dataclass(frozen=True)
class Plan:
    """An experiment's runs as its definition lays them out (workers/runner.py runs them so).

    `levels` run on every server of every block: the listed levels, or a break-even search's
    ends. `servers` counts a block's servers while the first blocks are queued at submission:
    the baseline, the A/A replicate, the speculative arms, the draft calibration arms and one
    per synthetic acceptance length; `added_servers` those of a block added later (the baseline,
    the replicate and the speculative arms). `per_run` of them start a server for every run
    (suffix decoding). `first_blocks` and `adds_blocks` are Experiment's."""

    size: Size
    levels: tuple[int, ...]
    servers: int
    added_servers: int
    per_run: int
    max_blocks: int
    first_blocks: int
    adds_blocks: bool
    server_per_block: bool
    tensor_parallel_size: int = 1
    search: SearchRange | None = None


# A block as the estimate counts it: its servers and the levels each of them runs.
Block = tuple[int, tuple[int, ...]]


def added_levels(plan: Plan) -> dict[int, int]:
    """{level: the first block it runs in} for the most a break-even search may add: the i-th
    level placed after block i while FIRST_LOOK blocks remain for its looks, up to the family's
    size (experiments/measurement/planning/planner.py), the costliest levels (the lowest concurrency
    inside the range) first."""
    if plan.search is None or not plan.adds_blocks:
        return {}
    inside = plan.search.grid()[1:-1][: max(0, plan.search.family_size - 2)]
    return {level: i + 1 for i, level in enumerate(inside, start=1) if plan.max_blocks - i >= FIRST_LOOK}


def plan_blocks(plan: Plan, *, most: bool) -> list[Block]:
    """The blocks the plan runs: at least, up to the first look with no level added; at most,
    every block, with every level its search may add."""
    count = plan.max_blocks if most or not plan.adds_blocks else min(FIRST_LOOK, plan.max_blocks)
    added = added_levels(plan) if most else {}
    return [
        (
            plan.servers if block <= plan.first_blocks else plan.added_servers,
            plan.levels + tuple(level for level, first in added.items() if first <= block),
        )
        for block in range(1, count + 1)
    ]


def server_starts(plan: Plan, blocks: Sequence[Block]) -> int:
    """A start per server and block (with one server per arm, per server in all), and one per
    run for the arms that get a fresh server for every run."""
    fresh = plan.per_run * sum(len(levels) for _, levels in blocks)
    if plan.server_per_block:
        return sum(servers - plan.per_run for servers, _ in blocks) + fresh
    return plan.servers - plan.per_run + fresh


def device_time(plan: Plan, costs: QueueCosts, blocks: Sequence[Block]) -> DeviceTime:
    load = sum(servers * sum(run_seconds(plan.size, c, costs.step.value) for c in levels) for servers, levels in blocks)
    starts = server_starts(plan, blocks)
    runs = sum(servers * len(levels) for servers, levels in blocks)
    return DeviceTime(starts * costs.start.value, load, plan.tensor_parallel_size, starts, runs)


@dataclass(frozen=True)
class Estimate:
    """The least a plan may cost (every cell settled at the first look, no level added) and the
    most (every block, every level); `cumulative` the most's device-minutes after each block."""

    least: DeviceTime
    most: DeviceTime
    least_blocks: int
    most_blocks: int
    cumulative: tuple[float, ...]

    @property
    def ranged(self) -> bool:
        return self.least != self.most

    def fits(self, budget: float) -> bool:
        return self.most.minutes <= budget

    def blocks_within(self, budget: float) -> int:
        """How many blocks of the most costly course the budget covers."""
        return sum(1 for minutes in self.cumulative if minutes <= budget)


def estimate(plan: Plan, costs: QueueCosts) -> Estimate:
    least, most = plan_blocks(plan, most=False), plan_blocks(plan, most=True)
    cumulative = tuple(device_time(plan, costs, most[:block]).minutes for block in range(1, len(most) + 1))
    return Estimate(device_time(plan, costs, least), device_time(plan, costs, most), len(least), len(most), cumulative)
