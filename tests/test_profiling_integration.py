"""Profiled intervals through the real parts: the suite's Celery worker runs an n-gram arm and
the baseline at one level with profile_intervals on; after each arm's measured run its vLLM
CPU server profiles one short interval, whose trace lands on disk and whose shares land in
PostgreSQL, apart from every statistic."""

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from experiments import profiles, services
from experiments.models import Arm, Experiment, ProfiledInterval, RequestRecord, RunSummary
from experiments.services import ArmSpec
from experiments.workloads import prompt_set_hash
from tests.factories import experiment_fields
from tests.worker_fixtures import wait_for_experiment

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TARGET = settings.SPECDASH_MODELS_DIR / "target"
PROMPTS = 3
LEVEL = 2


@pytest.mark.skipif(not (TARGET / "config.json").exists(), reason="demo models not built (./dev test builds them)")
def test_a_profiled_interval_per_arm_is_stored_apart_from_the_statistics(celery_worker_process):
    owner = get_user_model().objects.create_user(username="profiler", password="pw-for-tests")
    experiment = services.experiment_create(
        owner=owner,
        arms=[ArmSpec(method=Arm.Method.NGRAM, num_speculative_tokens=3, params={"prompt_lookup_min": 2})],
        **experiment_fields(
            name="profiled", prompt_set="code_edit", prompt_set_hash=prompt_set_hash("code_edit"),
            num_prompts=PROMPTS, max_tokens=24, temperature=0.0, concurrency_levels=[LEVEL], repetitions=1,
            warmup_requests=1, aa_replicate=False, profile_intervals=True,
        ),
    )  # fmt: skip

    experiment = wait_for_experiment(experiment.id, timeout_s=900)

    assert experiment.status == Experiment.Status.FINISHED, list(experiment.runs.values_list("error", flat=True))
    intervals = list(ProfiledInterval.objects.filter(experiment=experiment).select_related("arm"))
    assert sorted((i.arm.method, i.concurrency) for i in intervals) == [("baseline", LEVEL), ("ngram", LEVEL)]
    for interval in intervals:
        label = interval.arm.label
        assert interval.error == "", label
        assert interval.requests == min(PROMPTS, max(4, LEVEL)), label  # from the measured prompts
        assert interval.completed == interval.requests, label
        assert interval.steps > 0, label
        assert interval.profiled_ms > 0, label
        trace = settings.DATA_DIR / interval.trace_path
        assert trace.stat().st_size == interval.trace_bytes, label
        shares = [getattr(interval, f"share_{phase}") for phase in profiles.PHASES]
        assert all(share is not None and share >= 0 for share in shares), label
        assert sum(shares) == pytest.approx(1.0, abs=1e-6), label
        assert interval.share_verifying > 0, label
    by_method = {interval.arm.method: interval for interval in intervals}
    assert by_method["baseline"].share_proposing == 0.0
    assert by_method["ngram"].share_proposing > 0

    # Left out of the statistics: each run holds its measured requests only, and the
    # summaries and the analysis count those.
    summaries = RunSummary.objects.filter(run__experiment=experiment)
    assert summaries.count() == 2
    assert all(summary.completed == PROMPTS for summary in summaries)
    assert RequestRecord.objects.filter(run__experiment=experiment).count() == 2 * PROMPTS

    client = Client()
    client.force_login(owner)
    html = client.get(reverse("experiments:detail", args=[experiment.pk])).text
    assert 'id="profile"' in html
    assert 'id="chart-step-time"' in html
