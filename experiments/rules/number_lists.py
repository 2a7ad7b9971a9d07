"""Lists of numbers a user types into the experiment form: concurrency levels ("1, 4, 8") and
synthetic acceptance lengths ("1.5, 2, 2.5"). Free of Django: each reader returns the list in
order or raises ValueError with a sentence the form shows as it is."""

import re
from typing import TypeVar

MAX_CONCURRENCY = 1024
MAX_CONCURRENCY_LEVELS = 12
MAX_SWEEP_LENGTHS = 6
Number = TypeVar("Number", int, float)


def parse_concurrency_levels(text: str) -> list[int]:
    tokens = [t for t in re.split(r"[,\s]+", text.strip()) if t]
    if not tokens:
        raise ValueError("Give at least one concurrency level.")
    levels: list[int] = []
    for token in tokens:
        if not re.fullmatch(r"[+-]?\d+", token):
            raise ValueError(f"“{token[:20]}” is not a whole number.")
        if len(token.lstrip("+-0")) > len(str(MAX_CONCURRENCY)):
            # int() of a very long digit string is slow, and refused past 4,300 digits.
            raise ValueError(f"Concurrency must be at most {MAX_CONCURRENCY} (got {token[:20]}…).")
        level = int(token)
        if level < 1:
            raise ValueError(f"Concurrency must be at least 1 (got {level}).")
        if level > MAX_CONCURRENCY:
            raise ValueError(f"Concurrency must be at most {MAX_CONCURRENCY} (got {level}).")
        _add_once(levels, level, token)
    return _at_most(levels, MAX_CONCURRENCY_LEVELS, "levels")


def _add_once(values: list[Number], value: Number, as_given: str) -> None:
    if value in values:
        raise ValueError(f"{as_given} is listed twice.")
    values.append(value)


def _at_most(values: list[Number], most: int, noun: str) -> list[Number]:
    """The values in order, or a refusal when there are more than `most`."""
    if len(values) > most:
        raise ValueError(f"At most {most} {noun} (got {len(values)}).")
    return sorted(values)


def parse_synthetic_sweep(text: str, *, k: int) -> list[float]:
    """'1.5, 2, 2.5' → [1.5, 2.0, 2.5]: distinct mean acceptance lengths in [1, k + 1], the
    range vLLM accepts for synthetic_acceptance_length (τ counts the bonus token)."""
    lengths: list[float] = []
    for item in filter(None, (item.strip() for item in re.split(r"[,;]", text))):
        try:
            length = float(item)
        except ValueError:
            raise ValueError(f"“{item[:20]}” is not a number.") from None
        if not 1 <= length <= k + 1:
            raise ValueError(f"{item[:20]} is outside 1 to k + 1 = {k + 1}: τ counts the bonus token.")
        _add_once(lengths, length, item)
    return _at_most(lengths, MAX_SWEEP_LENGTHS, "lengths")
