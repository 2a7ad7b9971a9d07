"""An uploaded prompt set with categories through the real worker and vLLM: the runs send its
prompts, and the analysis breaks speedup and acceptance down by category."""

import json

import pytest
from django.conf import settings
from django.urls import reverse

from experiments.models import Experiment, RequestRecord
from experiments.prompt_sets import prompt_set_upload
from experiments.prompt_uploads import prompt_file_read
from experiments.workloads import get_prompt_set
from tests.api_helpers import run_through_api, token_client

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TARGET = settings.SPECDASH_MODELS_DIR / "target"


@pytest.mark.skipif(not (TARGET / "config.json").exists(), reason="demo models not built (./dev test builds them)")
def test_an_uploaded_set_runs_and_is_broken_down_by_category(celery_worker_process, user):
    prompts = get_prompt_set("code_edit").prompts[:8]
    data = "\n".join(
        json.dumps({"prompt": prompt, "category": "short" if len(prompt.split()) < 21 else "long"})
        for prompt in prompts
    ).encode()
    prompt_set = prompt_set_upload(
        owner=user, name="edits", file_name="edits.jsonl", size_bytes=len(data), parsed=prompt_file_read("e", data)
    )
    experiment = run_through_api(
        user, name="uploaded on vllm", workload_kind="uploaded", uploaded_prompt_set=prompt_set.pk, num_prompts=6
    )

    assert experiment.status == Experiment.Status.FINISHED
    assert experiment.prompt_set_hash == prompt_set.sha256
    rows = RequestRecord.objects.filter(run__experiment=experiment)
    assert sorted(set(rows.values_list("prompt_index", flat=True))) == list(range(1, 7))
    groups = experiment.analysis.series["by_category"]
    # Prompts 1-6 of the set: 2 and 4 are short (19 words), the others long.
    assert [(group["group"], group["prompts"]) for group in groups] == [("long", 4), ("short", 2)]
    assert all(group["acceptance"] and group["cells"][0]["outcome"] == "too few blocks" for group in groups)
    results = token_client(user).get(reverse("api:experiment-results", args=[experiment.pk])).json()
    assert results["series"]["by_category"] == groups
