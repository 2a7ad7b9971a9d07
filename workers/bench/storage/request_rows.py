"""Fill a benchmark database with per-request rows, fast, and say what they cost on disk.

Used by the history benchmark (workers/bench/pages/history.py, --request-rows) to put years
of per-request rows under the pages it times. Every succeeded run without request rows gets
`per_run` of them, newest runs first, until `total` rows are written. The rows are those of
workers/bench/requests.py (a baseline-like and a speculative template of `per_run` requests
each, with chunk times, tokens per chunk, output token ids and per-step acceptance lists),
encoded once with workers/storage/request_copy.py; each run's copy only gets its own run id
written in, and goes in with binary COPY. Indexes are those the migrations made, maintained
during the load as in production.
"""

import random
import struct
import time
from dataclasses import dataclass

import numpy as np
from django.db import connection

from experiments.models import RequestRecord, Run
from workers.bench.requests import streamed_request
from workers.storage.ingest import REQUEST_COLUMNS
from workers.storage.request_copy import SIGNATURE, TRAILER, copy_buffer

OUTPUT_TOKENS = 64
RUNS_PER_COPY = 50


def _run_id_offsets(rows: bytes) -> np.ndarray:
    """Where each row's run id (its first field, 8 bytes) starts in a COPY stream's rows."""
    offsets, position = [], 0
    while position < len(rows):
        (fields,) = struct.unpack_from(">h", rows, position)
        offsets.append(position + 2 + 4)
        position += 2
        for _ in range(fields):
            (length,) = struct.unpack_from(">i", rows, position)
            position += 4 + max(length, 0)
    return np.array(offsets)


class Template:
    """One run's rows in binary COPY format, copied for any run id."""

    def __init__(self, per_run: int, k: int | None, seed: int):
        rng = random.Random(seed)
        requests = [streamed_request(rng, i, k, 0.7, OUTPUT_TOKENS) for i in range(per_run)]
        self.rows = np.frombuffer(copy_buffer(0, requests)[len(SIGNATURE) : -len(TRAILER)], np.uint8)
        self.positions = _run_id_offsets(self.rows.tobytes())[:, None] + np.arange(8)

    def for_run(self, run_id: int) -> bytes:
        rows = self.rows.copy()
        rows[self.positions] = np.frombuffer(struct.pack(">q", run_id), np.uint8)
        return rows.tobytes()


@dataclass(frozen=True)
class Seeded:
    """Rows written and their seconds; the table's rows and bytes with indexes and TOAST after."""

    written: int
    seconds: float
    rows: int
    bytes: int


def _runs_without_rows(limit: int) -> list[int]:
    runs = Run.objects.filter(status=Run.Status.SUCCEEDED, requests__isnull=True).order_by("-id")
    return list(runs.values_list("id", flat=True)[:limit])


def seed_request_rows(total: int, per_run: int = 200) -> Seeded:
    """Write `total` request rows (fewer when the runs run out)."""
    templates = [Template(per_run, None, 1), Template(per_run, 4, 2)]
    run_ids = _runs_without_rows(-(-total // per_run))
    table = RequestRecord._meta.db_table
    sql = f"COPY {table} ({', '.join(REQUEST_COLUMNS)}) FROM STDIN WITH (FORMAT BINARY)"
    start = time.perf_counter()
    with connection.cursor() as cursor:
        for first in range(0, len(run_ids), RUNS_PER_COPY):
            with cursor.cursor.copy(sql) as copy:
                copy.write(SIGNATURE)
                for run_id in run_ids[first : first + RUNS_PER_COPY]:
                    copy.write(templates[run_id % 2].for_run(run_id))
                copy.write(TRAILER)
            if first // RUNS_PER_COPY % 100 == 99:
                print(f"    {(first + RUNS_PER_COPY) * per_run:,} request rows", flush=True)
        seconds = time.perf_counter() - start
        cursor.execute(f"VACUUM ANALYZE {table}")
        cursor.execute("SELECT count(*), pg_total_relation_size(%s) FROM experiments_requestrecord", [table])
        rows, size = cursor.fetchone()
    return Seeded(len(run_ids) * per_run, seconds, rows, size)


def rows_in_table() -> int:
    """The request table's row count as PostgreSQL's statistics know it (exact after the
    VACUUM ANALYZE above): counting 20 million rows would read the whole table."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [RequestRecord._meta.db_table]
        )
        return max(0, int(cursor.fetchone()[0]))


def report(seeded: Seeded) -> None:
    """The rows per second of the load and the table's size per million rows."""
    print(
        f"  request rows: {seeded.written:,} written in {seeded.seconds:.0f} s "
        f"({seeded.written / max(seeded.seconds, 1e-9):,.0f} rows/s); the table holds {seeded.rows:,}, "
        f"{seeded.bytes / 2**30:.2f} GiB with indexes and TOAST, "
        f"{seeded.bytes / max(seeded.rows, 1) * 1e6 / 2**30:.2f} GiB per million rows",
        flush=True,
    )
