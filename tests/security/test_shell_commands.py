"""Every command specdash shows, pasted into a POSIX shell, runs the argument vector it was made
from (experiments/rules/commands.py), and every door refuses the same model paths
(experiments/rules/model_paths.py): property tests over any argument, any config and any path."""

import json
import re
import shlex
from html import unescape

import pytest
from django import forms
from django.conf import settings as django_settings
from django.urls import reverse
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from experiments.decisions import services as decisions
from experiments.decisions.services import DecisionSpec
from experiments.definition.speculative_configs import config_problem
from experiments.form_kit import clean_model_path
from experiments.models import Decision, EnvironmentSnapshot
from experiments.rules import commands
from experiments.rules.model_paths import model_path_refusal
from tests.factories import seed_finished_experiment

# Any text a column can hold: no NUL, no lone surrogate (the doors refuse both before this).
TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=40)
HOSTILE = st.sampled_from(["'", '"', "`", "$(id)", "; id", "\n", " ", "\\", "<", ">", "|", "&", "*", "~", "!", "#"])
WORDS = st.one_of(TEXT, st.lists(HOSTILE, min_size=1, max_size=4).map("".join))
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | WORDS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(WORDS, inner, max_size=3),
    max_leaves=8,
)


@given(argv=st.lists(WORDS, max_size=8))
@example(argv=["--model", "a';id;'b", "`id`", "$(id)", ""])
def test_any_argument_vector_survives_the_shell(argv):
    assert shlex.split(commands.shell_join(argv)) == argv


@given(config=st.dictionaries(WORDS, JSON_VALUES, max_size=5))
@example(config={"method": "draft_model", "model": "/m/it's `id` $(id)"})
def test_any_config_is_one_shell_word_after_its_flag(config):
    assert shlex.split(commands.speculative_config_flag(config)) == [
        "--speculative-config",
        commands.config_json(config),
    ]
    stored = commands.config_json(config)
    assert shlex.split(commands.speculative_config_flag(stored)) == ["--speculative-config", stored]


# ---------------------------------------------------------------- the model path rule, the same on every door

PATH_TAILS = st.one_of(
    TEXT, st.lists(st.one_of(HOSTILE, st.sampled_from(["a", "/", "-", ".", "_"])), max_size=6).map("".join)
)


def _form_refuses(path: str) -> bool:
    try:
        clean_model_path(path)
    except forms.ValidationError:
        return True
    return False


def _config_refuses(path: str) -> bool:
    return config_problem({"method": "draft_model", "num_speculative_tokens": 3, "model": path}) is not None


@given(tail=PATH_TAILS)
@example(tail="it's")
@example(tail="a b")
@example(tail="-rf")
@example(tail="/-")
def test_a_path_the_rule_accepts_is_a_plain_shell_word_and_every_door_agrees(tail):
    path = f"{django_settings.SPECDASH_MODELS_DIR}/{tail}"
    refused = model_path_refusal(path) is not None
    if not refused:
        assert shlex.split(tail) == [tail] if tail else True
        assert shlex.quote(tail) == tail or tail == ""
    assert _config_refuses(path) == refused
    if path == path.strip():
        assert _form_refuses(path) == refused


@pytest.mark.parametrize("path", ["/srv/models/it's", "/srv/models/a b", "/srv/models/$(id)"])
def test_an_administrator_may_allow_an_unusual_path_that_exists(settings, tmp_path, path):
    settings.SPECDASH_ALLOW_ANY_MODEL_PATH = True
    assert model_path_refusal(path) is not None, "a path that does not exist stays refused"
    real = tmp_path / path.rsplit("/", 1)[1]
    real.mkdir()
    assert model_path_refusal(str(real)) is None


def test_the_models_folder_may_hold_any_character(settings, tmp_path):
    """The folder is the administrator's choice; only the part below it is the user's."""
    settings.SPECDASH_MODELS_DIR = tmp_path / "models dir's"
    settings.SPECDASH_MODELS_DIR.mkdir()
    assert model_path_refusal(f"{settings.SPECDASH_MODELS_DIR}/target") is None
    assert model_path_refusal(f"{settings.SPECDASH_MODELS_DIR}/a b") is not None


# ---------------------------------------------------------------- what the pages show

PAGE_EXAMPLES = hypothesis_settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _codes(page: str, prefix: str) -> list[str]:
    return [unescape(code) for code in re.findall(rf"<code[^>]*>({re.escape(prefix)}.*?)</code>", page, re.S)]


@pytest.fixture
def evidence(db, admin_user):
    return seed_finished_experiment(owner=admin_user, name="evidence")


@PAGE_EXAMPLES
@given(argv=st.lists(WORDS, min_size=1, max_size=5))
def test_the_protocol_cards_server_command_splits_back_into_what_ran(admin_client, evidence, argv):
    command = ["python", "-m", "vllm.entrypoints.openai.api_server", *argv, "--port", "8101"]
    EnvironmentSnapshot.objects.filter(run__experiment=evidence).delete()
    EnvironmentSnapshot.objects.create(run=evidence.runs.first(), server_command=command)

    page = admin_client.get(reverse("experiments:detail", args=[evidence.pk])).text

    shown = _codes(page, "python -m vllm")
    assert [shlex.split(code) for code in shown] == [[*command[:-1], "<port>"]]


@PAGE_EXAMPLES
@given(note=WORDS)
def test_a_decisions_config_splits_back_into_the_flag_and_its_json(admin_client, admin_user, evidence, note):
    arm = evidence.arms.get(label="n-gram k=4")
    arm.params = arm.params | {"note": note}
    arm.save(update_fields=["params"])
    spec = DecisionSpec(
        service="chat", kind=Decision.Kind.DEPLOY, arm=arm, max_concurrency=4, metric="tpot",
        rationale="Faster.", evidence=[evidence],
    )  # fmt: skip
    decision = decisions.decision_propose(by=admin_user, spec=spec)

    shown = _codes(admin_client.get(reverse("experiments:decision", args=[decision.pk])).text, "--speculative-config")

    assert [shlex.split(code) for code in shown] == [
        ["--speculative-config", json.dumps(decision.speculative_config, sort_keys=True)]
    ]
