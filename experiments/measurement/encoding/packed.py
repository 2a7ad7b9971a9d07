"""How a request's number lists are stored: packed little-endian bytes in a bytea column.

PostgreSQL copies a bytea value as it comes, where an array column parses, checks and
writes every element (docs/benchmarks.md, "Ingestion"); the load generator records into
`array.array` of the same element type, so packing a request is one copy of its buffer.
Each element type keeps every value the array column held: chunk arrival times as float64
(the exact 8 bytes), chunk tokens and output token ids as uint32, per-step accepted and
proposed counts as uint16. This module is the one place that knows these layouts; it is
plain Python and numpy, shared by the load generator, the worker that writes the rows and
the analysis, API and exports that read them (through experiments.models.fields.PackedArrayField).
"""

import sys
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, overload

import numpy as np


@dataclass(frozen=True)
class Packing:
    typecode: str  # array.array's, in the host's byte order
    dtype: str  # numpy's, little-endian as stored

    def new(self, values: Iterable[float] = ()) -> "array[Any]":
        """An array.array to record into (of ints or floats, by the typecode)."""
        return array(self.typecode, values)


FLOAT64 = Packing("d", "<f8")
UINT32 = Packing("I", "<u4")
UINT16 = Packing("H", "<u2")
PACKINGS = {"float64": FLOAT64, "uint32": UINT32, "uint16": UINT16}

for _packing in PACKINGS.values():
    if array(_packing.typecode).itemsize != np.dtype(_packing.dtype).itemsize:
        raise RuntimeError(f"array.array {_packing.typecode!r} is not {_packing.dtype} on this host")


@overload
def pack(values: None, packing: Packing) -> None: ...
@overload
def pack(values: Iterable[float], packing: Packing) -> bytes: ...
def pack(values: Iterable[float] | None, packing: Packing) -> bytes | None:
    """The stored bytes; None stays None. An array.array of the packing's type is copied as
    it is; anything else is converted first, which refuses values out of the type's range."""
    if values is None:
        return None
    if not isinstance(values, array) or values.typecode != packing.typecode:
        values = array(packing.typecode, values)
    if sys.byteorder != "little":
        values = array(packing.typecode, values)
        values.byteswap()
    return values.tobytes()


def unpack_array(packed: bytes | memoryview | None, packing: Packing) -> np.ndarray | None:
    """The stored values as a read-only numpy array (no copy); None stays None."""
    if packed is None:
        return None
    return np.frombuffer(packed, packing.dtype)


def unpack(packed: bytes | memoryview | None, packing: Packing) -> list[Any] | None:
    """The stored values as a list of Python numbers (ints or floats, by the packing); None stays None."""
    values = unpack_array(packed, packing)
    return None if values is None else values.tolist()


def unpack_many(packed: Iterable[bytes], packing: Packing) -> tuple[np.ndarray, np.ndarray]:
    """Many packed lists at once: all their values in one array, and where each list starts."""
    packed = list(packed)
    lengths = np.fromiter(map(len, packed), np.int64, len(packed)) // np.dtype(packing.dtype).itemsize
    starts = np.cumsum(lengths) - lengths
    return np.frombuffer(b"".join(packed), packing.dtype), starts
