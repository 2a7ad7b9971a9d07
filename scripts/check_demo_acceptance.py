"""Measure how often vLLM accepts the demo draft model's tokens, by draft position.

Starts one vLLM server (target + draft_model speculation, greedy), sends built-in prompts
one at a time, reads the spec-decode counters from /metrics before and after, prints the
unconditional acceptance pos[i] / drafts for each position, and stops the server.

    python scripts/check_demo_acceptance.py --models .specdash/models

Needs no Django: it runs with either environment's python from the repository root.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from itertools import chain, zip_longest
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from experiments.prompts.catalog import builtin_prompt_sets  # noqa: E402

METRIC_LINE = re.compile(r"^(vllm:spec_decode_[a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+)$")
POSITION_LABEL = re.compile(r'position="(\d+)"')


def main() -> int:
    args = _parse_args()
    prompts = _prompts(args.requests, args.prompt_set)
    server = _start_server(args)
    try:
        _wait_healthy(args.port, server, args.start_timeout)
        before = _spec_counters(args.port)
        _send_prompts(args.port, prompts, args.max_tokens)
        after = _spec_counters(args.port)
    finally:
        _stop(server)
    print(json.dumps(_acceptance(before, after, args.k), indent=2))
    return 0


def _parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, default=REPO / ".specdash" / "models")
    parser.add_argument("--python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--port", type=int, default=18765)
    parser.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--prompt-set", help="one built-in set; by default all of them, interleaved")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--start-timeout", type=float, default=300.0)
    return parser.parse_args()


def _start_server(args: argparse.Namespace) -> subprocess.Popen:
    speculative = {"method": "draft_model", "model": str(args.models / "draft"), "num_speculative_tokens": args.k}
    command = [
        args.python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(args.models / "target"),
        "--dtype", "float32", "--enforce-eager", "--max-model-len", "512",
        "--host", "127.0.0.1", "--port", str(args.port),
        "--speculative-config", json.dumps(speculative),
    ]  # fmt: skip
    env = os.environ | {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
    # Own process group, so stopping it also stops the engine process vLLM forks.
    return subprocess.Popen(command, env=env, start_new_session=True, stdout=sys.stderr, stderr=sys.stderr)


def _wait_healthy(port: int, server: subprocess.Popen, timeout: float) -> None:
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


def _stop(server: subprocess.Popen) -> None:
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
        return json.load(response)["data"][0]["id"]


def _post_json(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.load(response)


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


def _acceptance(before: dict[str, float], after: dict[str, float], k: int) -> dict:
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


if __name__ == "__main__":
    sys.exit(main())
