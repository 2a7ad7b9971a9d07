"""The stored layout of a request's number lists (experiments/measurement/encoding/packed.py). No
database: the model field that reads and writes it is tested in tests/models/test_fields.py."""

import struct

import pytest

from experiments.measurement.encoding.packed import FLOAT64, UINT16, UINT32, pack, unpack, unpack_array, unpack_many

CASES = [
    (FLOAT64, [0.1 + 0.2, 5e-324, 1.7976931348623157e308, -0.0, 40.0], "<5d"),
    (UINT32, [0, 1, 2**32 - 1], "<3I"),
    (UINT16, [0, 4, 65535], "<3H"),
]


@pytest.mark.parametrize(("packing", "values", "layout"), CASES)
def test_packed_bytes_are_little_endian_of_the_element_type(packing, values, layout):
    expected = struct.pack(layout, *values)
    assert pack(values, packing) == expected
    assert pack(packing.new(values), packing) == expected
    assert unpack(expected, packing) == values
    assert unpack(memoryview(expected), packing) == values
    assert unpack_array(expected, packing).tolist() == values


@pytest.mark.parametrize("packing", [FLOAT64, UINT32, UINT16])
def test_empty_and_none_stay_apart(packing):
    assert pack([], packing) == pack(packing.new(), packing) == b""
    assert unpack(b"", packing) == []
    assert pack(None, packing) is None
    assert unpack(None, packing) is None


@pytest.mark.parametrize(("packing", "value"), [(UINT16, 65536), (UINT16, -1), (UINT32, 2**32), (UINT32, 1.5)])
def test_values_that_do_not_fit_are_refused(packing, value):
    with pytest.raises((OverflowError, TypeError)):
        pack([value], packing)


def test_unpack_many_gives_all_values_and_where_each_list_starts():
    values, starts = unpack_many([pack([1, 2], UINT32), b"", pack([3], UINT32)], UINT32)
    assert values.tolist() == [1, 2, 3]
    assert starts.tolist() == [0, 2, 2]
    values, starts = unpack_many([], FLOAT64)
    assert (len(values), len(starts)) == (0, 0)
