"""The storage benchmarks run at tiny sizes and print their figures, so they cannot rot
unnoticed; the figures themselves are in docs/benchmarks.md."""

import pytest
from django.conf import settings
from django.db import connection

from workers.bench.storage import copy_ceiling, ingest

pytestmark = pytest.mark.django_db


def test_bench_ingest_prints_rows_per_second(capsys):
    ingest.report(runs=2, requests=5)
    out = capsys.readouterr().out
    assert "10 request rows of 128 output tokens in 2 runs of 5" in out
    assert "ingest_run (the worker's call)" in out
    assert "COPY of the request rows alone" in out
    assert out.count("rows/s") == 3


def test_bench_copy_ceiling_prints_every_case_and_drops_its_database(capsys):
    database = settings.DATABASES["default"]
    params: copy_ceiling.Params = {
        "host": database["HOST"], "port": str(database["PORT"]), "user": database["USER"],
        "password": database["PASSWORD"],
    }  # fmt: skip
    copy_ceiling.report(params, rows=10, batch=5)
    out = capsys.readouterr().out
    assert "synchronous_commit" in out
    assert "10 rows a case in COPYs of 5" in out
    assert out.count(" rows/s ") == len(copy_ceiling.CASES)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [copy_ceiling.DATABASE])
        assert cursor.fetchone()[0] == 0
