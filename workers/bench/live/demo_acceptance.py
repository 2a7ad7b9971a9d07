"""How often vLLM accepts the demo draft model's tokens, by draft position.

One vLLM server (target + draft_model speculation, greedy), built-in prompts sent one at a
time, the spec-decode counters read from /metrics before and after: the unconditional
acceptance pos[i] / drafts for each position. Needs no Django.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from itertools import chain, zip_longest
from pathlib import Path

from experiments.prompts.catalog import builtin_prompt_sets

METRIC_LINE = re.compile(r"^(vllm:spec_decode_[a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+)$")
POSITION_LABEL = re.compile(r'position="(\d+)"')


@dataclass(frozen=True)
class Options:
    """What scripts/check_demo_acceptance.py asks for (its --help says each)."""

    models: str
    python: str
    port: int = 18765
    k: int = 4
    requests: int = 30
    prompt_set: str | None = None
    max_tokens: int = 64
    start_timeout: float = 300.0


def acceptance(options: Options) -> dict[str, object]:
    """Start the server, send the prompts, stop it: the acceptance figures."""
    prompts = _prompts(options.requests, options.prompt_set)
    server = _start_server(options)
    try:
        _wait_healthy(options.port, server, options.start_timeout)
        before = _spec_counters(options.port)
        _send_prompts(options.port, prompts, options.max_tokens)
        after = _spec_counters(options.port)
    finally:
        _stop(server)
    return _acceptance(before, after, options.k)


def _start_server(options: Options) -> subprocess.Popen[bytes]:
    models = Path(options.models)
    speculative = {"method": "draft_model", "model": str(models / "draft"), "num_speculative_tokens": options.k}
    command = [
        options.python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(models / "target"),
        "--dtype", "float32", "--enforce-eager", "--max-model-len", "512",
        "--host", "127.0.0.1", "--port", str(options.port),
        "--speculative-config", json.dumps(speculative),
    ]  # fmt: skip
    env = os.environ | {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
    # Own process group, so stopping it also stops the engine process vLLM forks.
    return subprocess.Popen(command, env=env, start_new_session=True, stdout=sys.stderr, stderr=sys.stderr)


def _wait_healthy(port: int, server: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"vLLM exited with code {server.returncode} before it was ready.")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(2)
    raise SystemExit(f"vLLM was not ready after {timeout:.0f} s.")


def _stop(server: subprocess.Popen[bytes]) -> None:
    if server.poll() is not None:
        return
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def _prompts(count: int, only: str | None) -> list[str]:
    """The sets interleaved, so a short check still covers each of them."""
    chosen = {name: s for name, s in builtin_prompt_sets().items() if only in (None, name)}
    if not chosen:
        raise SystemExit(f"Unknown prompt set {only!r}.")
    sets = [prompt_set.prompts for prompt_set in chosen.values()]
    interleaved = [p for p in chain.from_iterable(zip_longest(*sets)) if p is not None]
    return interleaved[:count]


def _send_prompts(port: int, prompts: list[str], max_tokens: int) -> None:
    model = _served_model(port)
    for prompt in prompts:
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
        _post_json(f"http://127.0.0.1:{port}/v1/completions", body)


def _served_model(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as response:
        return str(json.load(response)["data"][0]["id"])


def _post_json(url: str, body: dict[str, object]) -> None:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        json.load(response)


def _spec_counters(port: int) -> dict[str, float]:
    """Spec-decode counters summed over label sets; per-position ones keyed name[i]."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    counters: dict[str, float] = {}
    for line in text.splitlines():
        match = METRIC_LINE.match(line)
        if not match:
            continue
        name, labels, value = match.groups()
        position = POSITION_LABEL.search(labels or "")
        key = f"{name}[{position.group(1)}]" if position else name
        counters[key] = counters.get(key, 0.0) + float(value)
    return counters


def _acceptance(before: dict[str, float], after: dict[str, float], k: int) -> dict[str, object]:
    def delta(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    drafts = delta("vllm:spec_decode_num_drafts_total")
    accepted = delta("vllm:spec_decode_num_accepted_tokens_total")
    per_position = [delta(f"vllm:spec_decode_num_accepted_tokens_per_pos_total[{i}]") for i in range(k)]
    if not drafts:
        raise SystemExit("vLLM reported no drafts: is speculation on?")
    return {
        "drafts": drafts,
        "draft_tokens": delta("vllm:spec_decode_num_draft_tokens_total"),
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / (drafts * k),
        "mean_acceptance_length": 1 + accepted / drafts,
        "accepted_per_position": per_position,
        "unconditional_acceptance_by_position": [round(n / drafts, 4) for n in per_position],
    }
