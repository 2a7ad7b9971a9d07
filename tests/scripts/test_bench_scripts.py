"""The benchmark scripts run at tiny sizes and print their figures, so they cannot rot
unnoticed; the figures themselves are in docs/benchmarks.md."""

import pytest
from django.db import connection

from experiments.models import Experiment
from scripts import bench_copy_ceiling, bench_experiment_page, bench_history, bench_ingest

pytestmark = pytest.mark.django_db


def test_bench_ingest_prints_rows_per_second(capsys):
    bench_ingest.main(["--runs", "2", "--requests", "5"])
    out = capsys.readouterr().out
    assert "10 request rows of 128 output tokens in 2 runs of 5" in out
    assert "ingest_run (the worker's call)" in out
    assert "COPY of the request rows alone" in out
    assert out.count("rows/s") == 3


def test_bench_copy_ceiling_prints_every_case_and_drops_its_database(capsys):
    bench_copy_ceiling.main(["--rows", "10", "--batch", "5"])
    out = capsys.readouterr().out
    assert "synchronous_commit" in out
    assert "10 rows a case in COPYs of 5" in out
    assert out.count(" rows/s ") == len(bench_copy_ceiling.CASES)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [bench_copy_ceiling.DATABASE])
        assert cursor.fetchone()[0] == 0


@pytest.mark.django_db(transaction=True)  # the seeding runs VACUUM, which refuses a transaction
def test_bench_history_prints_the_list_times_over_its_seed_and_request_rows(capsys, monkeypatch):
    every_url = bench_history._urls
    monkeypatch.setattr(bench_history, "_urls", lambda user, total: dict(list(every_url(user, total).items())[:2]))
    args = bench_history.parse_args(["--experiments", "12", "--request-rows", "400", "--gets", "1"])
    bench_history.run(args)
    out = capsys.readouterr().out
    assert "request rows: 400 written" in out
    assert "GiB per million rows" in out
    assert "history page over 12 experiments and 400 request rows, median of 1 GETs each:" in out
    assert out.count(" ms (CPU ") == 2
    assert "median of the medians:" in out


def test_bench_experiment_page_prints_the_analysis_and_page_times(capsys):
    bench_experiment_page.main(["--repetitions", "1", "--requests", "3", "--gets", "1"])
    out = capsys.readouterr().out
    assert "baseline + 4 arms x 8 levels x 1 reps x 3 requests" in out
    assert "analysis stored in" in out
    assert "experiment page: median" in out
    assert not Experiment.objects.filter(name=bench_experiment_page.NAME).exists()
