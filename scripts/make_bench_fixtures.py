"""Make the `vllm bench serve` result files that tests/fixtures/vllm_bench/ keeps: the demo
target plain and with n-gram speculation, vLLM's own client against each at concurrency 1 and 2
(workers/bench/live/bench_fixtures.py).

    .venv/bin/python -m scripts.make_bench_fixtures [--out tests/fixtures/vllm_bench]
"""

import argparse
from pathlib import Path

from workers.bench.live import bench_fixtures

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(REPO / ".specdash" / "models" / "target"))
    parser.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "vllm_bench")
    args = parser.parse_args(argv)
    bench_fixtures.make(model=args.model, vllm_python=args.vllm_python, out=args.out)


if __name__ == "__main__":
    main()
