"""Faster per token is not "pays", through the real parts (PostgreSQL, Redis, a Celery worker
process and vLLM CPU servers): a draft-model arm whose server cannot fit the concurrency's
requests is faster in engine-timed TPOT while its E2E and throughput are worse, and its word for
the service is "costs", naming the guard (docs/verdicts.md, "The service's objective").

The experiment's own server settings, the same for both arms, are the squeeze: 64 batched tokens
a step. A speculating request spends k + 1 = 11 of them per step, so at 16 concurrent requests the
draft arm's server admits only a few at a time: those decode fast (engine TPOT about 2-3× the
baseline's), the others wait for a first token, and the server's output throughput falls (about
0.6× on this 2-core host). At 1 request the squeeze does not bite and the arm pays. One server per
arm for all three blocks: two server starts.
"""

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from experiments.definition import services as definition
from experiments.definition.services import ArmSpec
from experiments.measurement.stats import objective
from experiments.models import Experiment, SpeedupEstimate
from experiments.prompt_sets.services import prompt_set_from_builtin
from tests.factories import experiment_fields
from tests.worker_fixtures import wait_for_experiment

pytestmark = [pytest.mark.worker, pytest.mark.vllm]

TARGET = settings.SPECDASH_MODELS_DIR / "target"
DRAFT = settings.SPECDASH_MODELS_DIR / "draft"
GUARDS = [{"metric": "e2e", "margin": 0.05}, {"metric": "output_throughput", "margin": 0.05}]
LOW, HIGH = 1, 16


def _point(experiment: Experiment, arm, level: int, metric: str) -> float:
    return SpeedupEstimate.objects.get(experiment=experiment, arm=arm, concurrency=level, metric=metric).point


@pytest.mark.skipif(not (DRAFT / "config.json").exists(), reason="demo models not built (./dev test builds them)")
@pytest.mark.django_db(transaction=True)
def test_a_draft_that_is_faster_per_token_but_starves_the_batch_costs_capacity(celery_worker_process):
    owner = get_user_model().objects.create_user(username="capacity", password="pw-for-tests")
    prompts = prompt_set_from_builtin(owner=owner, name="capacity", count=4 * HIGH)
    fields = experiment_fields(
        name="starved draft", workload_kind="uploaded", uploaded_prompt_set=prompts, num_prompts=4 * HIGH,
        max_tokens=32, temperature=0.0, concurrency_levels=[LOW, HIGH], repetitions=3,
        warmup_requests=0, sequential=False, server_per_block=False,
        max_num_seqs=HIGH, max_num_batched_tokens=64,
        objective="interactive", primary_metric="server_tpot", guards=GUARDS,
    )  # fmt: skip
    arm = ArmSpec(method="draft_model", num_speculative_tokens=10, params={"model": str(DRAFT)}, label="draft k=10")
    experiment = definition.experiment_create(owner=owner, arms=[arm], **fields)

    experiment = wait_for_experiment(experiment.id, timeout_s=1500)

    errors = sorted(set(experiment.runs.exclude(error="").values_list("error", flat=True)))
    assert experiment.status == Experiment.Status.FINISHED, errors
    draft = experiment.arms.get(label="draft k=10")
    tpot, throughput = (
        _point(experiment, draft, HIGH, "server_tpot"),
        _point(experiment, draft, HIGH, "output_throughput"),
    )
    e2e = _point(experiment, draft, HIGH, "e2e")
    assert tpot > 1.3, f"the starved draft's engine TPOT at {HIGH}: {tpot:.2f}x"
    assert throughput < 0.95, f"the starved draft's output throughput at {HIGH}: {throughput:.2f}x"
    assert e2e < 0.95, f"the starved draft's E2E at {HIGH}: {e2e:.2f}x"
    cells = {cell["level"]: cell for cell in experiment.analysis.series["question"]["cells"]}
    starved = cells[HIGH]["joint"]
    assert starved["word"] == objective.COSTS, starved
    assert starved["sentence"].startswith("faster per token but costs capacity"), starved
    assert starved["blocked_by"] in ("Output throughput", "End-to-end latency")
    assert cells[HIGH]["outcome"] == "faster"  # the primary metric alone would have deployed it
    assert cells[LOW]["joint"]["word"] != objective.COSTS
    word = SpeedupEstimate.objects.get(experiment=experiment, arm=draft, concurrency=HIGH, primary=True).word
    assert word == objective.COSTS
