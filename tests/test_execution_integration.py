"""Through the real parts: PostgreSQL, Redis, a Celery worker process and vLLM servers."""

import itertools
import os
import subprocess

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Sum

from experiments import services
from experiments.models import (
    Arm,
    EnvironmentSnapshot,
    Experiment,
    ExperimentAnalysis,
    RequestRecord,
    Run,
    RunSummary,
    SpeedupEstimate,
)
from experiments.services import ArmSpec
from experiments.tokens import unpack_token_ids
from experiments.verdicts import FASTER, SLOWER
from experiments.workloads import prompt_set_hash
from tests.factories import experiment_fields
from tests.worker_fixtures import wait_for_experiment
from workers.affinity import plan_binding

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TARGET = settings.SPECDASH_MODELS_DIR / "target"
DRAFT = settings.SPECDASH_MODELS_DIR / "draft"


def _fields(**overrides) -> dict:
    """On the demo target (the factory's): a protocol small enough for a CPU worker to run
    in minutes, at temperature 0 so that outputs can be compared."""
    protocol = {
        "name": "integration", "prompt_set": "code_edit", "prompt_set_hash": prompt_set_hash("code_edit"),
        "num_prompts": 6, "max_tokens": 32, "temperature": 0.0, "concurrency_levels": [1, 4], "repetitions": 1,
        "warmup_requests": 1,
    }  # fmt: skip
    return experiment_fields(**protocol | overrides)


@pytest.fixture
def owner():
    return get_user_model().objects.create_user(username="runner", password="pw-for-tests")


def test_server_that_cannot_start_fails_its_runs_with_the_log_tail(celery_worker_process, owner):
    missing = settings.SPECDASH_MODELS_DIR / "no-such-model"
    experiment = services.experiment_create(
        owner=owner,
        arms=[ArmSpec(method=Arm.Method.NGRAM, num_speculative_tokens=2)],
        **_fields(target_model=str(missing)),
    )

    experiment = wait_for_experiment(experiment.id, timeout_s=300)

    assert experiment.status == Experiment.Status.FAILED
    runs = list(experiment.runs.all())
    assert len(runs) == 4
    for run in runs:
        assert run.status == Run.Status.FAILED
        assert "did not start" in run.error
        assert "Last lines of its log" in run.error
    assert "received experiment" in celery_worker_process.read_text()
    assert str(missing) not in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout


@pytest.mark.skipif(not (TARGET / "config.json").exists(), reason="demo models not built (./dev test builds them)")
def test_experiment_runs_end_to_end_on_real_vllm(celery_worker_process, owner):
    arms = [
        ArmSpec(
            method=Arm.Method.NGRAM, num_speculative_tokens=3, params={"prompt_lookup_min": 2, "prompt_lookup_max": 4}
        ),
        ArmSpec(method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=3, params={"model": str(DRAFT)}),
    ]
    # One server per arm for both blocks (the A/A test below starts one per block and arm): this
    # test is about what a run records, and three servers start sooner than six.
    experiment = services.experiment_create(owner=owner, arms=arms, **_fields(repetitions=2, server_per_block=False))

    experiment = wait_for_experiment(experiment.id, timeout_s=1800)

    assert experiment.status == Experiment.Status.FINISHED
    runs = list(experiment.runs.select_related("arm", "summary"))
    assert len(runs) == 3 * 2 * 2  # arms x levels x blocks
    assert {run.status for run in runs} == {Run.Status.SUCCEEDED}
    _check_schedule_was_followed(experiment)
    for run in runs:
        rows = RequestRecord.objects.filter(run=run)
        # Each measured prompt once, the warm-up prompt (index 0) never measured.
        assert sorted(rows.values_list("prompt_index", flat=True)) == list(range(1, 1 + experiment.num_prompts))
        summary = run.summary
        assert summary.completed + summary.failed == rows.count()
        assert summary.total_output_tokens == rows.filter(error="").aggregate(n=Sum("output_tokens"))["n"]
        assert 0 < summary.achieved_concurrency <= run.concurrency * 1.05
        for row in rows.filter(error=""):
            assert len(unpack_token_ids(row.output_token_ids)) == row.output_tokens
        environment = EnvironmentSnapshot.objects.get(run=run)
        assert environment.vllm_version
        binding = plan_binding(os.sched_getaffinity(0))
        assert environment.cpu_binding == (binding.record() if binding else {})
        if run.arm.is_baseline:
            assert not summary.spec_num_drafts
            continue
        per_pos = summary.spec_accepted_per_pos
        assert summary.spec_num_drafts > 0
        assert len(per_pos) == 3
        assert all(a >= b for a, b in itertools.pairwise(per_pos)), per_pos
        assert sum(per_pos) == summary.spec_num_accepted_tokens
        with_steps = [bool(r.spec_accepted_per_step) for r in rows]
        # A draft model proposes at every step; an n-gram lookup can find nothing to propose.
        assert all(with_steps) if run.arm.method == Arm.Method.DRAFT_MODEL else any(with_steps)
    assert RunSummary.objects.filter(run__experiment=experiment).count() == len(runs)
    # The analysis was stored with the runs: a speedup per compared arm, level and metric,
    # a sentence per arm and verdict metric, and the fidelity rows (temperature 0).
    analysis = ExperimentAnalysis.objects.get(experiment=experiment)
    estimates = SpeedupEstimate.objects.filter(experiment=experiment)
    assert estimates.count() == 2 * 2 * len(SpeedupEstimate.Metric)
    assert all(s.n_repetitions == 2 and len(s.block_ratios) == 2 for s in estimates if s.metric == "tpot")
    assert {s.outcome for s in estimates} <= {"too few blocks"}  # 2 blocks: estimates, no verdicts
    assert len(analysis.verdicts) == 2 * 3
    assert {row["level"] for row in analysis.fidelity} == {1, 4}


def _check_schedule_was_followed(experiment: Experiment) -> None:
    """Runs started in schedule order, each (block, arm) on a server of its own, or with one
    server per arm, each arm's blocks in turn on its server (workers.runner.experiment_sessions)."""
    by_start = list(experiment.runs.order_by("started_at").values_list("id", flat=True))
    scheduled = experiment.runs.in_execution_order(server_per_block=experiment.server_per_block)
    assert by_start == list(scheduled.values_list("id", flat=True))
    servers = experiment.repetitions if experiment.server_per_block else 1
    assert all(run.started_at < run.finished_at for run in experiment.runs.all())
    folder = settings.DATA_DIR / "server-logs" / f"experiment-{experiment.id}"
    # One log per server; an earlier test database may have left logs under the same id.
    logs = [log for log in folder.glob("*.log") if log.stat().st_mtime >= experiment.created_at.timestamp()]
    assert len(logs) == experiment.arms.count() * servers


def _replicate_calls(experiment: Experiment) -> list[str]:
    """The replicate's TPOT verdicts that claim a difference, with the block ratios behind each."""
    rows = SpeedupEstimate.objects.filter(experiment=experiment, arm__is_replicate=True, metric="tpot")
    return [f"{s.outcome} at {s.concurrency}: {s.block_ratios}" for s in rows if s.outcome in (FASTER, SLOWER)]


@pytest.mark.skipif(not (TARGET / "config.json").exists(), reason="demo models not built (./dev test builds them)")
def test_an_aa_replicate_is_not_called_different_from_the_baseline(celery_worker_process, owner):
    """Baseline and an identical replicate in 3 randomised blocks: the verdict must not call
    them different, and the block order must be recorded and differ between blocks.

    A calibrated 95 % interval calls a no-effect difference in 5 % of experiments by design,
    so one such call is answered with a second, independent experiment (another seed): a
    design that is biased (one arm systematically first on a warm host, say) fails both,
    while noise fails both in only 0.25 % of test runs.
    """
    fields = _fields(repetitions=3, aa_replicate=True, concurrency_levels=[2], num_prompts=8, max_tokens=24)
    calls = []
    for seed in (1, 2):
        experiment = services.experiment_create(owner=owner, arms=[], **fields | {"seed": seed})
        experiment = wait_for_experiment(experiment.id, timeout_s=1200)
        assert experiment.status == Experiment.Status.FINISHED
        _check_schedule_was_followed(experiment)
        orders = [
            list(
                experiment.runs.filter(repetition=block).order_by("block_position").values_list("arm__label", flat=True)
            )
            for block in (1, 2, 3)
        ]
        assert len({tuple(order) for order in orders}) > 1, orders  # seeds 1 and 2 draw different orders
        analysis = ExperimentAnalysis.objects.get(experiment=experiment)
        assert any(v["replicate"] and "A/A replicate" in v["text"] for v in analysis.verdicts)
        assert [row["identical_share"] for row in analysis.fidelity] != []
        calls = _replicate_calls(experiment)
        if not calls:
            return
    pytest.fail(f"the A/A replicate was called different from the baseline in two experiments: {calls}")
