"""The finished experiment the results page and downloads tests read."""

import pytest

from tests.factories import (
    seed_finished_experiment,
)


@pytest.fixture
def finished(db):
    return seed_finished_experiment(slo_tpot_ms=20.0, temperature=0.7)
