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
Free of Django.
"""

from collections.abc import Sequence
from itertools import pairwise
from typing import cast

KEY = "num_speculative_tokens_per_batch_size"

# (range_start, range_end, k): batch sizes range_start..range_end inclusive draft k tokens.
Band = tuple[int, int, int]


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
