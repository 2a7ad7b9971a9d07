"""A run's request rows as one buffer in PostgreSQL's binary COPY format.

Why not psycopg's `write_row`: it converts every element of every array through Python
(the float lists of chunk times dominate), about 1,000 rows a second on the development
machine, and PostgreSQL then parses each number back from text. Here each column is
converted for all the run's rows at once with numpy, and the rows are joined from
slices of those buffers: the values stored are the same (floats go as their exact 8 bytes,
so nothing is rounded on the way). The layout is PostgreSQL's "Binary Format" of COPY:
a signature, then per row a 16-bit field count and each field as a 32-bit length (-1
for NULL) followed by the value in the type's binary send format, then a -1 trailer.
"""

from collections.abc import Callable, Sequence
from itertools import chain

import numpy as np

from workers.loadgen import RequestResult

SIGNATURE = b"PGCOPY\n\xff\r\n\0" + bytes(8)  # the signature, then 32-bit flags and header extension length
TRAILER = b"\xff\xff"
# Element type oids and big-endian element formats of the array columns.
FLOAT8, INT4, INT2 = (701, ">f8"), (23, ">i4"), (21, ">i2")
_ARRAY_HEAD = np.dtype([(name, ">i4") for name in ("length", "ndim", "flags", "oid", "dim", "lower")])
# The field count, then each leading non-null field's length ("l_…") and value.
_FIXED = np.dtype(
    [
        ("fields", ">i2"),
        *(("l_run", ">i4"), ("run", ">i8"), ("l_prompt", ">i4"), ("prompt", ">i4"), ("l_input", ">i4")),
        *(("input", ">i4"), ("l_output", ">i4"), ("output", ">i4"), ("l_sent", ">i4"), ("sent", ">f8")),
    ]
)
FIELDS = 17


class Segment:
    """Bytes that follow one another in every row: a size per row and their bytes, row after row."""

    def __init__(self, sizes: np.ndarray, data: np.ndarray):
        self.sizes, self.data = sizes.astype(np.int64), data.view(np.uint8).reshape(-1)


def _records(records: np.ndarray, sizes: np.ndarray) -> Segment:
    """The first sizes[i] bytes of each fixed-size record."""
    width = records.dtype.itemsize
    as_bytes = records.view(np.uint8).reshape(len(records), width)
    return Segment(sizes, as_bytes[np.arange(width) < sizes[:, None]])


def _float(values: Sequence[float | None]) -> Segment:
    """A nullable float8 field: length 8 and the value, or length -1."""
    present = np.fromiter((v is not None for v in values), bool, len(values))
    records = np.zeros(len(values), [("length", ">i4"), ("value", ">f8")])
    records["length"] = np.where(present, 8, -1)
    records["value"][present] = [v for v in values if v is not None]
    return _records(records, np.where(present, 12, 4))


def _bytes(values: Sequence[bytes]) -> list[Segment]:
    """A non-null text or bytea field: its length, then its bytes."""
    lengths = np.fromiter(map(len, values), np.int64, len(values))
    return [
        Segment(np.full(len(values), 4), lengths.astype(">i4")),
        Segment(lengths, np.frombuffer(b"".join(values), np.uint8)),
    ]


def _array(lists: Sequence[Sequence[float] | None], element: tuple[int, str]) -> list[Segment]:
    """A one-dimensional array field (NULL for None): the array header, then each element
    as its 32-bit length and value; an empty array has no dimension."""
    oid, fmt = element
    width = np.dtype(fmt).itemsize
    counts = np.fromiter((-1 if x is None else len(x) for x in lists), np.int64, len(lists))
    present = np.maximum(counts, 0)
    head = np.zeros(len(lists), _ARRAY_HEAD)
    head["length"] = np.where(counts < 0, -1, np.where(counts == 0, 12, 20 + counts * (4 + width)))
    head["ndim"], head["oid"], head["dim"], head["lower"] = counts > 0, oid, present, 1
    total = int(present.sum())
    values = np.fromiter(chain.from_iterable(x for x in lists if x), np.dtype(fmt).newbyteorder("="), total)
    elements = np.empty(total, [("length", ">i4"), ("value", fmt)])
    elements["length"], elements["value"] = width, values
    head_sizes = np.where(counts < 0, 4, np.where(counts == 0, 16, 24))
    return [_records(head, head_sizes), Segment(present * (4 + width), elements)]


def _fixed(run_id: int, requests: Sequence[RequestResult]) -> Segment:
    """The field count and the non-null fixed-size fields that open every row."""
    records = np.empty(len(requests), _FIXED)
    records["fields"], records["run"] = FIELDS, run_id
    for name, width in (("run", 8), ("prompt", 4), ("input", 4), ("output", 4), ("sent", 8)):
        records[f"l_{name}"] = width
    for name, attribute in (("prompt", "prompt_index"), ("input", "input_tokens"), ("output", "output_tokens")):
        records[name] = [getattr(r, attribute) for r in requests]
    records["sent"] = [r.sent_at_s for r in requests]
    return Segment(np.full(len(requests), _FIXED.itemsize), records)


def _segments(run_id: int, requests: Sequence[RequestResult], pack: Callable[[Sequence[int]], bytes]) -> list[Segment]:
    """Every field of every row, in the order of workers.ingest.REQUEST_COLUMNS."""
    return [
        _fixed(run_id, requests),
        _float([r.ttft_ms for r in requests]),
        _float([r.e2e_ms for r in requests]),
        _float([r.tpot_ms for r in requests]),
        *_array([r.chunk_times_ms for r in requests], FLOAT8),
        *_array([r.chunk_tokens for r in requests], INT4),
        *_bytes([(r.finish_reason or "").encode() for r in requests]),
        *_bytes([(r.error or "").encode() for r in requests]),
        _float([r.spec_acceptance_length for r in requests]),
        *_array([r.spec_accepted_per_step for r in requests], INT2),
        *_array([r.spec_proposed_per_step for r in requests], INT2),
        *_bytes([pack(r.output_token_ids) for r in requests]),
        _float([r.queue_ms for r in requests]),
    ]


def copy_buffer(run_id: int, requests: Sequence[RequestResult], pack: Callable[[Sequence[int]], bytes]) -> bytes:
    """The whole COPY stream (signature, rows, trailer) of a run's requests; `pack` turns a
    request's output token ids into the stored bytes."""
    if not requests:
        return SIGNATURE + TRAILER
    pieces = []
    for segment in _segments(run_id, requests, pack):
        ends = np.cumsum(segment.sizes).tolist()
        data = segment.data.tobytes()  # slices of bytes cost far less than slices of a memoryview
        pieces.append([data[start:end] for start, end in zip([0, *ends[:-1]], ends, strict=True)])
    # Row after row, each row's pieces in column order.
    return b"".join([SIGNATURE, *chain.from_iterable(zip(*pieces, strict=True)), TRAILER])
