"""A synthetic workload with two input lengths through the real worker and vLLM: the prompts
sent have the drawn lengths, and the analysis breaks speedup down by input-length bucket."""

import pytest
from django.conf import settings

from experiments.breakdowns import length_bucket
from experiments.input_lengths import parse_length_distribution
from experiments.models import Experiment, RequestRecord
from tests.api_helpers import run_through_api

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TARGET = settings.SPECDASH_MODELS_DIR / "target"


@pytest.mark.skipif(not (TARGET / "config.json").exists(), reason="demo models not built (./dev test builds them)")
def test_a_two_length_workload_is_broken_down_by_input_length(celery_worker_process, user):
    experiment = run_through_api(
        user, name="two lengths on vllm", workload_kind="synthetic", prompt_set="", input_lengths="6:1, 200:1",
        num_prompts=6, seed=4,
    )  # fmt: skip

    assert experiment.status == Experiment.Status.FINISHED
    assert experiment.synthetic_input_len == 200
    drawn = parse_length_distribution("6:1, 200:1").draw(experiment.warmup_requests + 6, seed=4)
    tokens = dict(RequestRecord.objects.filter(run__experiment=experiment).values_list("prompt_index", "input_tokens"))
    assert sorted(tokens) == list(range(1, 7))
    # prompt_index is the prompt's position among all sent, warm-up first.
    # Each word is at least one token: the server counted at least the words sent.
    assert all(tokens[index] >= drawn[index] for index in tokens)
    short = {index for index in tokens if drawn[index] == 6}
    assert 0 < len(short) < 6, "seed 4 should draw both lengths among the measured prompts"
    groups = experiment.analysis.series["by_input_length"]
    expected = {length_bucket(tokens[index]) for index in tokens}
    assert {group["group"] for group in groups} == expected
    assert sum(group["prompts"] for group in groups) == 6
