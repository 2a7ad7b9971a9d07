"""The break-even search's benchmarks run at tiny sizes and print their figures, so they cannot
rot unnoticed; the figures themselves are in docs/benchmarks.md."""

import pytest

from experiments.models import Experiment
from scripts import bench_planner, bench_planner_real
from tests.analysis.test_search import _finished, _run, _run_search, _search

pytestmark = pytest.mark.django_db


def test_the_simulation_prints_every_scenario_under_every_rule(capsys):
    bench_planner.main(["--experiments", "1", "--seed", "3"])
    out = capsys.readouterr().out
    assert out.count("## 1-64 at resolution") == 2
    assert "at most 10 blocks, start 3 and run 1 device-minutes" in out
    for scenario in bench_planner.SCENARIOS:
        assert out.count(scenario) == 2
    assert out.count(" adaptive ") == out.count(" fixed grid ") == out.count(" fixed, bracket stop ") == 16


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
