"""The experiment form's device-minute estimate (experiments/definition/cost_estimate.py and the
estimate view): the plan read from what the page posts, priced with the queue's records or the
stated bounds."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from experiments.models import Experiment, Run, Submission
from tests.factories import ArmFactory, ExperimentFactory, RunFactory, form_data

pytestmark = pytest.mark.django_db

URL = reverse("experiments:estimate")

# form_data's plan: the baseline and an n-gram arm at levels 1 and 4, 2 blocks. A run takes
# (2 + 20) × 64 / c token steps: 1,408 at c=1, 352 at c=4.


@pytest.fixture
def bounds(settings):
    settings.SPECDASH_SERVER_START_TIMEOUT_S = 300.0
    settings.SPECDASH_SERVER_START_TIMEOUT_S_BY_QUEUE = {}
    settings.SPECDASH_RUN_SECONDS_PER_TOKEN = 0.25


def _estimate(client, **fields) -> str:
    response = client.post(URL, form_data(**fields))
    assert response.status_code == 200
    return " ".join(response.text.split())


def test_logged_out_the_estimate_sends_to_the_login_page(client):
    response = client.post(URL, form_data())
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


def test_the_estimate_is_only_posted(logged_in_client):
    assert logged_in_client.get(URL).status_code == 405


def test_a_queue_without_records_is_priced_at_its_stated_bounds_and_says_so(logged_in_client, bounds):
    html = _estimate(logged_in_client, worker_queue="h100")

    # 2 blocks × 2 servers: 4 starts of 300 s; 2 × 2 × (352 + 88) s of runs: 2,960 s.
    assert "<strong>49.3 device-minutes</strong> for 2 blocks" in html
    assert "no server start recorded on the h100 queue yet, so each counts at its start timeout, 300 s" in html
    assert "no succeeded run recorded on the h100 queue yet, so 250 ms per token step" in html
    assert "352 s at 1, 88 s at 4" in html
    assert "from stated bounds where the h100 queue has no records yet" in html


def test_a_queue_with_records_is_priced_at_its_medians_and_says_how_many(logged_in_client, bounds):
    cpu = ExperimentFactory(worker_queue="cpu", warmup_requests=2, num_prompts=8, max_tokens=10)
    started = timezone.now() - timedelta(hours=1)
    for start_s, seconds in ((30.0, 5.0), (50.0, 10.0), (40.0, 25.0)):  # 50 token steps at c=2
        RunFactory(
            arm=ArmFactory(experiment=cpu), experiment=cpu, concurrency=2, status=Run.Status.SUCCEEDED,
            server_start_s=start_s, started_at=started, finished_at=started + timedelta(seconds=seconds),
        )  # fmt: skip

    html = _estimate(logged_in_client, worker_queue="cpu")

    assert "median 40 s over the cpu queue's last 3 server starts" in html
    assert "median 200.00 ms per token step over the cpu queue's last 3 succeeded runs" in html
    # 4 starts of 40 s; 2 × 2 × (1,408 + 352) × 0.2 s of runs: 1,568 s.
    assert "<strong>26.1 device-minutes</strong>" in html
    assert "stated bounds" not in html


def test_a_search_is_a_range_from_its_ends_at_the_first_look_to_every_level_it_may_add(logged_in_client, bounds):
    html = _estimate(
        logged_in_client, concurrency_levels="", search_low="1", search_high="4", search_resolution="2",
        repetitions="5",
    )  # fmt: skip

    # Least: 3 blocks of both servers at 1 and 4: 6 starts, 3 × 2 × 440 s. Most: 5 blocks, level 2
    # (704 token steps, 176 s) added from block 2: 10 starts, 2 × 440 + 4 × 2 × 616 s.
    assert "<strong>74.0 to 146.8 device-minutes</strong>: from 3 blocks" in html
    assert "with every level the search may add" in html
    assert "352 s at 1, 176 s at 2, 88 s at 4" in html


def test_the_budget_is_set_beside_the_plans_most(logged_in_client, bounds):
    assert "Within the budget of 60 device-minutes, even at its most." in _estimate(
        logged_in_client, max_device_minutes="60"
    )
    # At most 6 blocks of 24.7 device-minutes each, the first 3 queued at submission.
    passed = _estimate(logged_in_client, max_device_minutes="100", repetitions="6")
    assert "no block is added that would pass it, so about 4 of the 6 blocks fit." in passed
    early = _estimate(logged_in_client, max_device_minutes="30", repetitions="6")
    assert "The 3 blocks queued at submission already pass the budget of 30 device-minutes" in early
    fixed = _estimate(logged_in_client, max_device_minutes="30", sequential=None)
    assert "a fixed design runs every block whatever the budget" in fixed


def test_a_field_the_estimate_needs_is_named_until_it_is_valid(logged_in_client):
    html = _estimate(logged_in_client, num_prompts="")
    assert "The estimate needs a valid Prompts per level." in html


def test_a_post_without_the_arms_management_form_names_what_is_missing(logged_in_client):
    response = logged_in_client.post(URL, {"concurrency_levels": "1, 4"})
    assert response.status_code == 200
    missing = "Worker queue, Blocks (at most), Warm-up requests, Prompts per level, Output length (max_tokens)"
    assert f"The estimate needs a valid {missing}." in response.text


def test_the_estimate_saves_nothing(logged_in_client, bounds):
    _estimate(logged_in_client, submission_key="a" * 32)
    assert not Experiment.objects.exists()
    assert not Submission.objects.exists()


def test_the_form_page_asks_for_the_estimate_as_it_is_edited_and_defines_device_minutes(logged_in_client):
    html = logged_in_client.get(reverse("experiments:create")).text
    assert f'hx-post="{URL}"' in html
    assert "<strong>Device-minutes</strong>: the minutes each vLLM server holds" in html
