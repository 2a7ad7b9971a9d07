"""The capacity figures through the real parts: a Celery worker whose CPU servers get a KV
cache of a few hundred tokens (SPECDASH_CPU_KVCACHE_GIB), driven by more concurrent long
outputs than fit, so that vLLM preempts; the figures land in the run summaries, on the page
and in the API."""

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from experiments import services
from experiments.models import Arm, Experiment, RunSummary
from experiments.services import ArmSpec
from experiments.workloads import prompt_set_hash
from tests.factories import experiment_fields
from tests.worker_fixtures import celery_worker, wait_for_experiment

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TARGET = settings.SPECDASH_MODELS_DIR / "target"
QUEUE = "cpu-small-kv"
# 6,000,000 bytes: vLLM 0.32 on CPU fits 640 tokens of the demo target (4 layers, 256 wide, float32)
# and the n-gram arm the same; eight requests of 200 output tokens need about three times that.
SMALL_KV_GIB = 6_000_000 / 2**30


@pytest.fixture(scope="module")
def small_kv_worker(django_db_setup, django_db_blocker):
    with celery_worker(QUEUE, env={"SPECDASH_CPU_KVCACHE_GIB": repr(SMALL_KV_GIB)}) as log_path:
        yield log_path


@pytest.mark.skipif(not (TARGET / "config.json").exists(), reason="demo models not built (./dev test builds them)")
def test_a_run_with_a_small_kv_cache_preempts_and_records_it(small_kv_worker):
    owner = get_user_model().objects.create_user(username="capacity", password="pw-for-tests")
    experiment = services.experiment_create(
        owner=owner,
        arms=[ArmSpec(method=Arm.Method.NGRAM, num_speculative_tokens=2, params={"prompt_lookup_min": 2})],
        **experiment_fields(
            name="small KV cache", prompt_set="code_edit", prompt_set_hash=prompt_set_hash("code_edit"),
            num_prompts=8, max_tokens=200, ignore_eos=True, temperature=0.0, concurrency_levels=[8],
            repetitions=1, warmup_requests=1, worker_queue=QUEUE, aa_replicate=False,
        ),
    )  # fmt: skip

    experiment = wait_for_experiment(experiment.id, timeout_s=900)

    assert experiment.status == Experiment.Status.FINISHED, list(experiment.runs.values_list("error", flat=True))
    summaries = list(RunSummary.objects.filter(run__experiment=experiment).select_related("run__arm"))
    assert len(summaries) == 2
    for summary in summaries:
        label = summary.run.arm.label
        assert summary.capacity_samples > 0, label
        assert summary.preemptions > 0, label
        assert summary.kv_cache_usage_peak >= 0.9, label
        assert 0 < summary.kv_cache_usage_mean <= summary.kv_cache_usage_peak, label
        # The cache holds about two of the eight requests at once: the others wait.
        assert 1 <= summary.requests_running_max < 8, label
        assert summary.requests_waiting_max > 0, label

    client = Client()
    client.force_login(owner)
    html = client.get(reverse("experiments:detail", args=[experiment.pk])).text
    assert 'id="table-capacity"' in html
    assert "not recorded" not in html
    body = client.get(reverse("api:experiment-results", args=[experiment.pk])).json()
    [row] = body["capacity"]
    assert row["arm"]["preemptions"] > 0
    assert row["baseline"]["preemptions"] > 0
    assert body["capacity_warnings"] == []  # both preempted: nothing the arm did alone
