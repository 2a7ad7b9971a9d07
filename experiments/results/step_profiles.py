"""The experiment page's profile section: per arm and level, the shares of a profiled
interval (experiments/measurement/engine/trace_shares.py) and the step time they split
(experiments/measurement/engine/steps.py), and the chart data of that section and of the capacity
figures (experiments/analysis/capacity.py).

The step time comes from the measured runs (the step accounting stored in the analysis),
not from the profiled interval, whose profiler slows the engine: the profile says how a step
divides, the measured runs how long it is. Reads one query of ProfiledInterval rows.
"""

from dataclasses import dataclass

from experiments.analysis import capacity
from experiments.measurement.engine import trace_shares as profiles
from experiments.models import Experiment, ProfiledInterval
from experiments.results.block import Results


@dataclass(frozen=True)
class ProfileRow:
    """One arm at one level: its profiled interval and the measured step time it splits."""

    arm_id: int
    level: int
    requests: int
    steps: int | None
    profiled_ms: float | None
    shares: dict[str, float] | None  # None when the interval failed or its trace was not split
    step_ms: float | None
    error: str = ""

    @property
    def not_split(self) -> bool:
        """The trace was read (it has steps) but holds no phase scope: vLLM's V2 model runner
        names none (trace_shares.TraceSummary.split); `error` says so."""
        return self.shares is None and self.steps is not None

    @property
    def phase_ms(self) -> dict[str, float] | None:
        """Each phase's part of the measured step: its share × the step time (ms)."""
        if self.shares is None or self.step_ms is None:
            return None
        return {phase: share * self.step_ms for phase, share in self.shares.items()}

    @property
    def percent(self) -> dict[str, float] | None:
        return None if self.shares is None else {phase: 100 * share for phase, share in self.shares.items()}

    def as_json(self) -> dict:
        return {
            "arm": self.arm_id,
            "level": self.level,
            "shares": self.shares,
            "step_ms": self.step_ms,
            "phase_ms": self.phase_ms,
            "requests": self.requests,
            "steps": self.steps,
            "profiled_ms": self.profiled_ms,
            "error": self.error,
        }


def step_times(step_rows: list[dict]) -> dict[tuple[int, int], float]:
    """(arm id, level) -> step (ms) from the stored step accounting's rows."""
    return {(row["arm_id"], row["level"]): row["step_ms"] for row in step_rows if row.get("step_ms") is not None}


def _shares(interval: ProfiledInterval) -> dict[str, float] | None:
    shares = {phase: getattr(interval, f"share_{phase}") for phase in profiles.PHASES}
    return None if None in shares.values() else shares


def profile_rows(*, experiment: Experiment, step_rows: list[dict]) -> list[ProfileRow]:
    """Per profiled interval of the experiment, in arm and level order."""
    steps = step_times(step_rows)
    return [
        ProfileRow(
            arm_id=interval.arm_id,
            level=interval.concurrency,
            requests=interval.requests,
            steps=interval.steps,
            profiled_ms=interval.profiled_ms,
            shares=_shares(interval),
            step_ms=steps.get((interval.arm_id, interval.concurrency)),
            error=interval.error,
        )
        for interval in ProfiledInterval.objects.filter(experiment=experiment).order_by("arm__position", "concurrency")
    ]


def capacity_chart(rows: list[capacity.CapacityRow]) -> list[dict]:
    """The capacity chart's bars: per compared arm and level, its figures beside the baseline's."""
    return [
        {
            "arm": row.arm_id,
            "level": row.level,
            "kv_peak": row.arm.kv_cache_peak_percent,
            "baseline_kv_peak": row.baseline.kv_cache_peak_percent,
            "preemptions": row.arm.preemptions,
            "baseline_preemptions": row.baseline.preemptions,
        }
        for row in rows
    ]


def chart_data(rows: list[ProfileRow], capacity_rows: list[capacity.CapacityRow], arms: list[dict]) -> dict:
    """What static/js/profile_charts.js draws, read from the page with json_script."""
    return {
        "arms": arms,
        "phases": list(profiles.PHASES),
        "profiles": [row.as_json() for row in rows],
        "capacity": capacity_chart(capacity_rows),
    }


def page_context(*, experiment: Experiment, results: Results | None) -> dict:
    """The template context of the profile section and of the charts' data (also the
    capacity chart's, which sits in the results' capacity section)."""
    if results is None:
        return {"profile_rows": [], "profile_data": None}
    accounting = results.analysis.series.get("step_accounting", {}) if results.analysis else {}
    rows = profile_rows(experiment=experiment, step_rows=accounting.get("rows", []))
    by_id = {arm.id: arm for arm in results.arms}
    arms = [
        {"id": arm.id, "label": arm.label, "colour": arm.colour, "baseline": arm.is_baseline} for arm in results.arms
    ]
    return {
        "profile_rows": [(by_id[row.arm_id], row) for row in rows if row.arm_id in by_id],
        "profile_data": chart_data(rows, list(results.capacity_rows), arms),
    }
