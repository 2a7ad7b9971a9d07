"""The on-demand checks that read the database, as management commands, on seeded experiments:
their reports cannot rot unnoticed; the figures themselves are in docs/benchmarks.md and
docs/verdicts.md."""

import random

import pytest
from django.core.management import call_command

from experiments.models import Arm, Experiment, Run
from tests.analysis.test_search import _finished, _run, _run_search, _search
from tests.factories import ArmFactory, RunFactory, seed_finished_experiment, seed_run_results

pytestmark = pytest.mark.django_db


def test_the_real_search_benchmark_reports_both_experiments_answers_and_device_minutes(capsys):
    search, baseline, arm = _search()
    _run_search(search, baseline, arm)
    search = _finished(search)
    fixed, fixed_baseline, fixed_arm = _search(search_low=None, search_high=None, search_resolution=None)
    Experiment.objects.filter(id=fixed.id).update(concurrency_levels=[1, 8, 16], repetitions=3)
    for block in (1, 2, 3):
        for level in (1, 8, 16):
            _run(fixed_baseline, block, level, 20.0)
            _run(fixed_arm, block, level, {1: 10.0, 8: 10.0, 16: 25.0}[level])
    call_command("bench_planner_real", "--experiments", str(search.id), str(fixed.id))
    out = capsys.readouterr().out
    assert "found: faster up to 8, not faster at 16, points cross 1 at 13.5" in out
    assert out.count("found: faster up to 8") == 2
    assert "the search spent" in out
    assert "(its confirmation arm included)" in out


def test_two_runs_of_one_protocol_agree_cell_by_cell(capsys):
    first, second = seed_finished_experiment(seed=0), seed_finished_experiment(seed=1)
    call_command("check_repeat_agreement", str(first.id), str(second.id))
    out = capsys.readouterr().out
    cells = first.speedups.count()
    assert f"\n{cells} cells; same word in " in out
    assert "faster↔slower flips: 0" in out
    assert "point estimate inside the other run's interval:" in out


def test_the_stored_a_a_replicates_family_wise_calls_are_counted(capsys):
    experiment = seed_finished_experiment()
    replicate = ArmFactory(
        experiment=experiment, position=3, label="baseline replicate (A/A)", method=Arm.Method.BASELINE,
        num_speculative_tokens=None, params={}, is_replicate=True,
    )  # fmt: skip
    rng = random.Random(3)
    for block in range(1, experiment.repetitions + 1):
        for level in experiment.concurrency_levels:
            run = RunFactory(arm=replicate, concurrency=level, repetition=block, status=Run.Status.SUCCEEDED)
            seed_run_results(run, rng, requests=experiment.num_prompts, output_tokens=experiment.max_tokens)
    call_command("check_aa_real")
    out = capsys.readouterr().out
    assert f"experiment {experiment.id} (3 blocks, levels [1, 4]): server_tpot/fixed: " in out
    assert "1 experiment(s) with an A/A replicate and at least 3 blocks" in out
    for metric in ("server_tpot", "tpot", "e2e", "output_throughput"):
        assert f"{metric:>18} {'sequential':>10} " in out
