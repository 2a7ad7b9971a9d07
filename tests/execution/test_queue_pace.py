"""A queue's pace: the seconds per generated token its runs' time limits allow, by queue, read
by the form's time limit, its estimate and the worker's run limit alike
(experiments/execution/worker_queues.seconds_per_token); and the servers a suffix arm starts
per run counted in the form's time limit."""

import pytest

from experiments.execution import worker_queues
from tests.definition.forms.helpers import bind
from tests.factories import NGRAM_ARM_FORM, ArmFactory, ExperimentFactory, RunFactory, form_data
from workers import sessions

pytestmark = pytest.mark.django_db

SUFFIX_ARM_FORM = {"method": "suffix", "num_speculative_tokens": "16"}


@pytest.fixture
def paces(settings):
    settings.SPECDASH_RUN_SECONDS_PER_TOKEN = 0.25
    settings.SPECDASH_RUN_SECONDS_PER_TOKEN_BY_QUEUE = {"h100": 0.05}
    settings.SPECDASH_SERVER_START_TIMEOUT_S = 300.0
    settings.SPECDASH_SERVER_START_TIMEOUT_S_BY_QUEUE = {}


def _refused_for_time(data) -> bool:
    form, _arms = bind(data)
    form.is_valid()
    return "SPECDASH_VISIBILITY_TIMEOUT_S" in str(form.non_field_errors())


def test_a_queue_named_in_the_paces_gets_its_own_and_the_others_the_default(paces):
    assert worker_queues.seconds_per_token("h100") == 0.05
    assert worker_queues.seconds_per_token("cpu") == 0.25


def test_a_gpu_queue_is_not_priced_at_cpu_pace_in_the_forms_time_limit(paces, settings):
    """form_data's plan (2 arms, levels 1 and 4, 2 blocks, 22 requests of 64 tokens): at 0.25 s a
    token its runs may take 2,752 s and its 4 starts 1,200 s, over a 1 h hold; at the h100 pool's
    0.05 s, 1,318 s of runs."""
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}

    assert _refused_for_time(form_data(worker_queue="cpu"))
    assert not _refused_for_time(form_data(worker_queue="h100"))


def test_the_workers_run_limit_reads_its_experiments_queue(paces):
    on_gpu = ExperimentFactory(worker_queue="h100", warmup_requests=2, num_prompts=20, max_tokens=64)
    run = RunFactory(experiment=on_gpu, arm=ArmFactory(experiment=on_gpu, baseline=True), concurrency=1)

    assert sessions.run_limit_s(on_gpu, run) == pytest.approx(120 + 22 * 64 * 0.05)


def test_a_suffix_arm_counts_a_server_start_per_run_in_the_time_limit(paces, settings):
    """With an n-gram arm: 4 server starts (2 arms × 2 blocks), 3,952 s in all. A suffix arm starts
    a server for each of its runs (2 levels × 2 blocks): 6 starts, 4,552 s."""
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 4200}

    assert not _refused_for_time(form_data(arms=(NGRAM_ARM_FORM,)))
    assert _refused_for_time(form_data(arms=(SUFFIX_ARM_FORM,)))
