"""Check specdash's load generator against vLLM's own (`vllm bench serve`): one vLLM server,
both clients in alternating order, their figures side by side with vLLM's own histograms
(workers/bench/live/loadgen_compare.py says what is compared).

    .venv/bin/python -m scripts.bench_loadgen --model PATH [--ngram | --draft PATH]

Run it with the web/worker interpreter (.venv); the server and vLLM's client run under
--vllm-python. Ports come from 18770-18779 unless --ports says otherwise.
"""

import argparse
from pathlib import Path

from workers.bench.live import loadgen_compare
from workers.server import affinity

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="target model directory")
    arm = parser.add_mutually_exclusive_group()
    arm.add_argument("--draft", help="draft model directory (method draft_model)")
    arm.add_argument("--ngram", action="store_true", help="n-gram lookup speculation")
    parser.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    parser.add_argument("--prompt-set", default="chat", help="a built-in prompt set (experiments/prompts/data)")
    parser.add_argument("--num-prompts", type=int, default=48)
    parser.add_argument("--warmup", type=int, default=0, help="warm-up requests of each client, each round")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=6, help="ours/theirs pairs, order alternating")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--max-model-len", type=int, default=512)
    parser.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--ports", default="18770-18779")
    parser.add_argument("--work-dir", default="/tmp/specdash-bench")
    parser.add_argument(
        "--placement", default=affinity.DEFAULT_PLACEMENT, choices=sorted(affinity.PLACEMENTS),
        help="where the API server and engine core run (workers/server/affinity.py; the runner's by default)",
    )  # fmt: skip
    parser.add_argument("--wait-for-model", type=float, default=0.0, help="seconds to wait for MODEL/config.json")
    loadgen_compare.compare(loadgen_compare.Options(**vars(parser.parse_args(argv))))


if __name__ == "__main__":
    main()
