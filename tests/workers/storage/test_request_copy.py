"""The binary COPY of request rows stores exactly what psycopg's own row-by-row COPY stores,
and what is stored reads back as the values the load generator recorded."""

import random

import pytest
from django.db import connection

from experiments.measurement.encoding.packed import FLOAT64, UINT16, UINT32, pack
from experiments.measurement.encoding.token_ids import pack_token_ids, unpack_token_ids
from experiments.measurement.engine.stream_fidelity import StreamCheck
from experiments.models import RequestRecord
from tests.factories import RunFactory
from workers.bench.requests import streamed_request
from workers.measure.loadgen import RequestResult
from workers.storage.ingest import REQUEST_COLUMNS, _copy_requests

pytestmark = pytest.mark.django_db


def _reference_copy(run_id: int, requests: list[RequestResult]) -> None:
    """psycopg's text COPY, one row at a time: the reference for what must be stored."""
    sql = f"COPY {RequestRecord._meta.db_table} ({', '.join(REQUEST_COLUMNS)}) FROM STDIN"
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        for r in requests:
            copy.write_row(
                (
                    run_id, r.prompt_index, r.input_tokens, r.output_tokens, r.sent_at_s, r.ttft_ms, r.e2e_ms,
                    r.tpot_ms, pack(r.chunk_times_ms, FLOAT64), pack(r.chunk_tokens, UINT32), r.finish_reason or "",
                    r.error or "", r.spec_acceptance_length, pack(r.spec_accepted_per_step, UINT16),
                    pack(r.spec_proposed_per_step, UINT16), pack_token_ids(r.output_token_ids), r.queue_ms,
                    r.server_decode_ms, r.server_ttft_ms, r.server_queue_ms, r.server_tpot_ms, r.stream.span_ratio,
                    r.stream.longest_wait_steps,
                )
            )  # fmt: skip


def _edge_cases() -> list[RequestResult]:
    rng = random.Random(3)
    simulated = [streamed_request(rng, i, 4 if i % 2 else None, 0.6) for i in range(4)]
    return [
        *simulated,
        # A failed request: no timings, empty arrays, an error with a tab, a newline, a backslash and non-ASCII.
        RequestResult(prompt_index=4, error="HTTP 500:\tbad\nline \\ é ✓", sent_at_s=1 / 3),
        # One token: no TPOT, speculative lists present but empty, a tiny and a huge float, a long id.
        RequestResult(
            prompt_index=5,
            input_tokens=2**31 - 1,
            output_tokens=1,
            ttft_ms=5e-324,
            e2e_ms=1.7976931348623157e308,
            chunk_times_ms=[0.1 + 0.2],
            chunk_tokens=[1],
            output_token_ids=[2**32 - 1],
            finish_reason="stop",
            spec_accepted_per_step=[],
            spec_proposed_per_step=[],
            queue_ms=0.0,
            server_decode_ms=0.0,
        ),
        RequestResult(
            prompt_index=6,
            output_tokens=3,
            spec_accepted_per_step=[65535, 0],
            spec_proposed_per_step=[1],
            server_decode_ms=12.345678901234567,
            server_ttft_ms=0.0,
            server_queue_ms=1e-300,
            server_tpot_ms=6.1728394506172835,
            stream=StreamCheck(span_ratio=0.1 + 0.2, longest_wait_steps=1.7976931348623157e308, steps=2),
        ),
    ]


def _stored(run_id: int) -> list[tuple]:
    columns = [c for c in REQUEST_COLUMNS if c != "run_id"]
    rows = RequestRecord.objects.filter(run_id=run_id).order_by("prompt_index").values_list(*columns)
    return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in rows]


def test_binary_copy_stores_what_the_row_by_row_copy_stores():
    requests = _edge_cases()
    reference, binary = RunFactory(), RunFactory()
    _reference_copy(reference.id, requests)
    _copy_requests(binary.id, requests)
    assert _stored(binary.id) == _stored(reference.id)
    assert len(_stored(binary.id)) == len(requests)


def test_no_requests_copy_nothing():
    run = RunFactory()
    _copy_requests(run.id, [])
    assert not RequestRecord.objects.filter(run=run).exists()


def test_stored_lists_read_back_as_recorded():
    requests = _edge_cases()
    run = RunFactory()
    _copy_requests(run.id, requests)
    columns = ("chunk_times_ms", "chunk_tokens", "spec_accepted_per_step", "spec_proposed_per_step")
    stored = RequestRecord.objects.filter(run=run).order_by("prompt_index")
    for record, recorded in zip(stored, requests, strict=True):
        for column in columns:
            value = getattr(recorded, column)
            assert getattr(record, column) == (None if value is None else list(value)), column
        assert unpack_token_ids(record.output_token_ids) == list(recorded.output_token_ids)
