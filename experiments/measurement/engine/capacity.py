"""The capacity figures of a measured interval, declared once: how full the KV cache got, how
many requests ran and waited at most, and how many were preempted (docs/metrics.md,
"Capacity"). The worker measures them with experiments/measurement/engine/prom.py,
workers/storage/ingest.py stores them in the run summary's columns named here,
experiments/analysis/capacity.py pools them per arm and level by the rule named here."""

from dataclasses import dataclass, fields
from typing import Literal

Pooling = Literal["max", "mean", "sum"]


@dataclass(frozen=True, kw_only=True)
class Capacity:
    """The five figures; None where they were not measured."""

    kv_cache_peak: float | None = None
    kv_cache_mean: float | None = None
    running_max: int | None = None
    waiting_max: int | None = None
    preemptions: int | None = None

    def figures(self) -> dict[str, float | int | None]:
        return {figure.name: getattr(self, figure.name) for figure in fields(Capacity)}


@dataclass(frozen=True, kw_only=True)
class CapacityFigures(Capacity):
    """The figures of one measured interval, with the number of /metrics samples taken."""

    samples: int


SAMPLES_COLUMN = "capacity_samples"
# Each figure: the RunSummary column it is stored in, and how the runs of one level pool it
# (highest peak, mean of the means, highest running and waiting, preemptions summed).
STORED: dict[str, tuple[str, Pooling]] = {
    "kv_cache_peak": ("kv_cache_usage_peak", "max"),
    "kv_cache_mean": ("kv_cache_usage_mean", "mean"),
    "running_max": ("requests_running_max", "max"),
    "waiting_max": ("requests_waiting_max", "max"),
    "preemptions": ("preemptions", "sum"),
}
assert tuple(STORED) == tuple(figure.name for figure in fields(Capacity))
STORED_COLUMNS = (SAMPLES_COLUMN, *(column for column, _ in STORED.values()))


def stored_columns(figures: CapacityFigures | None) -> dict[str, float | int | None]:
    """The run summary's capacity columns; all null when the run's capacity was not measured."""
    if figures is None:
        return dict.fromkeys(STORED_COLUMNS)
    values = figures.figures()
    return {SAMPLES_COLUMN: figures.samples} | {column: values[figure] for figure, (column, _) in STORED.items()}
