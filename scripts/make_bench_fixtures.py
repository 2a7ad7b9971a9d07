"""Make the `vllm bench serve` result files that tests/fixtures/vllm_bench/ keeps.

Starts the demo target on vLLM twice, plain and with n-gram speculation, and runs vLLM's own
benchmark client (vllm.benchmarks.serve, as `vllm bench serve` would) against each at
concurrency 1 and 2 with --save-result; the runs at concurrency 1 also --save-detailed. The
speculative runs carry their --speculative-config as metadata, so the import matches them to
an arm by it.

    .venv/bin/python scripts/make_bench_fixtures.py [--out tests/fixtures/vllm_bench]
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from scripts.bench_loadgen import SERVED_NAME, VLLM_BENCH_RUNNER, load_prompts  # noqa: E402
from workers.server.command import ServerLaunch, build_server_args, free_port  # noqa: E402
from workers.server.vllm_server import VllmServer  # noqa: E402

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 3}
ARMS = (("baseline", None), ("ngram k=3", NGRAM))
LEVELS = (1, 2)
PROMPTS = 8
MAX_TOKENS = 24


def bench_command(args, base_url: str, dataset: Path, label: str, config: dict | None, level: int) -> list[str]:
    work = Path(args.out)
    command = [
        args.vllm_python, "-c", VLLM_BENCH_RUNNER, "/dev/null",
        "--backend", "openai", "--base-url", base_url, "--endpoint", "/v1/completions",
        "--model", args.model, "--served-model-name", SERVED_NAME, "--tokenizer", args.model,
        "--dataset-name", "sharegpt", "--dataset-path", str(dataset), "--disable-shuffle",
        "--num-prompts", str(PROMPTS), "--sharegpt-output-len", str(MAX_TOKENS), "--max-concurrency", str(level),
        "--temperature", "0", "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--disable-tqdm", "--save-result", "--label", label,
        "--result-dir", str(work), "--result-filename", f"{label.replace(' ', '-').replace('=', '')}-c{level}.json",
    ]  # fmt: skip
    if config:
        command += ["--metadata", f"speculative_config={json.dumps(config)}"]
    return [*command, "--save-detailed"] if level == 1 else command


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(REPO / ".specdash" / "models" / "target"))
    parser.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--out", default=str(REPO / "tests" / "fixtures" / "vllm_bench"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dataset = Path("/tmp/specdash-bench-fixture-prompts.json")
    prompts = load_prompts("code_edit", PROMPTS)
    dataset.write_text(
        json.dumps([{"conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": ""}]} for p in prompts])
    )
    for label, config in ARMS:
        server_args = build_server_args(
            python=args.vllm_python, model=args.model, port=free_port(range(18780, 18790)), dtype="float32",
            max_model_len=512, seed=0, speculative_config=config, served_model_name=SERVED_NAME,
        )  # fmt: skip
        log = Path("/tmp") / f"bench-fixture-{label}.log"
        with VllmServer(ServerLaunch(server_args, log_path=log, env={"VLLM_CPU_KVCACHE_SPACE": "1"})) as server:
            for level in LEVELS:
                subprocess.run(bench_command(args, server.base_url, dataset, label, config, level), check=True)


if __name__ == "__main__":
    main()
