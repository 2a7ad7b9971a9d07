"""Does the client see vLLM's stream as the engine makes it? Runs the demo pair on the real
CPU server the way an experiment does and prints the figures of docs/metrics.md ("Stream
fidelity"; workers/bench/live/stream_check.py says what is printed).

    .venv/bin/python -m scripts.check_stream_fidelity [--placement split unbound ...]

Targets on the 2-core machine with nothing else running (issue "Timing that measures the
arms"): under 2 % of requests stalled, the median span ratio within 10 % of 1, the A/A
replicate's client TPOT interval within ±10 % of 1 at concurrency 1.
"""

import argparse
from pathlib import Path

from workers.bench.live import stream_check
from workers.server import affinity

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=str(REPO / ".specdash" / "models"), help="the demo models' folder")
    parser.add_argument(
        "--placement", nargs="+", default=[affinity.DEFAULT_PLACEMENT], choices=sorted(affinity.PLACEMENTS)
    )
    parser.add_argument("--draft", action="store_true", help="also run the draft model arm (k=4)")
    parser.add_argument(
        "--serve", default="target", choices=("target", "draft"),
        help="the model the baseline serves: 'draft' serves the 1-layer draft alone, the fastest engine",
    )  # fmt: skip
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--levels", default="1,4")
    parser.add_argument("--num-prompts", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--prompt-set", default="code_edit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--work-dir", default="/tmp/specdash-stream-check")
    parser.add_argument("--json", help="also write every request's check to this file")
    args = parser.parse_args(argv)
    options = stream_check.Options(
        models=args.models, vllm_python=args.vllm_python, placements=tuple(args.placement), draft=args.draft,
        serve=args.serve, blocks=args.blocks, levels=tuple(int(level) for level in args.levels.split(",")),
        num_prompts=args.num_prompts, warmup=args.warmup, max_tokens=args.max_tokens, prompt_set=args.prompt_set,
        seed=args.seed, work_dir=args.work_dir, json=args.json,
    )  # fmt: skip
    stream_check.check(options)


if __name__ == "__main__":
    main()
