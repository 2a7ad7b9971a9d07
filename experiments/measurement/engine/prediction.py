"""Leviathan et al.'s predicted speedup as a test of the model, not a fit.

The formula E / (γc + 1) needs the tokens a step yields (E) and what a draft step costs in
target steps (c). Both are measured here apart from the speedup it is compared with: E from
the arm's own acceptance by position at the level, c from a calibration arm that served the
draft model alone, with plain decoding, at the same level and workload:
c = the draft's step time / the baseline's step time (experiments/measurement/engine/steps.py), per block, the
geometric mean over blocks, with its t-interval over them. Where c was not measured there is
no prediction: a c fitted to the measured speedup would make the prediction equal the
measurement by construction. c's interval gives the prediction's, and the test compares the two
intervals (`agreement`).

Django-free; experiments/analysis/series.py reads the rows and stores `predicted` in the analysis'
series. Definitions: docs/metrics.md ("Predicted speedup") and the page.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from experiments.measurement.engine import steps
from experiments.measurement.stats import acceptance

DRAFT_MODEL = "draft_model"
PROFILED = " (a profiled interval shows the share of its step spent proposing)"
# Why c is not measured, by method; a draft-model arm's reason depends on its calibration.
UNMEASURED = {
    "ngram": "not measured: n-gram lookup proposes from the prompt, with no model to serve alone",
    "ngram_gpu": "not measured: n-gram lookup on the GPU proposes from the prompt, with no model to serve alone",
    "suffix": "not measured: suffix decoding proposes from a cache, with no model to serve alone",
    "eagle": f"not measured: an EAGLE head runs inside the target's server and cannot be served alone{PROFILED}",
    "eagle3": f"not measured: an EAGLE-3 head runs inside the target's server and cannot be served alone{PROFILED}",
    "mtp": f"not measured: MTP layers run inside the target's server and cannot be served alone{PROFILED}",
}
NO_CALIBRATION = "not measured: no calibration arm (the experiment's “Measure the draft model's cost” was off)"
NO_CALIBRATION_AT_LEVEL = "not measured at this level: the calibration arm recorded no decode steps here"
MEASURED = "measured at this level by the calibration arm"


@dataclass(frozen=True)
class SpeculativeArm:
    id: int
    label: str
    method: str
    gamma: int
    draft_model: str | None  # params["model"] of a draft-model arm


@dataclass(frozen=True)
class Counters:
    """One arm's speculative counters at one level, summed over its blocks."""

    drafts: int
    accepted_per_pos: Sequence[int]


@dataclass(frozen=True)
class Interval:
    point: float | None
    lo: float | None = None
    hi: float | None = None

    @property
    def has_interval(self) -> bool:
        return self.lo is not None and self.hi is not None

    @property
    def bounds(self) -> tuple[float, float]:
        """lo and hi of an interval that has them."""
        assert self.lo is not None, "no interval"
        assert self.hi is not None, "no interval"
        return self.lo, self.hi


def expected_tokens_per_step(conditional: Sequence[float | None]) -> float:
    """Tokens a verify step yields on average, from the conditional acceptance by position.

    Position i's draft is accepted with probability a_0 · a_1 · … · a_i (each conditional on
    the ones before it), and the step always adds one token (bonus or corrected), so the
    expected yield is 1 + Σ_i Π_(j ≤ i) a_j. Exact for any per-position rates: no per-token
    rate alpha shared by the positions is assumed. A None rate (the previous position never
    accepted) ends the sum: no later position was accepted either.
    """
    total, reach = 1.0, 1.0
    for rate in conditional:
        if rate is None:
            break
        if not 0 <= rate <= 1:
            raise ValueError(f"an acceptance rate must be in [0, 1], got {rate}")
        reach *= rate
        total += reach
    return total


def predicted_speedup(tokens_per_step: float, gamma: int, c: float) -> float:
    """Leviathan et al.'s walltime improvement: E / (γc + 1).

    A step drafts γ tokens at c target steps each, then verifies them in one target step,
    and yields E tokens (expected_tokens_per_step); plain decoding yields one per target
    step. With a per-token rate alpha, E = (1 − α^(γ+1)) / (1 − α), their formula.
    """
    if gamma < 1:
        raise ValueError("gamma (draft length) must be at least 1")
    if c < 0:
        raise ValueError(f"cost ratio c must be >= 0, got {c}")
    if tokens_per_step < 1:
        raise ValueError(f"a step yields at least one token, got {tokens_per_step}")
    return tokens_per_step / (gamma * c + 1)


AGREE = "agree"
PART = "part"
NOT_TESTABLE = "not testable"


def agreement(predicted: Interval | None, measured: Interval | None) -> str | None:
    """The test of the prediction, both sides with their intervals (the prediction's from c's):
    - None without a prediction, or where either side has no interval (one block of c or of
      the measurement): a point without its uncertainty cannot be tested;
    - PART when the two intervals do not overlap;
    - NOT_TESTABLE when they do and the measured interval holds both 1 and the whole predicted
      interval: the measurement then fits the model exactly as well as a speculation that
      changes nothing, whatever c's interval allows, so its agreement tells nothing;
    - AGREE otherwise (they overlap).
    """
    if predicted is None or measured is None or not (predicted.has_interval and measured.has_interval):
        return None
    (low, high), (measured_lo, measured_hi) = predicted.bounds, measured.bounds
    if high < measured_lo or low > measured_hi:
        return PART
    if measured_lo <= min(1.0, low) and max(1.0, high) <= measured_hi:
        return NOT_TESTABLE
    return AGREE


def _point(
    arm: SpeculativeArm,
    level: int,
    counters: Counters | None,
    cost: steps.StepRow | None,
    cost_source: str,
    measured: Interval | None,
) -> dict[str, Any]:
    conditional = acceptance.per_position_conditional(counters.accepted_per_pos, counters.drafts) if counters else []
    yield_ = expected_tokens_per_step(conditional) if counters and counters.drafts else None
    c = cost.relative_cost if cost is not None else None
    predicted = lo = hi = None
    if yield_ is not None and c is not None:
        assert c.point is not None  # a measured cost has at least one block
        predicted = predicted_speedup(yield_, arm.gamma, c.point)
        if c.has_interval:
            # A dearer draft predicts less: the interval's ends swap.
            lo = predicted_speedup(yield_, arm.gamma, c.interval.hi)
            hi = predicted_speedup(yield_, arm.gamma, c.interval.lo)
    return {
        "level": level,
        "conditional": conditional,
        "tokens_per_step": yield_,
        "cost_source": cost_source,
        "cost_ratio": c.point if c else None,
        "cost_ratio_lo": c.lo if c and c.has_interval else None,
        "cost_ratio_hi": c.hi if c and c.has_interval else None,
        "cost_blocks": cost.blocks if cost else None,
        "draft_step_ms": cost.step_ms if cost else None,
        "baseline_step_ms": cost.baseline_step_ms if cost else None,
        "predicted": predicted,
        "predicted_lo": lo,
        "predicted_hi": hi,
        "measured": measured.point if measured else None,
        "measured_lo": measured.lo if measured else None,
        "measured_hi": measured.hi if measured else None,
        "agreement": agreement(Interval(predicted, lo, hi) if predicted is not None else None, measured),
    }


def _cost(
    arm: SpeculativeArm, level: int, calibration: Mapping[str, Mapping[int, steps.StepRow]]
) -> tuple[steps.StepRow | None, str]:
    if arm.method != DRAFT_MODEL:
        return None, UNMEASURED.get(arm.method, "not measured")
    # A draft-model arm without params["model"] (None) finds no calibration; the stubs give
    # Mapping.get's key the mapping's key type, which get does not need.
    rows = calibration.get(arm.draft_model)  # type: ignore[arg-type]
    if rows is None:
        return None, NO_CALIBRATION
    row = rows.get(level)
    if row is None or row.relative_cost is None:
        return None, NO_CALIBRATION_AT_LEVEL
    return row, MEASURED


def arm_prediction(
    arm: SpeculativeArm,
    levels: Sequence[int],
    *,
    counters: Mapping[int, Counters],
    calibration: Mapping[str, Mapping[int, steps.StepRow]],
    measured: Mapping[int, Interval],
) -> dict[str, Any]:
    """The arm's prediction at every level, where c was measured, beside the measured engine-timed TPOT
    speedup. `calibration` maps a draft model to its calibration arm's step rows by level
    (compared with the baseline, so relative_cost is c); `measured`: the TPOT speedup by level."""
    points = []
    for level in sorted(levels):
        cost, source = _cost(arm, level, calibration)
        points.append(_point(arm, level, counters.get(level), cost, source, measured.get(level)))
    return {"gamma": arm.gamma, "method": arm.method, "points": points}


def _two(value: float) -> str:
    return f"{value:.2f}"


def _interval(point: Mapping[str, Any], name: str, digits: int = 2) -> str:
    """ " [lo, hi]" of a point's figure, or "" where it has none."""
    lo, hi = point[f"{name}_lo"], point[f"{name}_hi"]
    return "" if lo is None or hi is None else f" [{lo:.{digits}f}, {hi:.{digits}f}]"


def _test(point: Mapping[str, Any]) -> str:
    """What the test found, after the measured figure."""
    found = point["agreement"]
    if point["measured_lo"] is None:
        return " (one block: no interval to test against)"
    if point["predicted_lo"] is None:
        return " (c from one block: the prediction has no interval, so it is not tested)"
    if found == AGREE:
        return ": the intervals overlap, so this measurement does not contradict the model"
    if found == NOT_TESTABLE:
        return (
            ": not testable, the measured interval holds 1 and the whole predicted interval, "
            "so it cannot tell the model from a speculation that changes nothing"
        )
    side = "above" if point["predicted_lo"] > point["measured_hi"] else "below"
    return f": they part, the predicted interval lies {side} the measured one"


def _clause(point: Mapping[str, Any]) -> str:
    level, predicted, measured = point["level"], point["predicted"], point["measured"]
    if predicted is None:
        return f"at concurrency {level} no prediction (c {point['cost_source'].split(':')[0]})"
    cost = f"c = {point['cost_ratio']:.3f}{_interval(point, 'cost_ratio', 3)}"
    text = f"at concurrency {level} predicted {_two(predicted)}{_interval(point, 'predicted')} ({cost})"
    if measured is None:
        return text + ", no measured engine-timed TPOT speedup"
    return text + f", measured {_two(measured)}{_interval(point, 'measured')}" + _test(point)


def sentence(label: str, prediction: Mapping[str, Any]) -> str:
    """What the page says of one speculative arm: per level, prediction and measurement with
    their intervals, and what the test of one against the other found."""
    return f"{label}: " + "; ".join(_clause(point) for point in prediction["points"]) + "."
