"""A break-even search through the real parts: PostgreSQL, Redis, a Celery worker process and
vLLM CPU servers on the demo models (experiments/measurement/planner.py,
experiments/analysis/continuation.py, workers/runner.py).

One small search: the baseline and the demo draft model at k = 10 over concurrency 1 to 16 at
resolution 2 (grid 1, 2, 4, 8, 16), on 66 distinct prompts (4 × 16 measured and 2 warm-up, none
sent twice in a run) uploaded from the built-in sets. On the 2-core host the draft at k = 10 is about 2× faster at
1 and slower at 16 (each of its verification steps carries 11 tokens per request, which a CPU
pays for at a high batch), so after block 1 the points bracket the break-even and the search
places a level inside the range for block 2, on the servers block 2 starts anyway. The owner sets
the budget once block 1's cost is known (the page's Budget form; the worker reads it before each
next block), so that on any host speed block 2 fits and a third would not:
the experiment stops on its budget after two blocks, before any look, and its page says what it
measured, what is still open and what would settle it, what it spent against a fixed grid, and
what to deploy (undecided: propose that more data is needed).
"""

import time

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from experiments.analysis import device_time
from experiments.definition import services as definition
from experiments.definition.services import ArmSpec
from experiments.execution import services as execution
from experiments.models import Arm, Experiment, ExperimentAnalysis, Run
from experiments.prompt_sets.services import prompt_set_from_builtin
from tests.factories import experiment_fields
from tests.worker_fixtures import wait_for_experiment

pytestmark = pytest.mark.integration

DRAFT = settings.SPECDASH_MODELS_DIR / "draft"
MODELS_BUILT = pytest.mark.skipif(
    not (DRAFT / "config.json").exists(), reason="demo models not built (./dev test builds them)"
)
LEVELS_ENDS = {1, 16}
BUDGET_BLOCKS = 2.6  # the budget, in block-1 costs: block 2 fits (2 ≤ 2.6), a third does not (about 3.2)


def _wait_for_block(experiment_id: int, block: int, *, timeout_s: float) -> None:
    """Until the worker has queued `block` (the previous one is done)."""
    deadline = time.monotonic() + timeout_s
    while not Run.objects.filter(experiment_id=experiment_id, repetition=block).exists():
        assert time.monotonic() < deadline, f"block {block} was not queued within {timeout_s:.0f} s"
        experiment = Experiment.objects.get(id=experiment_id)
        assert experiment.is_active, f"the experiment ended before block {block}: {experiment.status}"
        time.sleep(1)


@MODELS_BUILT
@pytest.mark.django_db(transaction=True)
def test_a_search_adds_a_level_stops_on_its_budget_and_says_what_to_do(celery_worker_process):
    owner = get_user_model().objects.create_user(username="searcher", password="pw-for-tests")
    draft = ArmSpec(method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=10, params={"model": str(DRAFT)})
    prompts = prompt_set_from_builtin(owner=owner, name="search", count=66)
    fields = experiment_fields(
        name="search on vllm", workload_kind="uploaded", uploaded_prompt_set=prompts, num_prompts=64,
        max_tokens=16, ignore_eos=True, temperature=0.0, warmup_requests=2, concurrency_levels=sorted(LEVELS_ENDS),
        search_low=1, search_high=16, search_resolution=2.0, repetitions=6, sequential=True, aa_replicate=False,
    )  # fmt: skip
    experiment = definition.experiment_create(owner=owner, arms=[draft], **fields)
    assert experiment.first_blocks == 1
    assert set(experiment.runs.values_list("concurrency", flat=True)) == LEVELS_ENDS

    _wait_for_block(experiment.id, 2, timeout_s=900)
    # As its owner would on the page (the Budget form): set once block 1's cost is known.
    block_one = device_time.device_minutes(experiment)
    execution.experiment_budget_set(experiment=experiment, minutes=round(BUDGET_BLOCKS * block_one, 2))
    experiment = wait_for_experiment(experiment.id, timeout_s=900)

    assert experiment.status == Experiment.Status.FINISHED, list(experiment.runs.values_list("error", flat=True))
    runs = experiment.runs.all()
    assert all(run.status == Run.Status.SUCCEEDED for run in runs)
    # The level the search placed inside the range ran from block 2, on both servers, beside the ends.
    (added,) = set(experiment.concurrency_levels) - LEVELS_ENDS
    assert added in (2, 4, 8)
    assert {(run.repetition, run.concurrency) for run in runs} == {
        *((1, level) for level in LEVELS_ENDS), *((2, level) for level in (*LEVELS_ENDS, added)),
    }  # fmt: skip
    assert runs.filter(concurrency=added).count() == 2  # the baseline's and the arm's
    # Each server's start-up is recorded: device-minutes are start-ups plus runs, not wall clock.
    assert runs.filter(server_start_s__gt=0).count() == 4
    assert not device_time.spent(experiment).wall_clock

    question = ExperimentAnalysis.objects.get(experiment=experiment).series["question"]
    assert question["stop"] == "budget"
    assert question["blocks_run"] == 2
    (searched,) = question["search"]["arms"]
    assert [row["level"] for row in searched["levels"]] == sorted((*LEVELS_ENDS, added))
    assert [row["entered"] for row in searched["levels"] if row["level"] == added] == [2]
    assert question["search"]["device"]["fixed_runs"] == 4 * 5  # 4 server sessions × the grid's 5 levels
    assert question["search"]["device"]["runs"] == 10

    client = Client()
    client.force_login(owner)
    page = client.get(reverse("experiments:detail", args=[experiment.id])).content.decode()
    assert 'id="question-search"' in page
    assert "another block would have passed the budget" in page
    assert "would settle it" in page
    assert "saved about" in page
    assert 'id="recommendation-bands"' in page
    assert "kind=needs_more_data" in page
