"""The page benchmarks run at tiny sizes and print their figures, so they cannot rot
unnoticed; the figures themselves are in docs/benchmarks.md."""

import pytest

from experiments.models import Experiment
from workers.bench.pages import experiment_page, history

pytestmark = pytest.mark.django_db


@pytest.mark.django_db(transaction=True)  # the seeding runs VACUUM, which refuses a transaction
def test_bench_history_prints_the_list_times_over_its_seed_and_request_rows(capsys, monkeypatch):
    every_url = history._urls
    monkeypatch.setattr(history, "_urls", lambda user, total: dict(list(every_url(user, total).items())[:2]))
    history.run(experiments=12, request_rows_wanted=400, gets=1)
    out = capsys.readouterr().out
    assert "request rows: 400 written" in out
    assert "GiB per million rows" in out
    assert "history page over 12 experiments and 400 request rows, median of 1 GETs each:" in out
    assert out.count(" ms (CPU ") == 2
    assert "median of the medians:" in out


def test_bench_experiment_page_prints_the_analysis_and_page_times(capsys):
    experiment_page.report(repetitions=1, requests=3, gets=1)
    out = capsys.readouterr().out
    assert "baseline + 4 arms x 8 levels x 1 reps x 3 requests" in out
    assert "analysis stored in" in out
    assert "experiment page: median" in out
    assert not Experiment.objects.filter(name=experiment_page.NAME).exists()
