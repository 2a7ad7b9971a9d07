"""The results block of the experiment page as the template and the charts read it: arm
colours, per-cell spreads over repetitions, acceptance by position, the stored speedups and
analysis, and the data the charts draw. Plain objects over what
experiments/results/block_selectors.py read; no query of their own.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from experiments.analysis import capacity
from experiments.analysis.verdict_grid import SPEEDUP_METRICS, GridCell
from experiments.measurement.engine import stream_fidelity
from experiments.measurement.stats import acceptance
from experiments.models import ExperimentAnalysis, SpeedupEstimate

BASELINE_COLOUR = "#6e7781"
REPLICATE_COLOUR = "#000000"
# Okabe–Ito (colour-blind safe) first, then two darker tones: MAX_ARMS speculative arms.
ARM_COLOURS = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#882255", "#1f2328")
LATENCY_METRICS = ("ttft", "tpot", "server_tpot", "e2e")
PERCENTILES = ("p50", "p90", "p99")
LATENCY_COLUMNS = tuple(f"{metric}_{p}_ms" for metric in LATENCY_METRICS for p in PERCENTILES)
SPREAD_COLUMNS = (
    *LATENCY_COLUMNS, "itl_p50_ms", "tokens_per_chunk_mean", "output_throughput", "request_throughput", "goodput",
    "achieved_concurrency",
)  # fmt: skip


@dataclass(frozen=True)
class ArmStyle:
    """An arm as the results show it: the same colour in every chart and table."""

    id: int
    label: str
    is_baseline: bool
    colour: str
    is_replicate: bool = False
    is_speculative: bool = False


@dataclass(frozen=True)
class Spread:
    """Mean, minimum and maximum of one summary column over an arm's repetitions at one level."""

    mean: float | None
    min: float | None
    max: float | None

    def as_list(self) -> list:
        return [self.mean, self.min, self.max]


@dataclass(frozen=True)
class Cell:
    """One arm at one concurrency level, over its succeeded runs."""

    arm: ArmStyle
    level: int
    runs: int
    spread: dict[str, Spread]
    drafts: int | None
    accepted: int | None
    tokens_per_step: float | None = None  # from the stored analysis (per-request step counts)

    @property
    def acceptance_length(self) -> float | None:
        return acceptance.acceptance_length(self.accepted, self.drafts)

    @property
    def low_concurrency(self) -> bool:
        """Some run reached less than 90 % of the nominal level (sum of E2E / duration)."""
        lowest = self.spread["achieved_concurrency"].min
        return lowest is not None and lowest < 0.9 * self.level


@dataclass(frozen=True)
class PositionAcceptance:
    """An arm's per-position counters summed over all its succeeded runs, read both ways."""

    arm: ArmStyle
    drafts: int
    accepted: list[int]
    unconditional: list[float | None]
    conditional: list[float | None]
    # (accepted, at stake) per position from what each step actually drafted (stored analysis)
    drafted: Sequence[tuple[int, int]] = ()

    @property
    def conditional_drafted(self) -> list[float | None]:
        return [accepted / at_stake if at_stake else None for accepted, at_stake in self.drafted]

    @property
    def rows(self) -> list[tuple]:
        drafted = self.conditional_drafted
        return [
            (i, accepted, self.unconditional[i], self.conditional[i], drafted[i] if i < len(drafted) else None)
            for i, accepted in enumerate(self.accepted)
        ]


@dataclass(frozen=True)
class StepInterval:
    """A stored step-accounting estimate (experiments/measurement/engine/steps.py) in the shape the ratio cells read."""

    point: float | None
    ci_low: float | None
    ci_high: float | None
    note: str = ""

    @classmethod
    def from_json(cls, data: dict | None) -> "StepInterval | None":
        return None if data is None else cls(data["point"], data["lo"], data["hi"], data["note"])


@dataclass(frozen=True)
class Results:
    arms: list[ArmStyle]
    levels: list[int]
    cells: list[Cell]
    acceptance: list[PositionAcceptance]
    speedups: list[SpeedupEstimate]
    analysis: ExperimentAnalysis | None
    slos: list[str]  # the SLOs set, e.g. "TPOT ≤ 50 ms"; goodput is shown only with some
    margin: float = 0.02
    primary_metric: str = "server_tpot"
    capacity_rows: Sequence[capacity.CapacityRow] = ()  # experiments/analysis/capacity.py, per compared arm and level

    @property
    def capacity_warnings(self) -> list[str]:
        return capacity.capacity_warnings(self.capacity_rows, {arm.id: arm.label for arm in self.arms})

    @property
    def capacity_unrecorded(self) -> bool:
        return any(not row.arm.recorded or not row.baseline.recorded for row in self.capacity_rows)

    @property
    def capacity_table(self) -> list[tuple[ArmStyle, capacity.CapacityRow]]:
        by_id = {arm.id: arm for arm in self.arms}
        return [(by_id[row.arm_id], row) for row in self.capacity_rows]

    @property
    def has_slos(self) -> bool:
        return bool(self.slos)

    @property
    def margin_label(self) -> str:
        return f"{self.margin:.0%}" if round(self.margin * 100, 6).is_integer() else f"{self.margin:.1%}"

    @property
    def compared_arms(self) -> list[ArmStyle]:
        """Every arm compared with the baseline: the A/A replicate and the speculative arms."""
        return [arm for arm in self.arms if not arm.is_baseline]

    @property
    def speculative_arms(self) -> list[ArmStyle]:
        return [arm for arm in self.arms if arm.is_speculative]

    @property
    def verdicts_by_arm(self) -> list[tuple[ArmStyle, list[dict]]]:
        verdicts = self.analysis.verdicts if self.analysis else []
        return [(arm, [v for v in verdicts if v["arm_id"] == arm.id]) for arm in self.compared_arms]

    def _by_cell(self) -> dict:
        return {(s.arm_id, s.concurrency, s.metric): s for s in self.speedups}

    @property
    def question(self) -> dict:
        """The experiment's question and where each primary cell stands (analysis/primary.py)."""
        return self.analysis.series.get("question", {}) if self.analysis else {}

    @property
    def grid_metrics(self) -> list[str]:
        """The verdict metrics, the question's first: the grid opens on it."""
        metrics = [str(metric) for metric in SPEEDUP_METRICS]
        return sorted(metrics, key=lambda metric: metric != self.primary_metric)

    @property
    def grids(self) -> list[tuple[str, str, list[tuple[ArmStyle, list[GridCell]]]]]:
        """Per verdict metric (value, name), the question's first: the grid of arms × levels."""
        by_cell = self._by_cell()
        return [
            (
                str(metric),
                SpeedupEstimate.Metric(metric).label,
                [
                    (arm, [GridCell(level, by_cell.get((arm.id, level, metric))) for level in self.levels])
                    for arm in self.compared_arms
                ],
            )
            for metric in self.grid_metrics
        ]

    @property
    def speedup_rows(self) -> list[tuple]:
        """(arm, level, estimate per SPEEDUP_METRICS …) for every compared arm and level."""
        by_cell = self._by_cell()
        return [
            (arm, level, *(by_cell.get((arm.id, level, metric)) for metric in SPEEDUP_METRICS))
            for arm in self.compared_arms
            for level in self.levels
            if any((arm.id, level, metric) in by_cell for metric in SPEEDUP_METRICS)
        ]

    @property
    def along_output_rows(self) -> list[tuple[ArmStyle, int, float, int]]:
        series = self.analysis.series.get("along_output", {}) if self.analysis else {}
        return [(arm, *bucket) for arm in self.arms for bucket in series.get(str(arm.id), [])]

    @property
    def breakdowns(self) -> list[tuple[str, str, list[dict]]]:
        """(title, key, groups) of the stored breakdowns by category and input length
        (experiments/analysis/breakdowns.py)."""
        series = self.analysis.series if self.analysis else {}
        titles = (("By prompt category", "by_category"), ("By input length", "by_input_length"))
        return [(title, key, series.get(key, [])) for title, key in titles]

    @property
    def along_output_left_out(self) -> int:
        series = self.analysis.series.get("along_output_merged", {}) if self.analysis else {}
        return sum(series.values())

    @property
    def step_rows(self) -> list[tuple[ArmStyle, dict, StepInterval | None, StepInterval | None]]:
        """(arm, stored row, relative cost, margin) per arm and level, baseline first."""
        accounting = self.analysis.series.get("step_accounting", {}) if self.analysis else {}
        by_id = {arm.id: arm for arm in self.arms}
        return [
            (
                by_id[row["arm_id"]],
                row,
                StepInterval.from_json(row["relative_cost"]),
                StepInterval.from_json(row["margin"]),
            )
            for row in accounting.get("rows", [])
            if row["arm_id"] in by_id
        ]

    @property
    def step_sentences(self) -> list[tuple[ArmStyle, str]]:
        accounting = self.analysis.series.get("step_accounting", {}) if self.analysis else {}
        by_id = {arm.id: arm for arm in self.arms}
        return [(by_id[s["arm_id"]], s["text"]) for s in accounting.get("sentences", []) if s["arm_id"] in by_id]

    @property
    def stream_rows(self) -> list[tuple[ArmStyle, dict]]:
        """(arm, stored row) per run: its requests' streams against the engine's timing."""
        rows = self.analysis.series.get("stream_fidelity", []) if self.analysis else []
        by_id = {arm.id: arm for arm in self.arms}
        return [(by_id[row["arm_id"]], row) for row in rows if row["arm_id"] in by_id]

    stream_tolerance_label = f"{stream_fidelity.DISTORTED_RUN_SHARE:.0%}"
    span_tolerance_label = f"{stream_fidelity.SPAN_TOLERANCE:.0%}"
    stall_steps = f"{stream_fidelity.STALL_STEPS:g}"
    burst_ratio = f"{stream_fidelity.BURST_SPAN_RATIO:g}"

    @property
    def fidelity_rows(self) -> list[tuple[ArmStyle, dict]]:
        rows = self.analysis.fidelity if self.analysis else []
        by_id = {arm.id: arm for arm in self.arms}
        return [(by_id[row["arm_id"]], row) for row in rows if row["arm_id"] in by_id]

    @property
    def _predicted(self) -> dict:
        """The stored predictions by arm id; those stored before c was measured (a fitted c, no
        sentence) are left out rather than shown as predictions."""
        series = self.analysis.series.get("predicted", {}) if self.analysis else {}
        return {arm: prediction for arm, prediction in series.items() if "sentence" in prediction}

    @property
    def predicted_rows(self) -> list[tuple[ArmStyle, dict, dict, StepInterval, StepInterval, StepInterval]]:
        """(arm, arm's series, point, c, predicted, measured TPOT speedup) per speculative arm and
        level (experiments/measurement/engine/prediction.py); the three figures in the shape the ratio cells read."""
        series = self._predicted
        return [
            (
                arm,
                series[str(arm.id)],
                point,
                StepInterval(point["cost_ratio"], point["cost_ratio_lo"], point["cost_ratio_hi"], "one block"),
                StepInterval(point["predicted"], point["predicted_lo"], point["predicted_hi"], "one block"),
                StepInterval(point["measured"], point["measured_lo"], point["measured_hi"], "one block"),
            )
            for arm in self.speculative_arms
            if str(arm.id) in series
            for point in series[str(arm.id)]["points"]
        ]

    @property
    def predicted_sentences(self) -> list[tuple[ArmStyle, str]]:
        series = self._predicted
        return [(arm, series[str(arm.id)]["sentence"]) for arm in self.speculative_arms if str(arm.id) in series]

    @property
    def has_predictions(self) -> bool:
        return any(point["predicted"] is not None for _, _, point, *_ in self.predicted_rows)

    @property
    def calibration_rows(self) -> list[tuple[str, dict, StepInterval | None]]:
        """(calibration arm's label, stored step row, c) per calibration arm and level."""
        calibration = self.analysis.series.get("calibration", []) if self.analysis else []
        return [
            (arm["label"], row, StepInterval.from_json(row["relative_cost"]))
            for arm in calibration
            for row in arm["rows"]
        ]

    def chart_data(self) -> dict:
        """What static/js/experiment_results.js draws, read from the page with json_script."""
        series = self.analysis.series if self.analysis else {}
        verdicts = self.analysis.verdicts if self.analysis else []
        return {
            "arms": [
                {
                    "id": a.id,
                    "label": a.label,
                    "baseline": a.is_baseline,
                    "replicate": a.is_replicate,
                    "speculative": a.is_speculative,
                    "colour": a.colour,
                }
                for a in self.arms
            ],
            "levels": self.levels,
            "has_slos": self.has_slos,
            "cells": [
                {"arm": c.arm.id, "level": c.level} | {column: spread.as_list() for column, spread in c.spread.items()}
                for c in self.cells
            ],
            "acceptance": [
                {"arm": a.arm.id, "unconditional": a.unconditional, "conditional": a.conditional}
                for a in self.acceptance
            ],
            "speedups": [s.chart_point() for s in self.speedups],
            "margin": self.margin,
            "break_even": [{"arm": v["arm_id"], "metric": v["metric"]} | v["break_even"] for v in verdicts],
            "tpot_cdf": series.get("tpot_cdf", {}),
            "acceptance_length_cdf": series.get("acceptance_length_cdf", {}),
            "along_output": series.get("along_output", {}),
            "predicted": self._predicted,
            # Each compared arm's block ratios with the host of each block (experiments/analysis/variance.py).
            "host_blocks": series.get("variance_components", {}).get("host_test", {}).get("arms", []),
        }
