import json
import shutil
import subprocess
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command

from experiments.management.commands import build_demo_models
from experiments.management.commands.build_demo_models import MARKER_NAME, build_version
from experiments.prompts.catalog import builtin_prompt_sets

FAKE_PYTHON = "/opt/vllm-env/bin/python"


class FakeBuild:
    """Stands in for subprocess.run: records each command and writes what the builder would."""

    def __init__(self, returncode: int = 0):
        self.returncode = returncode
        self.calls: list[tuple[list[str], dict]] = []

    def __call__(self, command, **kwargs):
        self.calls.append((command, kwargs))
        if self.returncode == 0:
            out = Path(command[command.index("--out") + 1])
            for name in ("target", "draft"):
                (out / name).mkdir(parents=True, exist_ok=True)
                (out / name / "config.json").write_text("{}")
        return subprocess.CompletedProcess(command, self.returncode)


@pytest.fixture
def models_dir(settings, tmp_path):
    settings.SPECDASH_MODELS_DIR = tmp_path / "models"
    settings.SPECDASH_VLLM_PYTHON = FAKE_PYTHON
    return tmp_path / "models"


@pytest.fixture
def fake_build(monkeypatch):
    fake = FakeBuild()
    monkeypatch.setattr(build_demo_models.subprocess, "run", fake)
    return fake


def test_builds_with_the_vllm_python_as_an_argument_list(models_dir, fake_build):
    call_command("build_demo_models")

    [(command, kwargs)] = fake_build.calls
    assert command == [FAKE_PYTHON, "-m", "workers.host.demo_models", "--out", str(models_dir)]
    assert kwargs["cwd"] == django_settings.BASE_DIR
    assert "shell" not in kwargs
    assert (models_dir / MARKER_NAME).read_text().strip() == build_version()


def test_skips_when_models_match_the_marker(models_dir, fake_build):
    call_command("build_demo_models")
    call_command("build_demo_models")

    assert len(fake_build.calls) == 1


def test_rebuilds_when_the_marker_is_from_another_version(models_dir, fake_build):
    call_command("build_demo_models")
    (models_dir / MARKER_NAME).write_text("an older recipe\n")

    call_command("build_demo_models")

    assert len(fake_build.calls) == 2
    assert (models_dir / MARKER_NAME).read_text().strip() == build_version()


def test_rebuilds_when_a_model_is_missing(models_dir, fake_build):
    call_command("build_demo_models")
    (models_dir / "draft" / "config.json").unlink()

    call_command("build_demo_models")

    assert len(fake_build.calls) == 2


def test_force_rebuilds_current_models(models_dir, fake_build):
    call_command("build_demo_models")
    call_command("build_demo_models", force=True)

    assert len(fake_build.calls) == 2


def test_failed_build_raises_and_leaves_no_marker(models_dir, monkeypatch):
    monkeypatch.setattr(build_demo_models.subprocess, "run", FakeBuild(returncode=3))
    models_dir.mkdir(parents=True)
    (models_dir / MARKER_NAME).write_text(build_version() + "\n")

    with pytest.raises(CommandError, match="exit code 3"):
        call_command("build_demo_models", force=True)

    assert not (models_dir / MARKER_NAME).exists()


def test_build_version_changes_with_the_recipe_and_the_prompt_sets(tmp_path, settings, monkeypatch):
    # A copy of the recipe and the prompt sets: the version follows their content.
    (tmp_path / "workers" / "host").mkdir(parents=True)
    recipe = tmp_path / "workers" / "host" / "demo_models.py"
    recipe.write_bytes((Path(settings.BASE_DIR) / "workers" / "host" / "demo_models.py").read_bytes())
    prompt_sets = tmp_path / "prompt_sets"
    shutil.copytree(build_demo_models.PROMPT_SETS_DIR, prompt_sets)
    settings.BASE_DIR = tmp_path
    monkeypatch.setattr(build_demo_models, "PROMPT_SETS_DIR", prompt_sets)

    original = build_version()
    assert len(original) == 64
    assert build_version() == original
    recipe.write_text(recipe.read_text() + "\n# changed\n")
    changed_recipe = build_version()
    assert changed_recipe != original
    chat = prompt_sets / "chat.json"
    chat.write_text(chat.read_text().replace('"prompts": [', '"prompts": ["one more", ', 1))
    assert build_version() not in (original, changed_recipe)


LOAD_CHECK = """
import json, sys
from transformers import AutoModelForCausalLM, AutoTokenizer
target_dir, draft_dir = sys.argv[1:3]
prompts = json.load(sys.stdin)
tokenizer = AutoTokenizer.from_pretrained(target_dir)
target = AutoModelForCausalLM.from_pretrained(target_dir)
draft = AutoModelForCausalLM.from_pretrained(draft_dir)
ids = tokenizer(prompts[0], return_tensors="pt").input_ids
output = target.generate(ids, attention_mask=ids.new_ones(ids.shape), max_new_tokens=8, do_sample=False)
print(json.dumps({
    "is_fast": tokenizer.is_fast,
    "same_tokenizer": AutoTokenizer.from_pretrained(draft_dir).get_vocab() == tokenizer.get_vocab(),
    "target_layers": target.config.num_hidden_layers,
    "draft_layers": draft.config.num_hidden_layers,
    "vocab_sizes": [target.config.vocab_size, draft.config.vocab_size, len(tokenizer)],
    "max_position_embeddings": target.config.max_position_embeddings,
    "longest_prompt_tokens": max(len(tokenizer(p).input_ids) for p in prompts),
    "generated": output.shape[1] - ids.shape[1],
}))
"""


@pytest.mark.vllm
def test_built_models_load_with_transformers_in_the_vllm_environment():
    models_dir = Path(django_settings.SPECDASH_MODELS_DIR)
    if not all((models_dir / name / "config.json").is_file() for name in ("target", "draft")):
        pytest.skip(f"No demo models in {models_dir}: run `manage.py build_demo_models` first.")
    prompts = [p for prompt_set in builtin_prompt_sets().values() for p in prompt_set.prompts]

    result = subprocess.run(
        [django_settings.SPECDASH_VLLM_PYTHON, "-c", LOAD_CHECK, str(models_dir / "target"), str(models_dir / "draft")],
        input=json.dumps(prompts),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["is_fast"]
    assert report["same_tokenizer"]
    assert (report["target_layers"], report["draft_layers"]) == (4, 1)
    assert len(set(report["vocab_sizes"])) == 1
    assert report["max_position_embeddings"] >= 512
    assert report["longest_prompt_tokens"] + 64 <= 512
    assert report["generated"] == 8
