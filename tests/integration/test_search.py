"""A break-even search through the real parts: PostgreSQL, Redis, a Celery worker process and
vLLM CPU servers on the demo models (experiments/measurement/planning/planner.py,
experiments/analysis/continuation.py, workers/runner.py).

One small search: the baseline and the demo draft model at k = 10 over concurrency 1 to 32 at
resolution 2 (grid 1, 2, 4, 8, 16, 32), on 128 distinct prompts made from the built-in sets
(4 × 32 measured, none sent twice in a run), 16 tokens each, for a team that deploys only a gain
of 20 % or more (worthwhile_gain 0.2). The search leans a level paying while its point estimate
is above 1 + that gain, so the points must straddle 1.2. With 16 tokens a request decodes long
enough for its batch to be mostly decodes: on the 2-core host the draft at k = 10 measured
1.6-1.9× at 1 and 0.75-0.91× at 16 and 32 in engine-timed TPOT (each verification step carries
11 tokens per request, which a CPU pays for at a high batch). With 8 tokens the new requests'
prefills fill most steps at 32, and the ratio there swung between 0.8 and 1.44 from one
experiment to the next (a CI run saw no bracket in four blocks).

The points bracket the break-even after the first block or, on a noisy host, after a later one,
and the search places a level inside the range on the servers the next block starts anyway.
Once it has, the owner sets the budget to what was spent before that block (the page's Budget
form; the worker reads it before each next block): the block runs, and the experiment stops on
its budget after it, before the level's first look. Its page then says what it measured, what
is still open and what would settle it, what it spent against a fixed grid, and what to deploy
(undecided: propose that more data is needed).
"""

import time

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from experiments.analysis import device_time, primary
from experiments.analysis.loader import load_runs
from experiments.definition import services as definition
from experiments.definition.services import ArmSpec
from experiments.execution import services as execution
from experiments.models import Arm, Experiment, ExperimentAnalysis, Run
from experiments.prompt_sets.services import prompt_set_from_builtin
from tests.factories import experiment_fields
from tests.worker_fixtures import wait_for_experiment

pytestmark = [pytest.mark.worker, pytest.mark.vllm]

DRAFT = settings.SPECDASH_MODELS_DIR / "draft"
MODELS_BUILT = pytest.mark.skipif(
    not (DRAFT / "config.json").exists(), reason="demo models not built (./dev test builds them)"
)
LEVELS_ENDS = {1, 32}
ADDED_BY = 4  # the block by which the search must have placed a level


def _wait_for_added_level(experiment_id: int, *, timeout_s: float) -> int:
    """The block the search first runs a level other than the ends in, once the worker queued it."""
    deadline = time.monotonic() + timeout_s
    while True:
        added = Run.objects.filter(experiment_id=experiment_id).exclude(concurrency__in=LEVELS_ENDS)
        first = added.order_by("repetition").values_list("repetition", flat=True).first()
        if first is not None:
            return first
        experiment = Experiment.objects.get(id=experiment_id)
        blocks = experiment.runs.values("repetition").distinct().count()
        assert blocks <= ADDED_BY, f"no level placed by block {ADDED_BY}: {_looks(experiment)}"
        assert experiment.is_active, f"the experiment ended without placing a level: {experiment.status}"
        assert time.monotonic() < deadline, f"no level placed within {timeout_s:.0f} s"
        time.sleep(1)


def _looks(experiment: Experiment) -> str:
    """What the search reads now: each measured level's word, point estimate and blocks (for a
    failure's message, and printed after a pass)."""
    decided = primary.primary_decisions(experiment, load_runs(experiment), final=False)
    words = (f"{d.key[1]}: {d.outcome} {d.estimate.point:.3f} ({d.blocks} blocks)" for d in decided.candidates)
    return "; ".join(words) or "no look yet"


@MODELS_BUILT
@pytest.mark.django_db(transaction=True)
def test_a_search_adds_a_level_stops_on_its_budget_and_says_what_to_do(celery_worker_process):
    owner = get_user_model().objects.create_user(username="searcher", password="pw-for-tests")
    draft = ArmSpec(method=Arm.Method.DRAFT_MODEL, num_speculative_tokens=10, params={"model": str(DRAFT)})
    prompts = prompt_set_from_builtin(owner=owner, name="search", count=128)
    fields = experiment_fields(
        name="search on vllm", workload_kind="uploaded", uploaded_prompt_set=prompts, num_prompts=128,
        max_tokens=16, ignore_eos=True, temperature=0.0, warmup_requests=0, concurrency_levels=sorted(LEVELS_ENDS),
        search_low=1, search_high=32, search_resolution=2.0, repetitions=8, sequential=True, aa_replicate=False,
        worthwhile_gain=0.2,
    )  # fmt: skip
    experiment = definition.experiment_create(owner=owner, arms=[draft], **fields)
    assert experiment.first_blocks == 1
    assert set(experiment.runs.values_list("concurrency", flat=True)) == LEVELS_ENDS

    block = _wait_for_added_level(experiment.id, timeout_s=1500)
    # As its owner would on the page (the Budget form): what the blocks before this one spent.
    execution.experiment_budget_set(experiment=experiment, minutes=device_time.device_minutes(experiment))
    experiment = wait_for_experiment(experiment.id, timeout_s=900)

    assert experiment.status == Experiment.Status.FINISHED, list(experiment.runs.values_list("error", flat=True))
    runs = experiment.runs.all()
    assert all(run.status == Run.Status.SUCCEEDED for run in runs)
    # The level the search placed inside the range ran in that block, on both servers, beside the ends.
    (added,) = set(experiment.concurrency_levels) - LEVELS_ENDS
    assert added in (2, 4, 8, 16)
    assert {(run.repetition, run.concurrency) for run in runs} == {
        *((b, level) for b in range(1, block + 1) for level in LEVELS_ENDS), (block, added),
    }  # fmt: skip
    assert runs.filter(concurrency=added).count() == 2  # the baseline's and the arm's
    # Each server's start-up is recorded: device-minutes are start-ups plus runs, not wall clock.
    assert runs.filter(server_start_s__gt=0).count() == 2 * block
    assert not device_time.spent(experiment).wall_clock

    print(f"the search's looks: {_looks(experiment)}")
    question = ExperimentAnalysis.objects.get(experiment=experiment).series["question"]
    assert question["stop"] == "budget"
    assert question["blocks_run"] == block
    (searched,) = question["search"]["arms"]
    assert [row["level"] for row in searched["levels"]] == sorted((*LEVELS_ENDS, added))
    assert [row["entered"] for row in searched["levels"] if row["level"] == added] == [block]
    assert question["search"]["device"]["fixed_runs"] == 2 * block * 6  # sessions × the grid's 6 levels
    assert question["search"]["device"]["runs"] == 2 * (2 * block + 1)

    client = Client()
    client.force_login(owner)
    page = client.get(reverse("experiments:detail", args=[experiment.id])).content.decode()
    assert 'id="question-search"' in page
    assert "another block would have passed the budget" in page
    assert "would settle it" in page
    assert "saved about" in page
    assert 'id="recommendation-bands"' in page
    assert "kind=needs_more_data" in page
