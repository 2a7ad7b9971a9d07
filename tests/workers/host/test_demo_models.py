"""The demo models in a checkout: the management command that puts them in place through the
machine's cache, the path rule on the folder they land in, and (with the vLLM environment)
the built models themselves."""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command

from experiments.management.commands import build_demo_models
from experiments.prompts.catalog import builtin_prompt_sets
from experiments.rules.model_paths import model_path_refusal
from workers.host import model_cache

FAKE_PYTHON = "/opt/vllm-env/bin/python"


class FakeRun:
    """Stands in for subprocess.run: records each command, exits with `returncode`."""

    def __init__(self, returncode: int = 0):
        self.returncode = returncode
        self.calls: list[tuple[list[str], dict]] = []

    def __call__(self, command, **kwargs):
        self.calls.append((command, kwargs))
        return subprocess.CompletedProcess(command, self.returncode)


@pytest.fixture
def fake_run(settings, tmp_path, monkeypatch):
    settings.SPECDASH_MODELS_DIR = tmp_path / "models"
    settings.SPECDASH_VLLM_PYTHON = FAKE_PYTHON
    fake = FakeRun()
    monkeypatch.setattr(build_demo_models.subprocess, "run", fake)
    return fake


def test_the_command_runs_the_cache_with_the_vllm_python_as_an_argument_list(fake_run, tmp_path):
    call_command("build_demo_models")
    call_command("build_demo_models", force=True)

    [(command, kwargs), (forced, _)] = fake_run.calls
    assert command == [FAKE_PYTHON, "-m", "workers.host.model_cache", "--models-dir", str(tmp_path / "models")]
    assert forced == [*command, "--force"]
    assert kwargs["cwd"] == django_settings.BASE_DIR
    assert "shell" not in kwargs


def test_a_failed_cache_run_is_a_command_error(fake_run):
    fake_run.returncode = 3

    with pytest.raises(CommandError, match="exit code 3"):
        call_command("build_demo_models")


def _installed(tmp_path) -> tuple[Path, Path]:
    """A cache entry built by a stand-in and installed into a checkout's models folder."""

    def build_into(folder: Path) -> None:
        for name in model_cache.MODEL_NAMES:
            (folder / name).mkdir(parents=True)
            (folder / name / "config.json").write_text("{}")
        (folder / "demo_build.json").write_text("{}")

    root, models = tmp_path / "cache", tmp_path / "checkout" / "models"
    inputs = model_cache.build_inputs(Path(django_settings.BASE_DIR), [], {"torch": "test"})
    model_cache.ensure(models, root=root, inputs=inputs, build_into=build_into)
    return root / model_cache.input_key(inputs), models


def test_models_installed_from_the_cache_pass_the_path_rule(settings, tmp_path):
    entry, models = _installed(tmp_path)
    settings.SPECDASH_MODELS_DIR = models

    assert model_path_refusal(str(models / "target")) is None
    assert model_path_refusal(str(models / "draft")) is None
    # The cache itself lies outside the models folder: a model path into it is refused, which is
    # why a checkout holds hard links (or copies), not a symbolic link per model.
    assert "must lie inside" in (model_path_refusal(str(entry / "target")) or "")


def test_a_models_folder_that_is_a_symbolic_link_passes_the_path_rule(settings, tmp_path):
    _, models = _installed(tmp_path)
    linked = tmp_path / "elsewhere" / "models"
    linked.parent.mkdir()
    os.symlink(models, linked)
    settings.SPECDASH_MODELS_DIR = linked

    assert model_path_refusal(str(linked / "target")) is None
    assert model_path_refusal(str(models / "draft")) is None
    assert "must lie inside" in (model_path_refusal(str(tmp_path / "cache")) or "")


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


def _built_models() -> Path:
    models_dir = Path(django_settings.SPECDASH_MODELS_DIR)
    if not all((models_dir / name / "config.json").is_file() for name in model_cache.MODEL_NAMES):
        pytest.skip(f"No demo models in {models_dir}: run `manage.py build_demo_models` first.")
    return models_dir


@pytest.mark.vllm
def test_built_models_load_with_transformers_in_the_vllm_environment():
    models_dir = _built_models()
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


@pytest.mark.vllm
def test_a_second_checkout_gets_the_cached_models_in_seconds(tmp_path):
    models_dir = _built_models()
    entry = Path(json.loads((models_dir / model_cache.INSTALLED).read_text())["cache"])
    second = tmp_path / "second-checkout" / "models"
    command = [django_settings.SPECDASH_VLLM_PYTHON, "-m", "workers.host.model_cache", "--models-dir", str(second)]
    command += ["--cache", str(entry.parent)]
    started = time.monotonic()

    result = subprocess.run(
        command, cwd=django_settings.BASE_DIR, capture_output=True, text=True, timeout=120, check=False
    )

    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(f"demo models cached ({entry.name},")
    # No torch import, no training: a cache hit only hashes a few tens of megabytes.
    assert time.monotonic() - started < 30
    assert model_cache.verify(second, model_cache.read_manifest(entry)) is None
