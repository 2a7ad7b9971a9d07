"""The host in the analysis (issue 38), through PostgreSQL: the between-host term of the variance
components and the host test's warning, from blocks whose hosts are recorded (Block.worker_host),
against figures worked by hand; and why nothing is estimated with one host or no block rows."""

import math

import pytest

from experiments.analysis import variance
from experiments.analysis.services import experiment_analyse
from experiments.measurement.stats.sequential import PER_CELL_T
from experiments.models import Block, Experiment, Run
from tests.factories import ArmFactory, ExperimentFactory, RequestRecordFactory, RunFactory, RunSummaryFactory

pytestmark = pytest.mark.django_db

LEVELS = (1, 4)
PROMPTS = 4
BASELINE_TPOT = 20.0
# The arm's log ratio over 2× per block, the same at both levels (a block's value): host a ran
# blocks 1-2 (0.0, 0.2: mean 0.1), host b blocks 3-5 (0.8, 1.0, 0.9: mean 0.9). The replicate is at 1×.
ARM_LOGS = (0.0, 0.2, 0.8, 1.0, 0.9)
HOSTS = ("host-a", "host-a", "host-b", "host-b", "host-b")


def _run(arm, level, block, tpot):
    run = RunFactory(arm=arm, concurrency=level, repetition=block, status=Run.Status.SUCCEEDED)
    RunSummaryFactory(run=run, completed=PROMPTS, tpot_mean_ms=tpot, achieved_concurrency=float(level))
    for prompt in range(PROMPTS):
        RequestRecordFactory(
            run=run, prompt_index=prompt, output_tokens=11, ttft_ms=50.0, e2e_ms=50.0 + 10 * tpot, tpot_ms=tpot,
            server_tpot_ms=tpot, server_decode_ms=10 * tpot,
        )  # fmt: skip


def _experiment(hosts=HOSTS, completed=(1, 2, 3, 4, 5)):
    """`completed`: the blocks' numbers in the order they completed (their look_order), which the
    loaded runs' blocks follow."""
    experiment = ExperimentFactory(
        concurrency_levels=list(LEVELS), repetitions=len(ARM_LOGS), status=Experiment.Status.FINISHED,
        verdict_method=PER_CELL_T, primary_metric="server_tpot",
    )  # fmt: skip
    baseline = ArmFactory(experiment=experiment, baseline=True, position=0)
    replicate = ArmFactory(experiment=experiment, baseline=True, position=1, label="replicate", is_replicate=True)
    arm = ArmFactory(experiment=experiment, position=2, label="n-gram k=4")
    for block, log_ratio in enumerate(ARM_LOGS, start=1):
        for level in LEVELS:
            _run(baseline, level, block, BASELINE_TPOT)
            _run(replicate, level, block, BASELINE_TPOT)
            _run(arm, level, block, BASELINE_TPOT / (2 * math.exp(log_ratio)))
        if hosts:
            Block.objects.create(
                experiment=experiment, number=block, status=Block.Status.DONE, worker_name=f"w@{hosts[block - 1]}",
                worker_host=hosts[block - 1], look_order=completed.index(block) + 1,
            )  # fmt: skip
    return experiment


def _t3_two_sided(t):
    x = t / math.sqrt(3)
    return 1 - (2 / math.pi) * (math.atan(x) + x / (1 + x * x))


@pytest.mark.parametrize("completed", [(1, 2, 3, 4, 5), (3, 1, 5, 2, 4)])
def test_the_between_host_term_and_the_warning_by_hand(completed):
    # grand mean 2.9 / 5 = 0.58; MS_between = 2 · 0.48² + 3 · 0.32² = 0.768 (1 df); MS_within = 0.04 / 3 (3 df);
    # F = 57.6; n0 = 2.4; σ_host² = (0.768 − 0.04 / 3) / 2.4. The replicate: every value 0, p = 1.
    # Holm over the two arms: the arm's p × 2, the replicate's max(that, 1) = 1.
    analysis = experiment_analyse(experiment=_experiment(completed=completed))
    components = analysis.series["variance_components"]
    rows = {(row["arm"], row["metric"]): row for row in components["rows"]}
    arm = rows[("n-gram k=4", "server_tpot")]
    assert arm["hosts"] == "host-a (2), host-b (3)"
    assert arm["sigma_host_pct"] == pytest.approx(100 * math.sqrt((0.768 - 0.04 / 3) / 2.4))
    assert arm["host_note"] == ""
    assert rows[("replicate", "server_tpot")]["sigma_host_pct"] == 0.0
    test = {row["arm"]: row for row in components["host_test"]["arms"]}
    p = _t3_two_sided(math.sqrt(57.6))
    assert test["n-gram k=4"]["f"] == pytest.approx(57.6)
    assert test["n-gram k=4"]["df"] == [1, 3]
    assert test["n-gram k=4"]["p"] == pytest.approx(p)
    assert test["n-gram k=4"]["p_holm"] == pytest.approx(2 * p)
    assert test["n-gram k=4"]["warn"] is True
    assert [h["mean_pct"] for h in test["n-gram k=4"]["hosts"]] == [
        pytest.approx(100 * math.expm1(math.log(2) + 0.1)),
        pytest.approx(100 * math.expm1(math.log(2) + 0.9)),
    ]
    assert (test["replicate"]["p_holm"], test["replicate"]["warn"]) == (1.0, False)
    # The chart's points: block places in completion order, each with its host and its ratio (2 × exp(value)).
    places = {number: place for place, number in enumerate(completed, start=1)}
    assert sorted((p["block"], p["host"], p["ratio"]) for p in test["n-gram k=4"]["points"]) == sorted(
        (places[n], HOSTS[n - 1], pytest.approx(2 * math.exp(ARM_LOGS[n - 1]))) for n in range(1, 6)
    )
    warnings = [w for w in analysis.warnings if "differ between hosts beyond chance" in w]
    assert len(warnings) == 1
    assert warnings[0].startswith("n-gram k=4: its block ratios of Engine-timed TPOT differ between hosts")
    assert "F = 57.6 on 1 and 3 degrees of freedom" in warnings[0]


def test_one_host_with_two_blocks_is_not_enough():
    analysis = experiment_analyse(experiment=_experiment(("host-a", "host-b", "host-b", "host-b", "host-b")))
    components = analysis.series["variance_components"]
    row = next(r for r in components["rows"] if r["arm"] == "n-gram k=4" and r["metric"] == "server_tpot")
    assert row["sigma_host_pct"] is None
    assert row["hosts"] == "host-b (4)"
    assert row["host_note"] == (
        "fewer than 2 hosts contributed at least 2 blocks each; left out with fewer than 2 blocks: host-a (1)"
    )
    assert not any("between hosts" in w for w in analysis.warnings)


def test_blocks_not_dispatched_one_by_one_have_one_host():
    components = experiment_analyse(experiment=_experiment(hosts=None)).series["variance_components"]
    assert {row["host_note"] for row in components["rows"]} == {
        "one worker ran every block (the blocks were not dispatched one by one): one host"
    }
    assert all(row["p"] is None and not row["warn"] for row in components["host_test"]["arms"])
    assert components["host_test"]["hosts_seen"] == 0


def test_the_warning_reads_an_infinite_f():
    # Every host's blocks agree exactly and the hosts differ: p = 0, F infinite (stored as None in JSON).
    row = {
        "arm": "n-gram k=4", "warn": True, "f": None, "df": [1, 2], "p": 0.0, "p_holm": 0.0, "farthest": "host-b",
        "hosts": [
            {"host": "host-a", "blocks": 2, "mean_pct": 100.0}, {"host": "host-b", "blocks": 2, "mean_pct": 120.0},
        ],
    }  # fmt: skip
    test = {"metric_name": "Engine-timed TPOT", "level": 0.05, "arms": [row]}
    [warning] = variance.host_warnings({"host_test": test})
    assert "F = ∞ (each host's blocks agree exactly) on 1 and 2 degrees of freedom" in warning
    assert "host-a: +100.0 % over 2 blocks; host-b: +120.0 % over 2 blocks" in warning
    assert variance.host_warnings(None) == []
