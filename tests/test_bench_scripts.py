"""The benchmark scripts run at tiny sizes and print their figures, so they cannot rot
unnoticed; the figures themselves are in docs/benchmarks.md."""

import pytest

from scripts import bench_ingest

pytestmark = pytest.mark.django_db


def test_bench_ingest_prints_rows_per_second(capsys):
    bench_ingest.main(["--runs", "2", "--requests", "5"])
    out = capsys.readouterr().out
    assert "10 request rows of 128 output tokens in 2 runs of 5" in out
    assert "ingest_run (the worker's call)" in out
    assert "COPY of the request rows alone" in out
    assert out.count("rows/s") == 2
