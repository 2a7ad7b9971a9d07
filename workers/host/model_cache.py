"""The demo models, built once per machine: a cache outside the checkout, keyed by the build's inputs.

Run with the vLLM environment's python from the repository root (no Django here):

    .venv-vllm/bin/python -m workers.host.model_cache --models-dir .specdash/models [--force]

The key is a digest of everything the build reads: the builder's source
(workers/host/demo_models.py), the prompt catalogue and the prompt sets it trains on, any
recipe changes given with --set, and the versions of torch, transformers, tokenizers and
safetensors. Edit any of them and the key changes, so the models are rebuilt. The cache is
$SPECDASH_MODEL_CACHE, else $XDG_CACHE_HOME/specdash/demo-models, else
~/.cache/specdash/demo-models, as model hubs keep their weights; every checkout on the
machine, `./dev test` and CI share it.

An entry <cache>/<key>/ holds target/, draft/, demo_build.json, inputs.json and
manifest.json (every file's size and sha256). It is built in a temporary folder beside it,
every file and folder fsynced, then renamed into place: a folder named after a key is
complete, and one that fails its manifest (a disk that filled, a hand edit) is rebuilt, never
used. A lock per key makes a second checkout wait for the first one's build instead of
repeating it.

A checkout gets the models as hard links in its own models folder (copies across file
systems): the path rule (experiments/rules/model_paths.py) resolves symbolic links and wants
a model inside SPECDASH_MODELS_DIR, which a link per model into the cache would leave. Hard
links also keep a checkout's models whole when the cache is pruned or wiped. The folder's
demo_models.json names the key it holds; its files are checked against the manifest too.
"""

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILDER = Path("workers/host/demo_models.py")
CORPUS = (Path("experiments/prompts/catalog.py"), Path("experiments/prompts/data"))
LIBRARIES = ("torch", "transformers", "tokenizers", "safetensors")
MODEL_NAMES = ("target", "draft")
MANIFEST = "manifest.json"
INSTALLED = "demo_models.json"
# Entries kept besides the one in use, the most recently used first: a checkout on an older
# commit finds its models again, and the cache stays a few tens of megabytes.
KEEP_ENTRIES = 4
# The layout of an entry: change it when the files an entry holds change.
FORMAT = 1


def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    if environ.get("SPECDASH_MODEL_CACHE"):
        return Path(environ["SPECDASH_MODEL_CACHE"])
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specdash" / "demo-models"


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _corpus_files(repo: Path) -> list[Path]:
    files = []
    for part in CORPUS:
        files += sorted((repo / part).glob("*.json")) if (repo / part).is_dir() else [repo / part]
    return files


def library_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def build_inputs(repo: Path, changes: list[str], versions: Mapping[str, str | None]) -> dict:
    """What the build reads, by content: the key is its digest."""
    files = [repo / BUILDER, *_corpus_files(repo)]
    return {
        "format": FORMAT,
        "files": {str(path.relative_to(repo)): _file_digest(path) for path in files},
        "recipe_changes": sorted(changes),
        "versions": dict(versions),
    }


def input_key(inputs: Mapping) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:24]


def manifest_of(entry: Path) -> dict[str, dict]:
    """Every file of the entry's models and build report, by path relative to the entry."""
    files = [entry / "demo_build.json", *sorted(p for name in MODEL_NAMES for p in (entry / name).rglob("*"))]
    return {
        str(path.relative_to(entry)): {"bytes": path.stat().st_size, "sha256": _file_digest(path)}
        for path in files
        if path.is_file()
    }


def verify(folder: Path, manifest: Mapping[str, Mapping]) -> str | None:
    """Why `folder` does not hold the manifest's files, or None when every one matches."""
    if not manifest or not all(f"{name}/config.json" in manifest for name in MODEL_NAMES):
        return "the manifest lists no models"
    for relative, expected in manifest.items():
        path = folder / relative
        if not path.is_file():
            return f"{relative} is missing"
        if path.stat().st_size != expected["bytes"] or _file_digest(path) != expected["sha256"]:
            return f"{relative} differs from the manifest"
    return None


def read_manifest(entry: Path) -> dict[str, dict]:
    try:
        return json.loads((entry / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def entry_problem(entry: Path) -> str | None:
    if not entry.is_dir():
        return "not built"
    return verify(entry, read_manifest(entry))


def _fsync_tree(folder: Path) -> None:
    """Files first, then the folders that name them, deepest first."""
    for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        _fsync(path)
    _fsync(folder)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _locked(root: Path, key: str) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with (root / f".{key}.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _log(f"another build of {key} is under way; waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def publish(root: Path, key: str, inputs: Mapping, build_into) -> Path:
    """Build into a temporary folder beside the entry, seal it with its manifest, rename it in."""
    entry = root / key
    staging = root / f".tmp-{key}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        build_into(staging)
        (staging / "inputs.json").write_text(json.dumps(inputs, indent=2, sort_keys=True) + "\n")
        manifest = {"key": key, "files": manifest_of(staging)}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        _fsync_tree(staging)
        if entry.exists():
            # Failed its manifest: moved aside first, since a rename cannot replace a folder.
            stale = root / f".stale-{key}-{os.getpid()}"
            entry.rename(stale)
            shutil.rmtree(stale)
        staging.rename(entry)
        _fsync(root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return entry


def install(entry: Path, models_dir: Path) -> None:
    """The entry's models into the checkout's folder, as hard links (copies across file systems)."""
    models_dir.mkdir(parents=True, exist_ok=True)
    staging = models_dir / ".demo_models.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for relative in read_manifest(entry):
        _link_or_copy(entry / relative, staging / relative)
    for name in MODEL_NAMES:
        _remove(models_dir / name)
        (staging / name).rename(models_dir / name)
    (staging / "demo_build.json").replace(models_dir / "demo_build.json")
    staging.rmdir()
    record = {"key": entry.name, "cache": str(entry), "installed_at": time.time()}
    (models_dir / INSTALLED).write_text(json.dumps(record, indent=2) + "\n")
    # The marker of the builds before the cache: nothing reads it any more.
    (models_dir / "demo_models.version").unlink(missing_ok=True)


def _remove(path: Path) -> None:
    """A model folder a build made, or a link or file someone put in its place."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    else:
        shutil.rmtree(path, ignore_errors=True)


def _link_or_copy(source: Path, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, destination)
    except OSError:
        shutil.copy2(source, destination)


def installed_key(models_dir: Path) -> str | None:
    try:
        return json.loads((models_dir / INSTALLED).read_text())["key"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def prune(root: Path, keep: str) -> None:
    """Drop all but the KEEP_ENTRIES most recently used entries besides `keep`, and the
    temporary folders of builds whose process is gone (killed before its clean-up ran)."""
    for leftover in [*root.glob(".tmp-*"), *root.glob(".stale-*")]:
        if not _alive(int(leftover.name.rsplit("-", 1)[1])):
            shutil.rmtree(leftover, ignore_errors=True)
    entries = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name != keep]
    entries.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in entries[KEEP_ENTRIES:]:
        shutil.rmtree(old, ignore_errors=True)
        (root / f".{old.name}.lock").unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ensure(models_dir: Path, *, root: Path, inputs: Mapping, build_into, force: bool = False) -> str:
    """Make `models_dir` hold the models of `inputs`, from the cache or built into it; says which."""
    key = input_key(inputs)
    entry = root / key
    with _locked(root, key):
        problem = "a rebuild was asked for" if force else entry_problem(entry)
        if problem:
            _log(f"building the demo models into {entry} ({problem})")
            publish(root, key, inputs, build_into)
            outcome = "built"
        else:
            outcome = "cached"
        os.utime(entry)
        manifest = read_manifest(entry)
        if installed_key(models_dir) != key or verify(models_dir, manifest):
            install(entry, models_dir)
        elif outcome == "cached":
            outcome = "current"
    prune(root, keep=key)
    return outcome


def _log(message: str) -> None:
    print(f"[model_cache] {message}", file=sys.stderr, flush=True)


def _build_into(changes: list[str]):
    def build_into(folder: Path) -> None:
        # Imported only for a build: torch takes seconds to load, and a cache hit needs none of it.
        from workers.host import demo_models

        demo_models.build(folder, demo_models.RECIPE.replaced(changes))

    return build_into


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models-dir", type=Path, required=True, help="the checkout's SPECDASH_MODELS_DIR")
    parser.add_argument("--cache", type=Path, help="the cache folder (default: see above)")
    parser.add_argument("--force", action="store_true", help="rebuild the cache entry even if it verifies")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="change a recipe field")
    args = parser.parse_args(argv)
    # Stopped (`./dev up` failing meanwhile): unwind, so that the temporary folder is removed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    started = time.monotonic()
    root = args.cache or cache_root()
    inputs = build_inputs(REPO, args.set, library_versions())
    outcome = ensure(args.models_dir, root=root, inputs=inputs, build_into=_build_into(args.set), force=args.force)
    key = input_key(inputs)
    print(f"demo models {outcome} ({key}, {time.monotonic() - started:.1f} s): {args.models_dir} from {root / key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
