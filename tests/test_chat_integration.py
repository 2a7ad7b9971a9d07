"""The chat endpoint through the real parts: a JSONL set of chat messages with categories,
uploaded and run through /v1/chat/completions on the demo target (which gets specdash's plain
chat template), measured like completions, with per-request speculative metrics; only the
set's prompts in the experiment's input-length range are sent."""

import json

import pytest
from django.conf import settings

from experiments.models import EnvironmentSnapshot, Experiment, RequestRecord
from experiments.prompt_sets import prompt_set_upload
from experiments.prompt_uploads import prompt_file_read
from experiments.tokens import unpack_token_ids
from experiments.workloads import get_prompt_set
from tests.api_helpers import run_through_api
from workers.chat_template import PLAIN_TEMPLATE

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TARGET = settings.SPECDASH_MODELS_DIR / "target"


def _chat_set(user):
    lines = [
        json.dumps(
            {
                "messages": [{"role": "system", "content": "Edit the code."}, {"role": "user", "content": prompt}],
                # The item's text is its messages' text: the system message's 3 words and the prompt's.
                "category": f"{3 + len(prompt.split())} words",
            }
        )
        # 24, 26, 22, 25, 22, 29, 26, 17, 18, 34, 27 and 27 words.
        for prompt in get_prompt_set("code_edit").prompts[:12]
    ]
    data = "\n".join(lines).encode()
    return prompt_set_upload(
        owner=user, name="chat-edits", file_name="edits.jsonl", size_bytes=len(data), parsed=prompt_file_read("e", data)
    )


@pytest.mark.skipif(not (TARGET / "config.json").exists(), reason="demo models not built (./dev test builds them)")
def test_a_chat_set_runs_through_the_chat_endpoint(celery_worker_process, user):
    prompt_set = _chat_set(user)
    experiment = run_through_api(
        user, name="chat on vllm", workload_kind="uploaded", endpoint="chat", uploaded_prompt_set=prompt_set.pk,
        num_prompts=4, input_lengths="23-27",
    )  # fmt: skip

    assert experiment.status == Experiment.Status.FINISHED
    for command in EnvironmentSnapshot.objects.filter(run__experiment=experiment).values_list(
        "server_command", flat=True
    ):
        assert command[command.index("--chat-template") + 1] == str(PLAIN_TEMPLATE)
    rows = list(RequestRecord.objects.filter(run__experiment=experiment).select_related("run__arm"))
    assert len(rows) == 2 * 4
    for row in rows:
        assert row.error == ""
        assert row.output_tokens > 0
        assert row.input_tokens > 0
        assert len(unpack_token_ids(row.output_token_ids)) == row.output_tokens == sum(row.chunk_tokens)
    speculative = [row for row in rows if row.run.arm.is_speculative]
    # Per-request speculative metrics arrive on the chat stream's last event, as on completions.
    assert any(row.spec_proposed_per_step for row in speculative)
    groups = experiment.analysis.series["by_category"]
    # Items 2, 4, 7 and 11 of the file (the first, 24 words, warms up); unfiltered, the
    # measured items would have been of 26, 22, 25 and 22 words.
    assert [(group["group"], group["prompts"]) for group in groups] == [
        ("25 words", 1),
        ("26 words", 2),
        ("27 words", 1),
    ]
