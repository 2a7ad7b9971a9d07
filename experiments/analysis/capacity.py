"""Capacity side effects per arm and level: how full the KV cache got, how many requests ran
and waited, and how many were preempted, beside the baseline's at the same level.

A draft model's KV cache is carved from the same memory as the target's, so under one
cache budget a speculative arm can fit fewer of the target's requests: its speedup at a
level may then come with preemptions (recomputed work) or a queue that the baseline did not
have. Read from the run summaries (the worker measured them with
experiments/measurement/engine/prom.py) in one grouped query.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Avg, Count, Max, Sum

from experiments.measurement.engine.capacity import SAMPLES_COLUMN, STORED, Capacity
from experiments.models import Experiment, RunSummary

POOL = {"max": Max, "mean": Avg, "sum": Sum}


@dataclass(frozen=True)
class CapacityCell(Capacity):
    """One arm at one level over its succeeded runs that recorded capacity figures."""

    arm_id: int
    level: int
    runs: int

    @property
    def recorded(self) -> bool:
        return self.runs > 0

    @property
    def kv_cache_peak_percent(self) -> float | None:
        return None if self.kv_cache_peak is None else 100 * self.kv_cache_peak

    @property
    def kv_cache_mean_percent(self) -> float | None:
        return None if self.kv_cache_mean is None else 100 * self.kv_cache_mean

    def as_json(self) -> dict:
        return {"runs": self.runs, **self.figures()}


@dataclass(frozen=True)
class CapacityRow:
    """A compared arm at one level, with the baseline's cell at the same level."""

    arm_id: int
    level: int
    arm: CapacityCell
    baseline: CapacityCell

    @property
    def preempted_alone(self) -> bool:
        """The arm preempted at this level and the baseline, measured, did not."""
        return bool(self.arm.preemptions) and self.baseline.preemptions == 0

    @property
    def queued_alone(self) -> bool:
        """Requests waited in the arm's server at this level and never in the baseline's."""
        return bool(self.arm.waiting_max) and self.baseline.waiting_max == 0

    @property
    def differs(self) -> bool:
        """One side queued or preempted at this level and the other, measured, did not: the
        arms did not run the same batches, so a per-token speedup need not carry to capacity."""
        if not (self.arm.recorded and self.baseline.recorded):
            return False
        reverse_preempted = bool(self.baseline.preemptions) and self.arm.preemptions == 0
        reverse_queued = bool(self.baseline.waiting_max) and self.arm.waiting_max == 0
        return self.preempted_alone or self.queued_alone or reverse_preempted or reverse_queued


def capacity_differs(*, experiment: Experiment, baseline_id: int, arm_ids: list[int]) -> frozenset[tuple[int, int]]:
    """The (arm, level) cells where the arm and the baseline differ in queueing or preemption:
    there the joint word needs the capacity guard (experiments/measurement/stats/objective.py)."""
    cells = capacity_cells(experiment=experiment)
    levels = sorted({level for _, level in cells})
    rows = capacity_rows(cells, baseline_id=baseline_id, arm_ids=arm_ids, levels=levels)
    return frozenset((row.arm_id, row.level) for row in rows if row.differs)


def capacity_cells(*, experiment: Experiment) -> dict[tuple[int, int], CapacityCell]:
    """(arm id, level) -> the level's runs pooled: highest peak, mean of the means, highest
    running and waiting, preemptions summed. Runs without figures are left out; a cell
    none of whose runs has them reads as not recorded."""
    rows = (
        RunSummary.objects.succeeded_of(experiment)
        .values("run__arm_id", "run__concurrency")
        .annotate(
            runs=Count(SAMPLES_COLUMN),
            **{_pooled(figure): POOL[how](column) for figure, (column, how) in STORED.items()},
        )
    )
    return {(row["run__arm_id"], row["run__concurrency"]): _cell(row) for row in rows}


def _pooled(figure: str) -> str:
    return f"pooled_{figure}"


def _cell(row: Mapping[str, Any]) -> CapacityCell:
    return CapacityCell(
        arm_id=row["run__arm_id"],
        level=row["run__concurrency"],
        runs=row["runs"],
        **{figure: row[_pooled(figure)] for figure in STORED},
    )


def capacity_rows(
    cells: dict[tuple[int, int], CapacityCell], *, baseline_id: int, arm_ids: list[int], levels: list[int]
) -> list[CapacityRow]:
    """Per compared arm and level that ran, its cell beside the baseline's."""
    missing = CapacityCell(arm_id=baseline_id, level=0, runs=0)
    return [
        CapacityRow(arm_id, level, cells[arm_id, level], cells.get((baseline_id, level), missing))
        for arm_id in arm_ids
        for level in levels
        if (arm_id, level) in cells
    ]


def capacity_warnings(rows: Sequence[CapacityRow], labels: dict[int, str]) -> list[str]:
    """One sentence per arm and level that preempted or queued where the baseline did not."""
    warnings = []
    for row in rows:
        label = labels[row.arm_id]
        if row.preempted_alone:
            warnings.append(
                f"{label} preempted {row.arm.preemptions} request(s) at concurrency {row.level}, where the "
                "baseline preempted none: its KV cache ran out, and the preempted requests were recomputed."
            )
        if row.queued_alone:
            warnings.append(
                f"{label} had up to {row.arm.waiting_max} request(s) waiting at concurrency {row.level}, where "
                "the baseline had none waiting: its server could not fit the batch the baseline ran."
            )
    return warnings
