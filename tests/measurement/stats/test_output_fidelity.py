"""experiments/measurement/stats/output_fidelity.py against hand-computed cases. No database."""

import pytest

from experiments.measurement.stats import output_fidelity


def test_first_divergence():
    assert output_fidelity.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert output_fidelity.first_divergence([1, 2, 3], [1, 9, 3]) == 1
    assert output_fidelity.first_divergence([1, 2, 3], [1, 2]) == 2
    assert output_fidelity.first_divergence([], [5]) == 0


def test_diverges_more_is_a_one_sided_fisher_test():
    # Arm: 8 of 10 differ; replicate: 1 of 10. Hypergeometric tail P(X >= 8) with 9
    # "differ" among 20, 10 drawn: [C(9,8)C(11,2) + C(9,9)C(11,1)] / C(20,10)
    # = (9*55 + 11) / 184756 = 506 / 184756 = 0.0027387.
    assert output_fidelity.diverges_more(8, 10, 1, 10) == pytest.approx(506 / 184756)
    # The other way round it is no evidence at all.
    assert output_fidelity.diverges_more(1, 10, 8, 10) > 0.99
    assert output_fidelity.diverges_more(1, 0, 1, 10) is None
