"""What an imported experiment's page says that a measured one's does not: the protocol each
level's files had (stored per file in Experiment.imported_files, experiments/imports/services.py) and
the latency speedups estimated from the files' means (experiments/imports/estimates.py)."""

from collections.abc import Callable

from django import template

from experiments.imports.bench_files import WHAT_AN_IMPORT_LACKS
from experiments.imports.estimates import MEAN_COLUMNS, point_estimates_of
from experiments.imports.protocol import TOKEN_TOLERANCE
from experiments.models import SpeedupEstimate

register = template.Library()


def _by_level(experiment, key: str) -> dict[int, float] | None:
    """{level: the figure of its first file}, the baseline's (listed first); None for an import
    stored before the files' protocols were."""
    files = experiment.imported_files
    if not files or any(key not in file for file in files):
        return None
    levels: dict[int, float] = {}
    for file in files:
        levels.setdefault(file["level"], file[key])
    return levels


def _per_level(levels: dict[int, float], shown: Callable[[float], str]) -> str:
    if len(set(levels.values())) == 1:
        return shown(next(iter(levels.values())))
    return ", ".join(f"{shown(value)} at concurrency {level}" for level, value in sorted(levels.items()))


@register.simple_tag
def import_lacks() -> tuple[str, ...]:
    return WHAT_AN_IMPORT_LACKS


@register.simple_tag
def token_tolerance() -> str:
    return f"{TOKEN_TOLERANCE:.0%}"


@register.simple_tag
def imported_prompts(experiment) -> str:
    """The prompts per level, one number only where every level sent as many."""
    levels = _by_level(experiment, "prompts")
    if levels is None:
        return f"{experiment.num_prompts} measured"
    return f"{_per_level(levels, str)} measured (the files' num_prompts)"


@register.simple_tag
def imported_output_length(experiment) -> str:
    """The files record the tokens their requests gave out, not the max_tokens asked for."""
    levels = _by_level(experiment, "output_tokens")
    if levels is None:
        return f"{experiment.max_tokens} tokens a request on average, rounded up; max_tokens not recorded"
    shown = _per_level(levels, lambda value: f"{value:.1f}")
    return f"{shown} tokens a request on average (output tokens / completed requests); max_tokens not recorded"


@register.simple_tag
def point_estimate_rows(experiment, results) -> list[tuple]:
    """(arm, level, blocks, one estimate or None per MEAN_COLUMNS metric) for each cell with a
    point estimate from the files' means, in the order and colours of `results`' arms."""
    cells: dict[tuple[int, int], dict[str, SpeedupEstimate]] = {}
    for estimate in point_estimates_of(experiment):
        cells.setdefault((estimate.arm_id, estimate.concurrency), {})[estimate.metric] = estimate
    position = {arm.id: index for index, arm in enumerate(results.arms)}
    shown = sorted((position[arm], level, found) for (arm, level), found in cells.items() if arm in position)
    return [
        (results.arms[index], level, max(e.n_repetitions for e in found.values()), *map(found.get, MEAN_COLUMNS))
        for index, level, found in shown
    ]
