"""The lists of numbers the experiment form reads (experiments/rules/number_lists.py): concurrency
levels and synthetic acceptance lengths, each refusal a sentence the form shows. No database."""

import pytest

from experiments.rules.number_lists import MAX_CONCURRENCY, parse_concurrency_levels, parse_synthetic_sweep


def test_concurrency_levels_are_distinct_whole_numbers_in_order():
    assert parse_concurrency_levels("8, 1 4") == [1, 4, 8]
    for text, message in (
        ("", "at least one"),
        ("1, x", "not a whole number"),
        ("0", "at least 1"),
        (str(MAX_CONCURRENCY + 1), f"at most {MAX_CONCURRENCY}"),
        ("9" * 5000, f"at most {MAX_CONCURRENCY}"),
        ("4, 04", "listed twice"),
        (", ".join(str(n) for n in range(1, 14)), "At most 12 levels"),
    ):
        with pytest.raises(ValueError, match=message):
            parse_concurrency_levels(text)


def test_sweep_lengths_are_between_1_and_k_plus_1():
    assert parse_synthetic_sweep("2.5, 1.5;2", k=3) == [1.5, 2.0, 2.5]
    assert parse_synthetic_sweep("", k=3) == []
    assert parse_synthetic_sweep("1, 4", k=3) == [1.0, 4.0]
    for text, message in (
        ("4.5", r"outside 1 to k \+ 1 = 4"),
        ("0.5", "outside"),
        ("2, 2.0", "twice"),
        ("x", "not a number"),
    ):
        with pytest.raises(ValueError, match=message):
            parse_synthetic_sweep(text, k=3)
    with pytest.raises(ValueError, match="At most 6"):
        parse_synthetic_sweep("1, 1.5, 2, 2.5, 3, 3.5, 4", k=3)
