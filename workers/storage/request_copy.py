"""A run's request rows as one buffer in PostgreSQL's binary COPY format.

Why not psycopg's `write_row`: it converts every element of every list through Python,
about 1,000 rows a second on the development machine, and PostgreSQL then parses each
number back from text. Here the fixed-size columns are converted for all the run's rows at
once with numpy, the number lists are the requests' array.array buffers packed as they are
(experiments/measurement/encoding/packed.py), and the rows are joined from slices of those buffers: the values
stored are the ones recorded (floats go as their exact 8 bytes). The layout is PostgreSQL's
"Binary Format" of COPY: a signature, then per row a 16-bit field count and each field as a
32-bit length (-1 for NULL) followed by the value in the type's binary send format, then a
-1 trailer."""

from collections.abc import Sequence
from itertools import chain

import numpy as np

from experiments.measurement.encoding.packed import FLOAT64, UINT16, UINT32, pack
from workers.measure.loadgen import RequestResult

SIGNATURE = b"PGCOPY\n\xff\r\n\0" + bytes(8)  # the signature, then 32-bit flags and header extension length
TRAILER = b"\xff\xff"
# The field count, then each leading non-null field's length ("l_…") and value.
_FIXED = np.dtype(
    [
        ("fields", ">i2"),
        *(("l_run", ">i4"), ("run", ">i8"), ("l_prompt", ">i4"), ("prompt", ">i4"), ("l_input", ">i4")),
        *(("input", ">i4"), ("l_output", ">i4"), ("output", ">i4"), ("l_sent", ">i4"), ("sent", ">f8")),
    ]
)
FIELDS = 23


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


def _bytes(values: Sequence[bytes | None]) -> list[Segment]:
    """A text or bytea field: its length, then its bytes; length -1 for NULL."""
    lengths = np.fromiter((-1 if v is None else len(v) for v in values), np.int64, len(values))
    return [
        Segment(np.full(len(values), 4), lengths.astype(">i4")),
        Segment(np.maximum(lengths, 0), np.frombuffer(b"".join(filter(None, values)), np.uint8)),
    ]


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


def _segments(run_id: int, requests: Sequence[RequestResult]) -> list[Segment]:
    """Every field of every row, in the order of workers.storage.ingest.REQUEST_COLUMNS."""
    return [
        _fixed(run_id, requests),
        _float([r.ttft_ms for r in requests]),
        _float([r.e2e_ms for r in requests]),
        _float([r.tpot_ms for r in requests]),
        *_bytes([pack(r.chunk_times_ms, FLOAT64) for r in requests]),
        *_bytes([pack(r.chunk_tokens, UINT32) for r in requests]),
        *_bytes([(r.finish_reason or "").encode() for r in requests]),
        *_bytes([(r.error or "").encode() for r in requests]),
        _float([r.spec_acceptance_length for r in requests]),
        *_bytes([pack(r.spec_accepted_per_step, UINT16) for r in requests]),
        *_bytes([pack(r.spec_proposed_per_step, UINT16) for r in requests]),
        *_bytes([pack(r.output_token_ids, UINT32) for r in requests]),
        _float([r.queue_ms for r in requests]),
        _float([r.server_decode_ms for r in requests]),
        _float([r.server_ttft_ms for r in requests]),
        _float([r.server_queue_ms for r in requests]),
        _float([r.server_tpot_ms for r in requests]),
        _float([r.stream.span_ratio for r in requests]),
        _float([r.stream.longest_wait_steps for r in requests]),
    ]


def copy_buffer(run_id: int, requests: Sequence[RequestResult]) -> bytes:
    """The whole COPY stream (signature, rows, trailer) of a run's requests."""
    if not requests:
        return SIGNATURE + TRAILER
    pieces = []
    for segment in _segments(run_id, requests):
        ends = np.cumsum(segment.sizes).tolist()
        data = segment.data.tobytes()  # slices of bytes cost far less than slices of a memoryview
        pieces.append([data[start:end] for start, end in zip([0, *ends[:-1]], ends, strict=True)])
    # Row after row, each row's pieces in column order.
    return b"".join([SIGNATURE, *chain.from_iterable(zip(*pieces, strict=True)), TRAILER])
