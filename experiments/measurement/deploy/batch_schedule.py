"""vLLM 0.32's batch-size-dependent speculation length, `num_speculative_tokens_per_batch_size`
in --speculative-config: a list of `[range_start, range_end, k]`, inclusive batch-size ranges,
that the scheduler expands into a lookup from a step's batch size to the k it drafts
(vllm/v1/spec_decode/dynamic/utils.py). Every proposer specdash offers drafts that k
(vllm/v1/worker/gpu_model_runner.py propose_draft_token_ids, gpu/model_runner.py).

vLLM checks a schedule only when its scheduler starts, after the model has loaded; the rule
here refuses at the form what it would refuse (validate_and_normalize_dynamic_sd_schedule,
utils.py:16-72), and two things it takes silently: a band's k above the arm's k, which it
lowers to the arm's (utils.py:113-126), and a gap between bands, which it fills with the k of
the band before (utils.py:105-116). A schedule specdash stores therefore reads as what runs.
tests/test_vllm_config_keys.py asks the installed vLLM's validator about the same schedules.

`derive` turns one arm's settled verdicts per concurrency level into the schedule to deploy.
Free of Django.
"""

import re
from collections.abc import Mapping, Sequence
from itertools import pairwise
from math import isqrt
from typing import cast

from experiments.measurement.stats import sequential

KEY = "num_speculative_tokens_per_batch_size"
FIRST_VERSION = (0, 32)  # the first vLLM release whose SpeculativeConfig takes KEY

# (range_start, range_end, k): batch sizes range_start..range_end inclusive draft k tokens.
Band = tuple[int, int, int]


def supported(vllm_version: str) -> bool:
    """Whether a vLLM of this version (as `vllm.__version__` gives it: "0.32.0", "0.32.1+cpu",
    "0.33.0.dev12") runs a batch-size schedule; False for a version it cannot read."""
    match = re.match(r"(\d+)\.(\d+)", vllm_version.strip())
    return match is not None and (int(match[1]), int(match[2])) >= FIRST_VERSION


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _band_problem(entry: object, k: int) -> str | None:
    if not isinstance(entry, list | tuple) or len(entry) != 3 or not all(_whole(v) for v in entry):
        return f"each entry must be [range_start, range_end, k] of whole numbers, not {str(entry)[:40]}"
    start, end, band_k = entry
    if start <= 0 or end <= 0:
        return f"the batch sizes of [{start}, {end}, {band_k}] must be positive (vLLM refuses them)"
    if start > end:
        return f"[{start}, {end}, {band_k}] starts after it ends (vLLM refuses it)"
    if band_k < 0:
        return f"the k of [{start}, {end}, {band_k}] must be 0 (no speculation) or more (vLLM refuses it)"
    if band_k > k:
        return f"the k of [{start}, {end}, {band_k}] exceeds the arm's k ({k}): vLLM would silently draft {k}"
    return None


def _order_problem(bands: list[Band]) -> str | None:
    if bands[0][0] != 1:
        return f"the first band must start at batch size 1, not {bands[0][0]} (vLLM refuses it)"
    for (_, previous_end, previous_k), (start, _, _) in pairwise(bands):
        if start <= previous_end:
            return f"the bands overlap at batch size {start} (vLLM refuses overlapping bands)"
        if start > previous_end + 1:
            return (
                f"batch sizes {previous_end + 1}-{start - 1} are in no band: vLLM would run them at k={previous_k}, "
                "write that band"
            )
    return None


def problem(schedule: object, *, k: int) -> str | None:
    """Why this schedule is not one specdash passes for an arm of k, or None. Bands may come in
    any order (vLLM sorts them); `normalised` gives the sorted list."""
    if not isinstance(schedule, list) or not schedule:
        return "it must be a non-empty list of [range_start, range_end, k] bands"
    for entry in schedule:
        band_problem = _band_problem(entry, k)
        if band_problem:
            return band_problem
    return _order_problem(normalised(cast(list[Band], schedule)))


def normalised(schedule: Sequence[Sequence[int]]) -> list[Band]:
    """The bands sorted by their first batch size, as vLLM reads them."""
    return sorted((int(start), int(end), int(band_k)) for start, end, band_k in schedule)


def stored(bands: list[Band]) -> list[list[int]]:
    """The schedule as the arm's params hold it and --speculative-config passes it (JSON lists)."""
    return [list(band) for band in bands]


def _band_values(outcomes: Mapping[int, str], k: int) -> list[tuple[int, int]]:
    """(level, k to run there) for the settled levels, in order: k where the arm was settled
    faster, 0 where slower, equivalent or not worth it. An open or inconclusive level says
    nothing either way and is left out: the settled levels around it place the band edge."""
    settled = [(level, outcome) for level, outcome in outcomes.items() if outcome in sequential.SETTLED]
    return sorted((level, k if outcome == sequential.FASTER else 0) for level, outcome in settled)


def derive(outcomes: Mapping[int, str], *, k: int, max_batch: int) -> list[Band] | None:
    """The batch-size schedule the measurements recommend for an arm of k, from each measured
    concurrency level's settled outcome (experiments/measurement/stats/sequential.py's words), with
    the bands covering batch sizes 1 to `max_batch` (max_num_seqs, or the top level measured).

    A closed-loop level of concurrency c keeps c requests in the server, so in its steady
    decode steps the scheduler's batch size is c: the level stands for that batch size. Between
    two measured levels a and b with different answers, the bands part at the geometric mean
    (batch sizes up to isqrt(a * b) take a's): the levels are spaced on a log scale, and a
    step's cost grows about linearly in the log of the batch across that span. Below the lowest
    level the lowest's answer holds, above the highest the highest's.

    None when no schedule is worth deploying: no level settled (nothing measured), none
    settled faster (deploy no speculation), or every settled level faster (deploy plain k)."""
    if k < 1 or max_batch < 1:
        raise ValueError(f"k ({k}) and the max batch size ({max_batch}) must be at least 1")
    if any(level > max_batch or level < 1 for level in outcomes):
        raise ValueError(f"every level must be from 1 to the max batch size ({max_batch}): {sorted(outcomes)}")
    values = _band_values(outcomes, k)
    if len({value for _, value in values}) < 2:
        return None
    bands: list[Band] = []
    start = 1
    for (level, value), (next_level, next_value) in pairwise(values):
        if value != next_value:
            end = isqrt(level * next_level)
            bands.append((start, end, value))
            start = end + 1
    bands.append((start, max_batch, values[-1][1]))
    return bands
