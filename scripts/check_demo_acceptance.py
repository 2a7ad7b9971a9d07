"""Measure how often vLLM accepts the demo draft model's tokens, by draft position: one server,
built-in prompts one at a time, /metrics before and after (workers/bench/live/demo_acceptance.py).

    .venv/bin/python -m scripts.check_demo_acceptance --models .specdash/models

Needs no Django: it runs with either environment's python from the repository root.
"""

import argparse
import json
from pathlib import Path

from workers.bench.live import demo_acceptance

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=str(REPO / ".specdash" / "models"))
    parser.add_argument("--python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--port", type=int, default=18765)
    parser.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--prompt-set", help="one built-in set; by default all of them, interleaved")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--start-timeout", type=float, default=300.0)
    options = demo_acceptance.Options(**vars(parser.parse_args(argv)))
    print(json.dumps(demo_acceptance.acceptance(options), indent=2))


if __name__ == "__main__":
    main()
