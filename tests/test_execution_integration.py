"""Through the real parts: PostgreSQL, Redis, a Celery worker process and vLLM servers."""

import itertools
import os
import subprocess

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Sum

from experiments import services
from experiments.models import Arm, EnvironmentSnapshot, Experiment, RequestRecord, Run, RunSummary
from experiments.services import ArmSpec
from experiments.tokens import unpack_token_ids
from experiments.workloads import prompt_set_hash
from tests.worker_fixtures import wait_for_experiment
from workers.affinity import plan_binding

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TARGET = settings.SPECDASH_MODELS_DIR / "target"
DRAFT = settings.SPECDASH_MODELS_DIR / "draft"


def _fields(**overrides) -> dict:
    fields = {
        "name": "integration",
        "target_model": str(TARGET),
        "worker_queue": "cpu",
        "dtype": "float32",
        "max_model_len": 512,
        "workload_kind": Experiment.WorkloadKind.BUILTIN,
        "prompt_set": "code_edit",
        "prompt_set_hash": prompt_set_hash("code_edit"),
        "num_prompts": 6,
        "max_tokens": 32,
        "temperature": 0.0,
        "seed": 0,
        "concurrency_levels": [1, 4],
        "repetitions": 1,
        "warmup_requests": 1,
    }
    return fields | overrides


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
    experiment = services.experiment_create(owner=owner, arms=arms, **_fields(repetitions=2))

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


def _check_schedule_was_followed(experiment: Experiment) -> None:
    """Runs started in schedule order, each (block, arm) on a server of its own."""
    by_start = list(experiment.runs.order_by("started_at").values_list("id", flat=True))
    scheduled = list(
        experiment.runs.order_by("repetition", "block_position", "level_position").values_list("id", flat=True)
    )
    assert by_start == scheduled
    assert all(run.started_at < run.finished_at for run in experiment.runs.all())
    folder = settings.DATA_DIR / "server-logs" / f"experiment-{experiment.id}"
    # One log per server; an earlier test database may have left logs under the same id.
    logs = [log for log in folder.glob("*.log") if log.stat().st_mtime >= experiment.created_at.timestamp()]
    assert len(logs) == experiment.arms.count() * experiment.repetitions
