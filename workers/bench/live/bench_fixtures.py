"""The `vllm bench serve` result files that tests/fixtures/vllm_bench/ keeps.

The demo target started on vLLM twice, plain and with n-gram speculation, and vLLM's own
benchmark client (vllm.benchmarks.serve, as `vllm bench serve` would) run against each at
concurrency 1 and 2 with --save-result; the runs at concurrency 1 also --save-detailed. The
speculative runs carry their --speculative-config as metadata, so the import matches them to
an arm by it.
"""

import json
import subprocess
from pathlib import Path

from workers.bench.live.vllm_bench import SERVED_NAME, VLLM_BENCH_RUNNER, load_prompts, write_sharegpt
from workers.server.command import ServerLaunch, build_server_args, free_port
from workers.server.vllm_server import VllmServer

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
ARMS: tuple[tuple[str, dict[str, object] | None], ...] = (("baseline", None), ("ngram k=3", NGRAM))
LEVELS = (1, 2)
PROMPTS = 8
MAX_TOKENS = 24
DATASET = Path("/tmp/specdash-bench-fixture-prompts.json")


def bench_command(*, vllm_python: str, model: str, out: Path, base_url: str, label: str,
                  config: dict[str, object] | None, level: int) -> list[str]:  # fmt: skip
    command = [
        vllm_python, "-c", VLLM_BENCH_RUNNER, "/dev/null",
        "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
        "--model", model, "--served-model-name", SERVED_NAME, "--tokenizer", model,
        "--dataset-name", "sharegpt", "--dataset-path", str(DATASET), "--disable-shuffle",
        "--num-prompts", str(PROMPTS), "--sharegpt-output-len", str(MAX_TOKENS), "--max-concurrency", str(level),
        "--temperature", "0", "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--disable-tqdm", "--save-result", "--label", label,
        "--result-dir", str(out), "--result-filename", f"{label.replace(' ', '-').replace('=', '')}-c{level}.json",
    ]  # fmt: skip
    if config:
        command += ["--metadata", f"speculative_config={json.dumps(config)}"]
    return [*command, "--save-detailed"] if level == 1 else command


def make(*, model: str, vllm_python: str, out: Path) -> None:
    """Every arm's server, and vLLM's client against it at every level, writing into `out`."""
    out.mkdir(parents=True, exist_ok=True)
    write_sharegpt(DATASET, load_prompts("code_edit", PROMPTS))
    for label, config in ARMS:
        server_args = build_server_args(
            python=vllm_python, model=model, port=free_port(range(18780, 18790)), dtype="float32",
            max_model_len=512, seed=0, speculative_config=config, served_model_name=SERVED_NAME,
        )  # fmt: skip
        log = Path("/tmp") / f"bench-fixture-{label}.log"
        with VllmServer(ServerLaunch(server_args, log_path=log, env={"VLLM_CPU_KVCACHE_SPACE": "1"})) as server:
            for level in LEVELS:
                command = bench_command(
                    vllm_python=vllm_python, model=model, out=out, base_url=server.base_url, label=label,
                    config=config, level=level,
                )  # fmt: skip
                subprocess.run(command, check=True)
