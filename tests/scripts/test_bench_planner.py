"""The break-even search's real benchmark reports at a tiny size, so it cannot rot unnoticed;
the figures themselves are in docs/benchmarks.md."""

import pytest

from experiments.models import Experiment
from scripts import bench_planner_real
from tests.analysis.test_search import _finished, _run, _run_search, _search

pytestmark = pytest.mark.django_db


def test_the_real_benchmark_reports_both_experiments_answers_and_device_minutes(capsys):
    search, baseline, arm = _search()
    _run_search(search, baseline, arm)
    search = _finished(search)
    fixed, fixed_baseline, fixed_arm = _search(search_low=None, search_high=None, search_resolution=None)
    Experiment.objects.filter(id=fixed.id).update(concurrency_levels=[1, 8, 16], repetitions=3)
    for block in (1, 2, 3):
        for level in (1, 8, 16):
            _run(fixed_baseline, block, level, 20.0)
            _run(fixed_arm, block, level, {1: 10.0, 8: 10.0, 16: 25.0}[level])
    bench_planner_real.main(["--experiments", str(search.id), str(fixed.id)])
    out = capsys.readouterr().out
    assert "found: faster up to 8, not faster at 16, points cross 1 at 13.5" in out
    assert out.count("found: faster up to 8") == 2
    assert "the search spent" in out
    assert "(its confirmation arm included)" in out
