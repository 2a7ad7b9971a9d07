"""PackedArrayField (experiments/models/fields.py): the model field that stores a request's number
lists packed (experiments/measurement/encoding/packed.py)."""

from array import array

import pytest

from experiments.models.fields import PackedArrayField
from tests.factories import RequestRecordFactory


def test_field_deconstructs_with_its_element_type():
    _, path, _, kwargs = PackedArrayField(element="uint16", null=True).deconstruct()
    assert (path, kwargs) == ("experiments.models.fields.PackedArrayField", {"element": "uint16", "null": True})


@pytest.mark.django_db
def test_model_reads_lists_back_as_written():
    record = RequestRecordFactory(
        chunk_times_ms=array("d", [12.5, 0.1 + 0.2]),
        chunk_tokens=[1, 4],
        spec_accepted_per_step=[],
        spec_proposed_per_step=None,
    )
    record.refresh_from_db()
    assert record.chunk_times_ms == [12.5, 0.1 + 0.2]
    assert record.chunk_tokens == [1, 4]
    assert (record.spec_accepted_per_step, record.spec_proposed_per_step) == ([], None)
