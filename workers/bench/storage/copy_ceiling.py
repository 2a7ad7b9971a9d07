"""What PostgreSQL itself takes of binary COPY on this machine: rows and MB a second.

The ceiling under `ingest_run` (workers/bench/storage/ingest.py): no Django, no encoding in the
timed part. Each case's rows are encoded once in PostgreSQL's binary COPY format (500
distinct rows with realistic values: chunk times as cumulative sums of 20-40 ms gaps, token
ids from a 32,000-token vocabulary); each batch only gets its own run id written in, and
goes in with psycopg's `copy()` and a commit, like one run. Only the COPY and the commit
are timed. Cases, each into a fresh table (after a CHECKPOINT, so each starts alike):

  1. rows shaped like a request row: 12 scalar columns, a 1 KB and a 512 B bytea; no index
  2. the same with the primary key (bigserial) and unique (run_id, prompt_index)
  3. the scalar columns only (about 100 B a row), with both indexes
  4. case 2 with the two bytea at half size (float32 chunk times, uint16 token ids)
  5. case 2 with the bytea columns STORAGE MAIN, lz4 (pglz where lz4 is missing) and
     toast_tuple_target=128: compressed in the row, if PostgreSQL compresses them
  6. case 2 with the foreign key to a table of runs that experiments_requestrecord has
     (DEFERRABLE INITIALLY DEFERRED, as Django makes it: checked at each commit)
  7. case 3 with that foreign key: narrow rows shaped like the real table's constraints
  8. case 3 with each run's arrays stored once: the 500 rows' chunk times and token ids
     joined into one row of a second table (bytea STORAGE EXTERNAL: out of line, not
     compressed), inserted in the run's transaction

It prints rows/s, MB/s of the COPY stream, bytes a row on disk (table, TOAST and indexes)
and in the WAL (cluster-wide, so other databases' writes count too), the server's settings
and the load average. The scratch database it creates is dropped at the end.
"""

import os
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import psycopg

from workers.storage.request_copy import SIGNATURE, TRAILER

SETTINGS = ("server_version", "synchronous_commit", "wal_level", "fsync", "shared_buffers", "default_toast_compression")
# run_id first: a batch is its rows' bytes with only the run id changed (see _batch).
SCALARS = (
    ("run_id", "bigint", ">q"),
    ("prompt_index", "integer", ">i"),
    ("input_tokens", "integer", ">i"),
    ("output_tokens", "integer", ">i"),
    ("sent_at_s", "double precision", ">d"),
    ("ttft_ms", "double precision", ">d"),
    ("e2e_ms", "double precision", ">d"),
    ("tpot_ms", "double precision", ">d"),
    ("spec_acceptance_length", "double precision", ">d"),
    ("queue_ms", "double precision", ">d"),
    ("finish_reason", "text", None),
    ("error", "text", None),
)
ARRAYS = ("chunk_times_ms", "output_token_ids")
Figures = dict[str, float]  # rows, seconds, stream and WAL bytes, bytes on disk, values compressed
OUTPUT_TOKENS = 128
VOCABULARY = 32_000
DATABASE = f"specdash_bench_copy_ceiling_{os.getpid()}"  # the pid: two runs side by side do not collide


class Params(TypedDict):
    """How to reach the PostgreSQL server (the project's database settings)."""

    host: str
    port: str
    user: str
    password: str


@dataclass(frozen=True)
class Case:
    label: str
    arrays: bool = True
    indexes: bool = True
    half: bool = False
    compressed: bool = False
    foreign_key: bool = False
    arrays_per_run: bool = False


CASES = (
    Case("1. request rows, no index", indexes=False),
    Case("2. request rows, 2 indexes"),
    Case("3. scalars only, 2 indexes", arrays=False),
    Case("4. case 2, bytea at half size", half=True),
    Case("5. case 2, compressed in-line", compressed=True),
    Case("6. case 2 + foreign key to runs", foreign_key=True),
    Case("7. case 3 + foreign key to runs", arrays=False, foreign_key=True),
    Case("8. case 3 + arrays once per run", arrays=False, arrays_per_run=True),
)


def _field(value: bytes) -> bytes:
    return struct.pack(">i", len(value)) + value


def _row_after_run_id(rng: np.random.Generator, prompt_index: int, case: Case) -> tuple[bytes, list[bytes]]:
    """One row's fields after its run id, in binary COPY format, and its two arrays' bytes."""
    ttft = rng.uniform(30, 60)
    times = ttft + np.cumsum(rng.uniform(20, 40, OUTPUT_TOKENS))
    scalars = (prompt_index, 200, OUTPUT_TOKENS, prompt_index * 0.01, ttft, times[-1], 30.0, 2.8, 1.5)
    numeric = [fmt for _, _, fmt in SCALARS[1:] if fmt]
    fields = [struct.pack(fmt, value) for fmt, value in zip(numeric, scalars, strict=True)]
    fields += [b"length", b""]
    ids = rng.integers(0, VOCABULARY, OUTPUT_TOKENS)
    time_type, id_type = ("<f4", "<u2") if case.half else ("<f8", "<u4")
    arrays = [times.astype(time_type).tobytes(), ids.astype(id_type).tobytes()]
    if case.arrays:
        fields += arrays
    return b"".join(_field(f) for f in fields), arrays


def _columns(case: Case) -> list[str]:
    return [name for name, _, _ in SCALARS] + (list(ARRAYS) if case.arrays else [])


def _rows(case: Case, batch: int) -> tuple[list[bytes], list[bytes]]:
    """The batch's rows, and its arrays joined column by column (for arrays_per_run)."""
    rng = np.random.default_rng(0)
    rows, arrays = zip(*(_row_after_run_id(rng, i, case) for i in range(batch)), strict=True)
    return list(rows), [b"".join(column) for column in zip(*arrays, strict=True)]


def _batch(run_id: int, rows: list[bytes], fields: int) -> bytes:
    """The COPY stream of one run: every row opens with its field count and run id, so
    that opening joins the rows' remaining bytes."""
    opening = struct.pack(">hiq", fields, 8, run_id)
    return SIGNATURE + opening + opening.join(rows) + TRAILER


def _create_table(conn: psycopg.Connection[tuple[Any, ...]], case: Case, runs: int) -> None:
    columns = ", ".join(f"{name} {kind} NOT NULL" for name, kind, _ in SCALARS)
    arrays = "".join(f", {name} bytea NOT NULL" for name in ARRAYS) if case.arrays else ""
    options = " WITH (toast_tuple_target = 128)" if case.compressed else ""
    conn.execute(f"CREATE TABLE ceiling (id bigserial, {columns}{arrays}){options}")
    if case.indexes:
        conn.execute("ALTER TABLE ceiling ADD PRIMARY KEY (id), ADD UNIQUE (run_id, prompt_index)")
    if case.compressed:
        method = _compression(conn)
        for name in ARRAYS:
            conn.execute(f"ALTER TABLE ceiling ALTER {name} SET STORAGE MAIN, ALTER {name} SET COMPRESSION {method}")
    if case.foreign_key:
        conn.execute("CREATE TABLE runs (id bigint PRIMARY KEY)")
        conn.execute("INSERT INTO runs SELECT generate_series(1, %s)", (runs,))
        conn.execute("ALTER TABLE ceiling ADD FOREIGN KEY (run_id) REFERENCES runs DEFERRABLE INITIALLY DEFERRED")
    if case.arrays_per_run:
        columns = ", ".join(f"{name} bytea NOT NULL" for name in ARRAYS)
        conn.execute(f"CREATE TABLE run_arrays (run_id bigint PRIMARY KEY, {columns})")
        for name in ARRAYS:
            conn.execute(f"ALTER TABLE run_arrays ALTER {name} SET STORAGE EXTERNAL")


def _one(conn: psycopg.Connection[tuple[Any, ...]], sql: str, params: tuple[object, ...] = ()) -> tuple[Any, ...]:
    """The one row a query answers."""
    row = conn.execute(sql, params).fetchone()
    assert row is not None, sql
    return row


def _compression(conn: psycopg.Connection[tuple[Any, ...]]) -> str:
    """lz4 where this server was built with it, else pglz."""
    sql = "SELECT count(*) FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)"
    return "lz4" if _one(conn, sql)[0] else "pglz"


def _wal_lsn(conn: psycopg.Connection[tuple[Any, ...]]) -> str:
    return str(_one(conn, "SELECT pg_current_wal_lsn()")[0])


def measure(conn: psycopg.Connection[tuple[Any, ...]], case: Case, *, rows: int, batch: int) -> Figures:
    """Load `rows` rows in COPYs of `batch`, each committed; return the figures."""
    runs = rows // batch
    with conn.transaction():
        _create_table(conn, case, runs)
    conn.execute("CHECKPOINT")
    copy_sql = f"COPY ceiling ({', '.join(_columns(case))}) FROM STDIN WITH (FORMAT BINARY)"
    (template, arrays), fields = _rows(case, batch), len(_columns(case))
    insert_arrays = f"INSERT INTO run_arrays (run_id, {', '.join(ARRAYS)}) VALUES (%s, %s, %s)"
    wal_start, seconds, stream = _wal_lsn(conn), 0.0, 0
    for run_id in range(1, runs + 1):
        data = _batch(run_id, template, fields)
        start = time.perf_counter()
        with conn.transaction():
            with conn.cursor().copy(copy_sql) as copy:
                copy.write(data)
            if case.arrays_per_run:
                conn.execute(insert_arrays, (run_id, *arrays), binary=True)
        seconds += time.perf_counter() - start
        stream += len(data) + (sum(map(len, arrays)) if case.arrays_per_run else 0)
    wal = _one(conn, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (wal_start,))[0]
    figures: Figures = {"rows": runs * batch, "seconds": seconds, "stream": stream, "wal": float(wal)}
    figures |= _table_facts(conn, case)
    conn.execute("DROP TABLE ceiling")
    if case.foreign_key:
        conn.execute("DROP TABLE runs")
    if case.arrays_per_run:
        conn.execute("DROP TABLE run_arrays")
    return figures


def _table_facts(conn: psycopg.Connection[tuple[Any, ...]], case: Case) -> Figures:
    """Size on disk, and how many chunk-times values PostgreSQL stored compressed."""
    counted = "count(pg_column_compression(chunk_times_ms))" if case.arrays else "0"
    disk, compressed = _one(conn, f"SELECT pg_total_relation_size('ceiling'), {counted} FROM ceiling")
    if case.arrays_per_run:
        disk += _one(conn, "SELECT pg_total_relation_size('run_arrays')")[0]
    return {"disk": disk, "compressed": compressed}


@contextmanager
def scratch_database(params: Params) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """A database of its own next to the project's (on the server `params` name), dropped on the way out."""
    with psycopg.connect(**params, dbname="postgres", autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {DATABASE}")
        try:
            with psycopg.connect(**params, dbname=DATABASE, autocommit=True) as conn:
                yield conn
        finally:
            admin.execute(f"DROP DATABASE {DATABASE}")


def _print_case(case: Case, f: Figures) -> None:
    rows = f["rows"]
    print(
        f"  {case.label:34} {rows / f['seconds']:9,.0f} rows/s {f['stream'] / f['seconds'] / 1e6:7.1f} MB/s"
        f"  {f['stream'] / rows:6,.0f} B/row stream {f['disk'] / rows:6,.0f} on disk {f['wal'] / rows:6,.0f} WAL"
        f"  compressed {f['compressed']:,}  load {os.getloadavg()[0]:.1f}",
        flush=True,
    )


def report(params: Params, *, rows: int, batch: int) -> None:
    """Every case's figures, in a scratch database on the server `params` name."""
    with scratch_database(params) as conn:
        shown = ", ".join(f"{name} {_one(conn, f'SHOW {name}')[0]}" for name in SETTINGS)
        print(shown)
        print(f"{rows:,} rows a case in COPYs of {batch}, load average {os.getloadavg()[0]:.1f}:")
        for case in CASES:
            _print_case(case, measure(conn, case, rows=rows, batch=batch))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
