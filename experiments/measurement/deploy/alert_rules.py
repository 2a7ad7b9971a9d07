"""Prometheus alerting rules over vLLM's own metrics, in the two shapes the guardrails use
(experiments/measurement/deploy/guardrails.py). Each rule is one object that gives both its PromQL,
which production's Prometheus evaluates, and its evaluation on two readings of one server's
/metrics, which `./dev manage check_guardrails` makes: one copy of every expression.

- RatioBelow: `sum(rate(a[w])) / sum(rate(b[w])) < t`. Both rates span the same window, so
  the ratio equals what counter a added over what counter b added between two readings.
  Nothing added to b (no drafts) is no data: Prometheus divides by zero into NaN, which passes
  no comparison, so the alert stays silent, and the check says NO DATA.
- GaugeAbove: `sum(g) > t`, held for the rule's `for:` duration. The check reads the gauge at
  both ends of its window and takes the lower reading: above only if above at both.

Sums are `without (engine, position)`: over a server's engines (data parallel) and the
position a per-position selector fixes. Every other label (job, instance, model_name, a pod's)
is kept, so an alert names its server and the two sides of a ratio match.

A rules file (Prometheus' rule-group YAML) is written and read here. A rule whose expression
has neither shape is refused (RuleFileError): the check never evaluates anything but what the
file says. Label matchers other than `position` pick the servers in Prometheus; the check is
pointed at one server's /metrics and needs none of them; `window` reads its two readings.
Django-free.
"""

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import yaml

from experiments.measurement.engine import prom
from experiments.measurement.engine.vllm_metrics import (
    ACCEPTED_PER_POS,
    NUM_ACCEPTED_TOKENS,
    NUM_DRAFT_TOKENS,
    NUM_DRAFTS,
    REQUESTS_RUNNING,
)

SUM = "sum without (engine, position)"
POSITION = "position"
OK, FIRING, NO_DATA = "OK", "FIRING", "NO DATA"
# Prometheus durations (30s, 10m, 1h30m); the names and label names of its data model.
DURATION = re.compile(r"([0-9]+(ms|s|m|h|d|w|y))+")
METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"\\]*)"\s*')


class RuleFileError(ValueError):
    """A rules file whose content is not the rules this module writes."""


class Shape:
    """An expression's text with named holes: written with str.format, read back with a regex
    made from the same text, so that writing and reading cannot drift apart. A hole named
    twice must hold the same text both times."""

    def __init__(self, template: str) -> None:
        self.template = template
        pattern, seen = "", set()
        for literal, hole, _, _ in string.Formatter().parse(template):
            pattern += re.escape(literal)
            if hole:
                pattern += f"(?P={hole})" if hole in seen else f"(?P<{hole}>.+?)"
                seen.add(hole)
        self.pattern = re.compile(pattern)

    def write(self, **holes: str) -> str:
        return self.template.format(**holes)

    def read(self, text: str) -> dict[str, str] | None:
        """The holes' text, or None for an expression of another shape (spacing aside)."""
        match = self.pattern.fullmatch(" ".join(text.split()))
        return match.groupdict() if match else None


def number(value: float) -> str:
    """A threshold as PromQL reads it, exactly the float the check compares with."""
    text = repr(float(value))
    return text.removesuffix(".0")


def _threshold(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise RuleFileError(f"the threshold {text!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise RuleFileError(f"the threshold {text!r} is not a finite number")
    return value


def _duration(text: str, what: str) -> str:
    if not DURATION.fullmatch(text):
        raise RuleFileError(f"{what} {text!r} is not a Prometheus duration such as 10m")
    return text


@dataclass(frozen=True)
class Selector:
    """A metric with equality matchers, e.g. vllm:spec_decode_num_drafts_total{job="chat"}."""

    metric: str
    matchers: tuple[tuple[str, str], ...] = ()

    def promql(self) -> str:
        if not self.matchers:
            return self.metric
        return self.metric + "{" + ",".join(f'{name}="{value}"' for name, value in self.matchers) + "}"

    @property
    def key(self) -> tuple[str, int | None]:
        """The series the check reads: the metric, at the position its matchers fix if any."""
        position = dict(self.matchers).get(POSITION)
        return self.metric, None if position is None else int(position)

    @classmethod
    def read(cls, text: str) -> "Selector":
        name, brace, rest = text.partition("{")
        if not METRIC.fullmatch(name) or (brace and not rest.endswith("}")):
            raise RuleFileError(f"{text!r} is not a metric selector")
        matchers = tuple(_matcher(part, text) for part in rest[:-1].split(",") if part.strip()) if brace else ()
        if not dict(matchers).get(POSITION, "0").isdigit():
            raise RuleFileError(f"{text!r}: the position is not a number")
        return cls(name, matchers)


def _matcher(text: str, selector: str) -> tuple[str, str]:
    match = MATCHER.fullmatch(text)
    if match is None:
        raise RuleFileError(f'{selector!r}: only name="value" matchers are read')
    return match[1], match[2]


@dataclass(frozen=True)
class Window:
    """What one server's /metrics said at both ends of an interval: each counter's increase by
    (metric, position; None for a counter without one), summed over the other labels, and each
    gauge's two readings."""

    increases: Mapping[tuple[str, int | None], int]
    gauges: Mapping[str, tuple[float, float]]


def window(before: str, after: str) -> Window:
    """What a server did between two readings of its /metrics (read with the worker's parser,
    experiments/measurement/engine/prom.py): the speculative counters' increases, and the
    running requests at both readings. ValueError for a page without vLLM's metrics,
    prom.CounterReset when the server restarted in between."""
    running = (prom.parse_capacity(before).running, prom.parse_capacity(after).running)
    added = prom.diff(prom.parse_spec_counters(before), prom.parse_spec_counters(after))
    increases: dict[tuple[str, int | None], int] = {
        (NUM_DRAFTS, None): added.num_drafts,
        (NUM_DRAFT_TOKENS, None): added.num_draft_tokens,
        (NUM_ACCEPTED_TOKENS, None): added.num_accepted_tokens,
    }
    increases |= {(ACCEPTED_PER_POS, position): n for position, n in enumerate(added.accepted_per_pos)}
    return Window(increases, {REQUESTS_RUNNING: running})


@dataclass(frozen=True)
class RatioBelow:
    """What one counter added over what another added, in the same window, below a threshold."""

    numerator: Selector
    denominator: Selector
    threshold: float
    range: str

    OPERATOR: ClassVar[str] = "<"
    SHAPE: ClassVar[Shape] = Shape(
        f"{SUM} (rate({{numerator}}[{{range}}])) / {SUM} (rate({{denominator}}[{{range}}])) {OPERATOR} {{threshold}}"
    )

    def promql(self) -> str:
        return self.SHAPE.write(
            numerator=self.numerator.promql(),
            denominator=self.denominator.promql(),
            range=self.range,
            threshold=number(self.threshold),
        )

    @classmethod
    def read(cls, holes: Mapping[str, str]) -> "RatioBelow":
        return cls(
            Selector.read(holes["numerator"]),
            Selector.read(holes["denominator"]),
            _threshold(holes["threshold"]),
            _duration(holes["range"], "the rate window"),
        )

    def value(self, window: Window) -> float | None:
        below = window.increases.get(self.denominator.key)
        above = window.increases.get(self.numerator.key)
        return None if not below or above is None else above / below

    def fires(self, value: float) -> bool:
        return value < self.threshold


@dataclass(frozen=True)
class GaugeAbove:
    """A gauge above a threshold (for as long as the rule's `for:` says)."""

    gauge: Selector
    threshold: float

    OPERATOR: ClassVar[str] = ">"
    SHAPE: ClassVar[Shape] = Shape(f"{SUM} ({{gauge}}) {OPERATOR} {{threshold}}")

    def promql(self) -> str:
        return self.SHAPE.write(gauge=self.gauge.promql(), threshold=number(self.threshold))

    @classmethod
    def read(cls, holes: Mapping[str, str]) -> "GaugeAbove":
        return cls(Selector.read(holes["gauge"]), _threshold(holes["threshold"]))

    def value(self, window: Window) -> float | None:
        readings = window.gauges.get(self.gauge.metric)
        return None if readings is None else min(readings)

    def fires(self, value: float) -> bool:
        return value > self.threshold


Condition = RatioBelow | GaugeAbove
SHAPES: tuple[type[RatioBelow] | type[GaugeAbove], ...] = (RatioBelow, GaugeAbove)


@dataclass(frozen=True)
class Check:
    """One rule evaluated on a window: the live value (None: no data) and its state."""

    rule: "AlertRule"
    value: float | None
    state: str


@dataclass(frozen=True)
class AlertRule:
    """One alerting rule as Prometheus loads it."""

    alert: str
    condition: Condition
    for_: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]

    def as_yaml(self) -> dict[str, object]:
        return {
            "alert": self.alert,
            "expr": self.condition.promql(),
            "for": self.for_,
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
        }

    def check(self, window: Window) -> Check:
        value = self.condition.value(window)
        if value is None:
            return Check(self, None, NO_DATA)
        return Check(self, value, FIRING if self.condition.fires(value) else OK)


def rules_yaml(group: str, rules: Sequence[AlertRule], header: str) -> str:
    """The rule-group file Prometheus loads (rule_files), `header` as its opening comment."""
    document = {"groups": [{"name": group, "rules": [rule.as_yaml() for rule in rules]}]}
    comment = "".join(f"# {line}\n".replace("# \n", "#\n") for line in header.splitlines())
    return comment + yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=1_000_000)


def read_rules(text: str) -> list[AlertRule]:
    """The alerting rules of a rules file; RuleFileError, in one line, for anything else."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise RuleFileError(f"not YAML: {' '.join(str(error).split())}") from None
    groups = document.get("groups") if isinstance(document, dict) else None
    if not isinstance(groups, list) or not groups:
        raise RuleFileError("no rule groups: a rules file has `groups:`, each with `rules:`")
    return [_rule(entry) for group in groups for entry in _entries(group)]


def _entries(group: object) -> list[object]:
    rules = group.get("rules") if isinstance(group, dict) else None
    if not isinstance(rules, list):
        raise RuleFileError("a group without `rules:`")
    return rules


def _strings(entry: dict[object, object], key: str) -> dict[str, str]:
    value = entry.get(key) or {}
    if not isinstance(value, dict):
        raise RuleFileError(f"rule {entry.get('alert')!r}: its {key} are not a mapping")
    return {str(name): str(text) for name, text in value.items()}


def _rule(entry: object) -> AlertRule:
    if not isinstance(entry, dict) or not isinstance(entry.get("alert"), str) or "expr" not in entry:
        raise RuleFileError(f"not an alerting rule with `alert:` and `expr:`: {entry!r}")
    alert, expr = entry["alert"], str(entry["expr"])
    for shape in SHAPES:
        holes = shape.SHAPE.read(expr)
        if holes is not None:
            try:
                condition = shape.read(holes)
            except RuleFileError as error:
                raise RuleFileError(f"rule {alert!r}: {error}") from None
            for_ = _duration(str(entry.get("for", "0s")), f"rule {alert!r}: for:")
            return AlertRule(alert, condition, for_, _strings(entry, "labels"), _strings(entry, "annotations"))
    raise RuleFileError(f"rule {alert!r}: the expression has none of the shapes specdash writes: {expr}")
