"""The design on the experiment form (experiments/definition/forms/question.py), stored as the
model takes it; the break-even search's fields are in test_search.py."""

import pytest

from tests.definition.forms.helpers import bind
from tests.factories import form_data

# The form reads the user's teams and prompt sets.
pytestmark = pytest.mark.django_db


def test_design_options_are_stored_as_the_model_takes_them():
    form, _ = bind(
        form_data(equivalence_margin="2.5", aa_replicate="on", server_per_block=None, sequential=None, repetitions="3")
    )

    assert form.is_valid(), form.errors
    fields = form.experiment_fields()
    assert fields["equivalence_margin"] == pytest.approx(0.025)
    assert (fields["aa_replicate"], fields["server_per_block"], fields["repetitions"]) == (True, False, 3)
