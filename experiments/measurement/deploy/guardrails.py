"""Which guardrails a deploy decision gets, every number in them taken from its evidence.

A deploy decision rests on the blocks its evidence measured for one speculative arm. Its rules
(experiments/measurement/deploy/alert_rules.py) watch the service's vLLM servers:

- the acceptance rate (accepted / proposed draft tokens) below the lowest rate any block
  measured for any prompt category. A mix of the measured categories cannot fall below its
  lowest category's rate, so a rate below it means traffic unlike any measured category, or a
  server that is not running the measured arm;
- at each draft position, the unconditional acceptance (accepted at the position / drafts,
  vLLM's figure) below the lowest measured, for the same reasons;
- the running requests above the decision's concurrency, sustained: the decision says
  nothing about that load;
- the running requests above the break-even concurrency, sustained, where the evidence shows
  one (break_even.break_even's CROSSES for the decision's metric): there speculation was measured
  to stop paying.

A group is a category of the uploaded prompt set, or all the prompts where there were none.
A block's counts pool its runs at the levels up to the decision's concurrency, which the
decision covers. A figure whose lowest is 0 gets no rule: nothing falls below it. Thresholds
are rounded away from firing, so that no measured block would have fired: rates down to
0.001, concurrencies up to 0.1. Django-free: the review reads the rows
(experiments/review/guardrails.py).
"""

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import zip_longest

from experiments.measurement.deploy import alert_rules
from experiments.measurement.deploy.alert_rules import AlertRule, GaugeAbove, RatioBelow, Selector
from experiments.measurement.engine import vllm_metrics

ALL_PROMPTS = "all prompts"
# rate()'s window, and how long a condition must hold before it alerts: long enough that a
# quiet minute or a burst of one kind of request does not page anyone.
RATE_RANGE = "10m"
ACCEPTANCE_FOR = "15m"
CONCURRENCY_FOR = "10m"


@dataclass(frozen=True)
class Counts:
    """vLLM's speculative-decoding counters over some steps (docs/metrics.md, "Acceptance")."""

    drafts: int
    draft_tokens: int
    accepted: int
    # Drafts accepted at least up to each position; empty where it was not recorded.
    accepted_per_pos: tuple[int, ...] = ()

    @classmethod
    def of_steps(cls, accepted: Sequence[int], proposed: Sequence[int]) -> "Counts":
        """What vLLM's counters add for one request's steps: each step listed drafted something
        (a step that drafted nothing is not listed, nor counted as a draft), and the tokens it
        accepted are the first ones of its draft."""
        positions = range(max(proposed, default=0))
        per_pos = tuple(sum(n > i for n in accepted) for i in positions)
        return cls(len(accepted), sum(proposed), sum(accepted), per_pos)

    def __add__(self, other: "Counts") -> "Counts":
        pairs = zip_longest(self.accepted_per_pos, other.accepted_per_pos, fillvalue=0)
        return Counts(
            self.drafts + other.drafts,
            self.draft_tokens + other.draft_tokens,
            self.accepted + other.accepted,
            tuple(a + b for a, b in pairs),
        )

    def rate(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    def at_position(self, position: int) -> float | None:
        """Unconditional acceptance at `position`; 0 beyond the positions ever drafted."""
        if not self.drafts or not self.accepted_per_pos:
            return None
        per_pos = self.accepted_per_pos
        return (per_pos[position] if position < len(per_pos) else 0) / self.drafts


@dataclass(frozen=True)
class Measured:
    """One block of one evidence experiment, for one group of its prompts."""

    experiment: int
    arm: str
    block: int
    levels: tuple[int, ...]
    group: str
    counts: Counts


@dataclass(frozen=True)
class BreakEven:
    """Where one evidence experiment measured the arm's speedup fall to 1 (stats.BreakEven's
    CROSSES): the point estimate, and where the interval's bounds do."""

    experiment: int
    arm: str
    level: float
    lo: float | None
    hi: float | None


@dataclass(frozen=True)
class Deployment:
    """The decision the rules guard: deploy `arm` (k draft positions) up to `max_concurrency`."""

    decision: int
    service: str
    arm: str
    positions: int
    max_concurrency: int
    metric: str


@dataclass(frozen=True)
class Range:
    """The lowest and highest of a figure over one group's blocks."""

    group: str
    low: float
    high: float
    blocks: int


def ranges(measured: Iterable[Measured], figure: Callable[[Counts], float | None]) -> list[Range]:
    """Per group, in order, the range of `figure` over the blocks where it is defined."""
    values: defaultdict[str, list[float]] = defaultdict(list)
    for block in measured:
        value = figure(block.counts)
        if value is not None:
            values[block.group].append(value)
    return [Range(group, min(v), max(v), len(v)) for group, v in sorted(values.items())]


def floor_to(value: float, step: float) -> float:
    """`value` rounded down to a multiple of `step`, exact values kept (0.412 stays 0.412)."""
    return round(math.floor(round(value / step, 9)) * step, 9)


def ceil_to(value: float, step: float) -> float:
    return round(math.ceil(round(value / step, 9)) * step, 9)


def _percent(value: float) -> str:
    return f"{value:.1%}"


def _measured_text(found: Sequence[Range]) -> str:
    return "; ".join(f"{r.group}: {_percent(r.low)} to {_percent(r.high)} over {r.blocks} block(s)" for r in found)


def _list(numbers: Iterable[int]) -> str:
    return ", ".join(map(str, sorted(set(numbers))))


def sources(measured: Sequence[Measured]) -> str:
    """Where the figures come from: per experiment, the arm, its blocks and levels."""
    by_experiment: defaultdict[int, list[Measured]] = defaultdict(list)
    for block in measured:
        by_experiment[block.experiment].append(block)
    return "; ".join(
        f"experiment #{experiment}, arm “{blocks[0].arm}”, blocks {_list(b.block for b in blocks)} "
        f"at concurrency {_list(level for b in blocks for level in b.levels)}"
        for experiment, blocks in sorted(by_experiment.items())
    )


def _labels(deployment: Deployment, severity: str) -> dict[str, str]:
    return {"severity": severity, "service": deployment.service, "specdash_decision": str(deployment.decision)}


def _scoped(deployment: Deployment, metric: str, **matchers: str) -> Selector:
    """The metric on the service's servers: the scrape job named after the service."""
    return Selector(metric, (("job", deployment.service), *matchers.items()))


def lowest(found: Sequence[Range]) -> float:
    """A rule's threshold: the lowest of every group's range, rounded down; 0 without blocks.
    A threshold of 0 makes no rule: nothing falls below it."""
    return floor_to(min((r.low for r in found), default=0.0), 0.001)


def acceptance_rule(deployment: Deployment, measured: Sequence[Measured]) -> AlertRule | None:
    found = ranges(measured, Counts.rate)
    threshold = lowest(found)
    if threshold <= 0:
        return None
    condition = RatioBelow(
        _scoped(deployment, vllm_metrics.NUM_ACCEPTED_TOKENS),
        _scoped(deployment, vllm_metrics.NUM_DRAFT_TOKENS),
        threshold,
        RATE_RANGE,
    )
    annotations = {
        "summary": f"{deployment.service}: draft acceptance {{{{ $value | humanizePercentage }}}} on "
        f"{{{{ $labels.instance }}}}, below the lowest measured ({_percent(threshold)})",
        "description": f"Accepted / proposed draft tokens of {deployment.arm} over {RATE_RANGE} fell below the "
        "lowest rate any measured block had for any prompt category. A mix of the measured categories cannot "
        "fall below that: the traffic is unlike the measured prompts, or the server does not run the measured "
        f"arm. The speedup decision #{deployment.decision} rests on may not hold.",
        "measured": _measured_text(found),
        "source": sources(measured),
    }
    return AlertRule("SpeculativeAcceptanceLow", condition, ACCEPTANCE_FOR, _labels(deployment, "warning"), annotations)


def position_rule(deployment: Deployment, measured: Sequence[Measured], position: int) -> AlertRule | None:
    found = ranges(measured, lambda counts: counts.at_position(position))
    threshold = lowest(found)
    if threshold <= 0:
        return None
    condition = RatioBelow(
        _scoped(deployment, vllm_metrics.ACCEPTED_PER_POS, position=str(position)),
        _scoped(deployment, vllm_metrics.NUM_DRAFTS),
        threshold,
        RATE_RANGE,
    )
    annotations = {
        "summary": f"{deployment.service}: acceptance at draft position {position} "
        f"{{{{ $value | humanizePercentage }}}} on {{{{ $labels.instance }}}}, below the lowest measured "
        f"({_percent(threshold)})",
        "description": f"Drafts of {deployment.arm} accepted at least up to position {position} (0-based), per "
        f"draft, over {RATE_RANGE} (vLLM's unconditional per-position acceptance) fell below the lowest any "
        "measured block had for any prompt category: the traffic is unlike the measured prompts, or the "
        "proposer changed.",
        "measured": _measured_text(found),
        "source": sources(measured),
    }
    return AlertRule(
        f"SpeculativeAcceptanceLowAtPosition{position}",
        condition,
        ACCEPTANCE_FOR,
        _labels(deployment, "warning"),
        annotations,
    )


def concurrency_rule(deployment: Deployment) -> AlertRule:
    condition = GaugeAbove(_scoped(deployment, vllm_metrics.REQUESTS_RUNNING), float(deployment.max_concurrency))
    annotations = {
        "summary": f"{deployment.service}: {{{{ $value }}}} requests running on {{{{ $labels.instance }}}}, "
        f"above the concurrency decision #{deployment.decision} covers ({deployment.max_concurrency})",
        "description": f"Decision #{deployment.decision} deploys {deployment.arm} up to concurrency "
        f"{deployment.max_concurrency} per server. Above it the speedup was not part of the decision, and a "
        "gain measured at low concurrency often disappears as the batch grows.",
        "source": f"decision #{deployment.decision}: deploy {deployment.arm} up to concurrency "
        f"{deployment.max_concurrency}",
    }
    return AlertRule(
        "SpeculativeConcurrencyAboveDecision", condition, CONCURRENCY_FOR, _labels(deployment, "warning"), annotations
    )


def _break_even_text(value: BreakEven, metric: str) -> str:
    bounds = value.lo is not None and value.hi is not None
    interval = f" (its interval reaches 1 between {value.lo:.1f} and {value.hi:.1f})" if bounds else ""
    return (
        f"experiment #{value.experiment}, arm “{value.arm}”: the {metric} speedup falls to 1 at concurrency "
        f"{value.level:.1f}{interval}"
    )


def break_even_rule(deployment: Deployment, break_evens: Sequence[BreakEven]) -> AlertRule | None:
    if not break_evens:
        return None
    threshold = ceil_to(min(value.level for value in break_evens), 0.1)
    condition = GaugeAbove(_scoped(deployment, vllm_metrics.REQUESTS_RUNNING), threshold)
    annotations = {
        "summary": f"{deployment.service}: {{{{ $value }}}} requests running on {{{{ $labels.instance }}}}, "
        f"above the break-even concurrency of {deployment.arm} ({threshold:g})",
        "description": f"Above this concurrency the {deployment.metric} speedup of {deployment.arm} was measured "
        "to fall below 1: speculative decoding costs more than it saves here. Lower the load per server, or "
        "turn speculation off at this batch size.",
        "source": "; ".join(_break_even_text(value, deployment.metric) for value in break_evens),
    }
    return AlertRule(
        "SpeculativeConcurrencyAboveBreakEven", condition, CONCURRENCY_FOR, _labels(deployment, "critical"), annotations
    )


def guardrail_rules(
    deployment: Deployment, measured: Sequence[Measured], break_evens: Sequence[BreakEven]
) -> list[AlertRule]:
    """The decision's rules, in the order above; acceptance rules only where blocks measured it."""
    rules = [
        acceptance_rule(deployment, measured),
        *(position_rule(deployment, measured, position) for position in range(deployment.positions)),
        concurrency_rule(deployment),
        break_even_rule(deployment, break_evens),
    ]
    return [rule for rule in rules if rule is not None]


def group_name(deployment: Deployment) -> str:
    return f"specdash-decision-{deployment.decision}-{deployment.service}"


def header(deployment: Deployment) -> str:
    return (
        f"specdash guardrails of decision #{deployment.decision}: deploy {deployment.arm} for "
        f"{deployment.service} up to concurrency {deployment.max_concurrency}.\n"
        f'Load with Prometheus\' rule_files; the expressions select job="{deployment.service}" (edit the '
        "matcher to your scrape job).\n"
        "Check a live server: ./dev manage check_guardrails --rules FILE --metrics-url http://HOST:PORT/metrics"
    )


def rules_file(deployment: Deployment, measured: Sequence[Measured], break_evens: Sequence[BreakEven]) -> str:
    rules = guardrail_rules(deployment, measured, break_evens)
    return alert_rules.rules_yaml(group_name(deployment), rules, header(deployment))
