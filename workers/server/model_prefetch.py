"""Download the Hugging Face models an experiment's servers need while its first server
starts, so that no later server start waits for a download.

Only model ids are fetched (an installation that allows them sets
SPECDASH_ALLOW_ANY_MODEL_PATH); an absolute path is the host's own folder. The download is a
child process in the vLLM environment (its huggingface_hub, the cache vLLM reads: HF_HOME),
fetching the files vLLM loads: configuration, tokenizer and safetensors weights.

It never overlaps a measurement: the runner waits for it after the first server is healthy
and before that server's first run (`wait`), up to the time a server may take to start. A
download that fails or takes longer is logged and stopped, and left to vLLM, which then
downloads (or fails) when it starts that model's server, as without the prefetch.

Plain module: no Django, no vLLM import.
"""

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

# What vLLM loads from a model repository: weights in safetensors, the configuration, the
# tokenizer. A repository with only other weight formats gets its weights at vLLM's start.
FETCH_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.tiktoken", "*.txt", "*.jinja"]
SKIP_PATTERNS = ["original/*"]

# Run by the vLLM environment's Python; the model ids and patterns come as arguments.
FETCH_CODE = """
import json, sys
from huggingface_hub import snapshot_download
allow, skip = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for model_id in sys.argv[3:]:
    print("fetching", model_id, flush=True)
    print("fetched", snapshot_download(model_id, allow_patterns=allow, ignore_patterns=skip), flush=True)
"""

POLL_S = 1.0


def model_ids(models: Iterable[str]) -> list[str]:
    """The models to fetch: ids, not paths, each once, in the order given."""
    return list(dict.fromkeys(model for model in models if model and not model.startswith("/")))


def offline() -> bool:
    """Whether the host forbids downloads (huggingface_hub's own switch)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def fetch_command(python: str, ids: list[str]) -> list[str]:
    return [python, "-c", FETCH_CODE, json.dumps(FETCH_PATTERNS), json.dumps(SKIP_PATTERNS), *ids]


class ModelPrefetch:
    """One child process fetching `models`' ids into the Hugging Face cache; a no-op
    when there is nothing to fetch. Use as a context manager: the child never outlives it."""

    def __init__(self, models: Iterable[str], *, python: str, log_path: Path):
        self.ids = [] if offline() else model_ids(models)
        self.python = python
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self.outcome = "nothing to fetch" if not self.ids else "not started"

    def __enter__(self) -> "ModelPrefetch":
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        if not self.ids or self._proc is not None:
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                fetch_command(self.python, self.ids),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.outcome = "fetching"
        logger.info("fetching %s into the Hugging Face cache (log: %s)", ", ".join(self.ids), self.log_path)

    def wait(self, timeout_s: float, should_stop: Callable[[], None] = lambda: None) -> str:
        """Block until the fetch ends, at most `timeout_s`; then stop it. `should_stop` is
        called every second and may raise (a cancelled experiment). Returns the outcome:
        "nothing to fetch", "fetched", "failed (exit N)" or "stopped after N s"."""
        if self._proc is None:
            return self.outcome
        deadline = time.monotonic() + timeout_s
        while self._proc.poll() is None and time.monotonic() < deadline:
            should_stop()
            time.sleep(POLL_S)
        code = self._proc.poll()
        if code is None:
            self.stop()
            self.outcome = f"stopped after {timeout_s:.0f} s"
        else:
            self._proc = None
            self.outcome = "fetched" if code == 0 else f"failed (exit {code})"
        if self.outcome != "fetched":
            logger.warning("model prefetch %s; vLLM will fetch at its start (log: %s)", self.outcome, self.log_path)
        return self.outcome

    def stop(self) -> None:
        """Kill the child's process group (huggingface_hub's download threads with it). Idempotent."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
