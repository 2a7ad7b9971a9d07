"""How long a run, and so an experiment's task, may take: derived from the experiment's size.

The worker stops a run past its limit (workers/runner.py). The experiment's task holds its
broker message unacknowledged until it ends (late acknowledgement, so that a killed worker's
experiment is delivered again), so the broker's visibility timeout must be longer than the
longest task: the experiment form refuses one whose limit is not (experiments/definition/forms/).
Free of Django models: the form and the worker both use it.
"""

import math
from dataclasses import dataclass

# The longest draft an arm may ask for (k): the form, the API, imports and the database's check.
MAX_SPECULATIVE_TOKENS = 16
# The longest n-gram an n-gram arm looks up (prompt_lookup_min and _max).
MAX_LOOKUP = 64

# Start-up, warm-up connection set-up and the two /metrics reads of a run.
RUN_BASE_S = 120.0


@dataclass(frozen=True)
class Size:
    """What a run's duration depends on."""

    warmup: int
    prompts: int
    max_tokens: int
    request_rate: float | None


def run_time_limit_s(size: Size, *, concurrency: int, seconds_per_token: float) -> float:
    """Generous bound on one run: every request generating max_tokens at `seconds_per_token`
    each, `concurrency` at a time, plus the Poisson arrivals' span under a fixed rate."""
    waves = math.ceil((size.warmup + size.prompts) / max(1, min(concurrency, size.prompts)))
    arrivals = size.prompts / size.request_rate if size.request_rate else 0.0
    return RUN_BASE_S + waves * size.max_tokens * seconds_per_token + arrivals


def experiment_time_limit_s(
    size: Size, *, levels: list[int], runs_per_level: int, sessions: int, seconds_per_token: float,
    server_start_s: float,
) -> float:  # fmt: skip
    """Bound on the whole experiment's task: every run at its limit, every server start at its timeout."""
    per_level = sum(run_time_limit_s(size, concurrency=c, seconds_per_token=seconds_per_token) for c in levels)
    return per_level * runs_per_level + sessions * server_start_s
