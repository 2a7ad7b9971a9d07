"""Output fidelity: where two outputs first differ, and whether an arm's outputs differ from
the baseline's more often than the A/A replicate's do (Fisher's exact test, from scipy).
Plain Python, no Django.
"""

from collections.abc import Sequence

from scipy import stats as scipy_stats


def first_divergence(reference: Sequence[int], other: Sequence[int]) -> int | None:
    """Index of the first output token where two outputs differ; None when they are equal.

    An output that is a strict prefix of the other differs at the shorter one's length.
    """
    for index, (a, b) in enumerate(zip(reference, other, strict=False)):
        if a != b:
            return index
    return None if len(reference) == len(other) else min(len(reference), len(other))


def diverges_more(arm_differ: int, arm_total: int, reference_differ: int, reference_total: int) -> float | None:
    """One-sided Fisher exact p-value that the arm's outputs differ from the baseline's more
    often than the reference's (the A/A replicate's) do; None without counts on a side.

    The counts are of independent units: prompts, not prompts × blocks (a prompt's outputs
    in different blocks differ together). Both sides compare the same prompts with the same
    baseline runs, so their differences are positively correlated and the test, which
    treats the two samples as independent, is conservative."""
    if not arm_total or not reference_total:
        return None
    table = [[arm_differ, arm_total - arm_differ], [reference_differ, reference_total - reference_differ]]
    return float(scipy_stats.fisher_exact(table, alternative="greater").pvalue)
