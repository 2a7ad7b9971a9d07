"""The chat template a server gets (workers/server/chat_template.py): the model's own, or the
plain one for a model that has none, and only on chat experiments' servers."""

import json

import pytest

from experiments.models import Arm
from tests.factories import ArmFactory, ExperimentFactory
from workers.server import chat_template, launch
from workers.server.command import build_server_args


def test_a_model_without_a_template_gets_the_plain_one(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))

    assert chat_template.chat_template_for(str(tmp_path)) == str(chat_template.PLAIN_TEMPLATE)
    assert chat_template.PLAIN_TEMPLATE.read_text().count("add_generation_prompt") == 1


@pytest.mark.parametrize("own", ["tokenizer_config", "jinja"])
def test_a_model_keeps_its_own_template(tmp_path, own):
    if own == "jinja":
        (tmp_path / "chat_template.jinja").write_text("{{ messages }}")
    else:
        (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ messages }}"}))

    assert chat_template.chat_template_for(str(tmp_path)) is None


def test_a_model_id_is_left_to_vllm():
    assert chat_template.chat_template_for("meta-llama/Llama-3.1-8B-Instruct") is None


def test_the_template_goes_on_the_server_command():
    args = build_server_args(
        python="python", model="/m", port=8000, dtype="auto", max_model_len=512, seed=0, speculative_config=None,
        chat_template="/t.jinja",
    )  # fmt: skip

    assert args[args.index("--chat-template") + 1] == "/t.jinja"


@pytest.mark.django_db
@pytest.mark.parametrize(("endpoint", "expected"), [("chat", True), ("completions", False)])
def test_only_chat_experiments_start_servers_with_a_template(tmp_path, endpoint, expected):
    (tmp_path / "tokenizer_config.json").write_text("{}")
    experiment = ExperimentFactory(endpoint=endpoint, target_model=str(tmp_path))
    arm = ArmFactory(experiment=experiment, method=Arm.Method.BASELINE, num_speculative_tokens=None, params={})

    args = launch.arm_server_args(experiment, arm, port=8100)

    assert ("--chat-template" in args) is expected
