"""The demo models' cache: keyed by the build's inputs, sealed by a manifest, shared by checkouts."""

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from workers.host import model_cache

REPO = Path(__file__).resolve().parents[3]
VERSIONS = {"torch": "2.13.0+cpu", "transformers": "5.19.0", "tokenizers": "0.23.3", "safetensors": "0.6.2"}


class FakeBuild:
    """Writes what the builder writes: target/, draft/ and demo_build.json; counts its builds."""

    def __init__(self, fail: bool = False):
        self.fail = fail
        self.builds = 0

    def __call__(self, folder: Path) -> None:
        self.builds += 1
        for name in model_cache.MODEL_NAMES:
            (folder / name).mkdir(parents=True)
            (folder / name / "config.json").write_text(json.dumps({"name": name}))
            (folder / name / "model.safetensors").write_bytes(bytes([self.builds]) * 4096)
        if self.fail:
            raise RuntimeError("the build broke halfway")
        (folder / "demo_build.json").write_text("{}")


@pytest.fixture
def inputs():
    return model_cache.build_inputs(REPO, [], VERSIONS)


@pytest.fixture
def root(tmp_path):
    return tmp_path / "cache"


def ensure(models_dir, root, inputs, build, **kwargs):
    return model_cache.ensure(models_dir, root=root, inputs=inputs, build_into=build, **kwargs)


def test_the_cache_lives_outside_the_checkout_where_the_environment_says():
    assert model_cache.cache_root({"SPECDASH_MODEL_CACHE": "/srv/cache"}) == Path("/srv/cache")
    assert model_cache.cache_root({"XDG_CACHE_HOME": "/x"}) == Path("/x/specdash/demo-models")
    assert model_cache.cache_root({}) == Path.home() / ".cache" / "specdash" / "demo-models"


def test_the_key_follows_the_builder_the_corpus_the_recipe_and_the_libraries(tmp_path):
    repo = tmp_path / "repo"
    for part in [model_cache.BUILDER, *model_cache.CORPUS]:
        source = REPO / part
        if source.is_dir():
            shutil.copytree(source, repo / part)
        else:
            (repo / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, repo / part)

    def key(changes=(), versions=VERSIONS):
        return model_cache.input_key(model_cache.build_inputs(repo, list(changes), versions))

    original = key()
    assert key() == original == model_cache.input_key(model_cache.build_inputs(REPO, [], VERSIONS))
    seen = {original}
    builder = repo / model_cache.BUILDER
    builder.write_text(builder.read_text() + "\n# changed\n")
    seen.add(key())
    chat = repo / "experiments/prompts/data/chat.json"
    chat.write_text(chat.read_text().replace('"prompts": [', '"prompts": ["one more", ', 1))
    seen.add(key())
    seen.add(key(["target_steps=10"]))
    seen.add(key(versions=VERSIONS | {"torch": "2.14.0+cpu"}))
    assert len(seen) == 5


def test_a_second_checkout_reuses_the_build_through_hard_links(tmp_path, root, inputs):
    build = FakeBuild()
    first, second = tmp_path / "one" / "models", tmp_path / "two" / "models"

    assert ensure(first, root, inputs, build) == "built"
    assert ensure(second, root, inputs, build) == "cached"
    assert ensure(second, root, inputs, build) == "current"

    assert build.builds == 1
    entry = root / model_cache.input_key(inputs)
    for relative in model_cache.read_manifest(entry):
        assert (second / relative).stat().st_ino == (entry / relative).stat().st_ino
    assert model_cache.installed_key(second) == entry.name
    assert json.loads((entry / "inputs.json").read_text()) == json.loads(json.dumps(inputs))


def test_changed_inputs_build_a_new_entry_and_the_checkout_follows(tmp_path, root, inputs):
    build = FakeBuild()
    models = tmp_path / "models"
    ensure(models, root, inputs, build)
    changed = model_cache.build_inputs(REPO, ["distil_steps=1"], VERSIONS)

    assert ensure(models, root, changed, build) == "built"

    assert model_cache.installed_key(models) == model_cache.input_key(changed)
    assert (models / "target" / "model.safetensors").read_bytes()[0] == 2


@pytest.mark.parametrize(
    "damage",
    [
        lambda entry: (entry / model_cache.MANIFEST).unlink(),
        lambda entry: (entry / "draft" / "model.safetensors").write_bytes(b"\0" * 4096),
        lambda entry: (entry / "target" / "config.json").unlink(),
    ],
    ids=["no manifest", "a changed weight", "a missing file"],
)
def test_an_entry_that_fails_its_manifest_is_rebuilt_not_used(tmp_path, root, inputs, damage):
    build = FakeBuild()
    ensure(tmp_path / "one", root, inputs, build)
    damage(root / model_cache.input_key(inputs))

    assert ensure(tmp_path / "two", root, inputs, build) == "built"

    assert build.builds == 2
    assert model_cache.entry_problem(root / model_cache.input_key(inputs)) is None


def test_a_failed_build_leaves_no_entry_and_no_temporary_folder(tmp_path, root, inputs):
    with pytest.raises(RuntimeError):
        ensure(tmp_path / "models", root, inputs, FakeBuild(fail=True))

    assert [p.name for p in root.iterdir() if not p.name.endswith(".lock")] == []
    assert not (tmp_path / "models" / "target").exists()


def test_a_checkout_whose_models_were_edited_gets_them_again_without_a_build(tmp_path, root, inputs, monkeypatch):
    # Copies, as across file systems: an edit in the checkout leaves the cache whole.
    monkeypatch.setattr(model_cache.os, "link", _no_hard_links)
    build = FakeBuild()
    models = tmp_path / "models"
    ensure(models, root, inputs, build)
    (models / "draft" / "model.safetensors").write_bytes(b"edited")

    assert ensure(models, root, inputs, build) == "cached"

    assert build.builds == 1
    assert model_cache.verify(models, model_cache.read_manifest(root / model_cache.input_key(inputs))) is None


def _no_hard_links(source, destination):
    raise OSError(18, "Invalid cross-device link")


def test_a_rebuild_when_asked(tmp_path, root, inputs):
    build = FakeBuild()
    ensure(tmp_path / "models", root, inputs, build)

    assert ensure(tmp_path / "models", root, inputs, build, force=True) == "built"
    assert build.builds == 2


def test_a_checkout_keeps_its_models_when_the_cache_is_wiped(tmp_path, root, inputs):
    models = tmp_path / "models"
    ensure(models, root, inputs, FakeBuild())
    manifest = model_cache.read_manifest(root / model_cache.input_key(inputs))

    shutil.rmtree(root)

    assert model_cache.verify(models, manifest) is None


def test_two_checkouts_at_once_build_once(tmp_path, root, inputs):
    started, release = threading.Event(), threading.Event()
    build = FakeBuild()

    def slow_build(folder):
        started.set()
        release.wait(10)
        build(folder)

    outcomes = {}
    first = threading.Thread(target=lambda: outcomes.update(one=ensure(tmp_path / "one", root, inputs, slow_build)))
    first.start()
    started.wait(10)
    second = threading.Thread(target=lambda: outcomes.update(two=ensure(tmp_path / "two", root, inputs, build)))
    second.start()
    release.set()
    first.join(10)
    second.join(10)

    assert outcomes == {"one": "built", "two": "cached"}
    assert build.builds == 1


def test_old_entries_are_pruned_the_one_in_use_kept(tmp_path, root):
    build = FakeBuild()
    keys = []
    for steps in range(model_cache.KEEP_ENTRIES + 3):
        inputs = model_cache.build_inputs(REPO, [f"target_steps={steps}"], VERSIONS)
        ensure(tmp_path / "models", root, inputs, build)
        keys.append(model_cache.input_key(inputs))
        os.utime(root / keys[-1], (steps, steps))

    kept = {p.name for p in root.iterdir() if p.is_dir()}

    assert keys[-1] in kept
    assert len(kept) == model_cache.KEEP_ENTRIES + 1


def test_a_killed_build_leaves_a_temporary_folder_that_a_later_run_removes(tmp_path, root, inputs):
    root.mkdir()
    dead = root / f".tmp-{model_cache.input_key(inputs)}-999999999"
    (dead / "target").mkdir(parents=True)
    mine = root / f".tmp-other-{os.getpid()}"
    mine.mkdir()

    ensure(tmp_path / "models", root, inputs, FakeBuild())

    assert not dead.exists()
    assert mine.exists()


def test_a_link_left_where_a_model_goes_is_replaced_not_followed(tmp_path, root, inputs):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "keep.txt").parent.mkdir()
    (elsewhere / "keep.txt").write_text("not the checkout's")
    models = tmp_path / "models"
    models.mkdir()
    (models / "target").symlink_to(elsewhere)

    ensure(models, root, inputs, FakeBuild())

    assert not (models / "target").is_symlink()
    assert (models / "target" / "config.json").is_file()
    assert (elsewhere / "keep.txt").read_text() == "not the checkout's"
