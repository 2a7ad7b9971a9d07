"""Prove a GPU host's path in about 15 minutes of GPU time: one vLLM server per method on the
demo model pair, what vLLM decided, engine metrics and spec counters, a V2 profile not split and
a V1 profile split, and a memory refusal retried once (workers/bench/gpu_smoke.py says each).

    .venv/bin/python -m scripts.gpu_smoke [--models DIR] [--work-dir DIR]

One line per check (pass, FAIL, skip with the reason); exit status 1 when a check failed. On a
host without a GPU the GPU-only checks are reported as skipped, by name (docs/gpu-hosts.md, step 8).
"""

import argparse
import sys
from pathlib import Path

from workers.bench import gpu_smoke

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--models", type=Path, help="the demo models' folder (default: built into the work folder)")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/specdash-gpu-smoke"), help="logs, traces, models")
    parser.add_argument("--max-tokens", type=int, default=24, help="tokens per request")
    parser.add_argument("--start-timeout", type=float, default=900.0, help="seconds a server may take to start")
    parser.add_argument("--only", nargs="+", default=[], help="only these servers (by the names the lines print)")
    args = parser.parse_args(argv)
    options = gpu_smoke.Options(
        vllm_python=args.vllm_python, work_dir=args.work_dir, models=args.models, max_tokens=args.max_tokens,
        start_timeout_s=args.start_timeout, only=tuple(args.only),
    )  # fmt: skip
    smoke = gpu_smoke.run(options)
    print(gpu_smoke.summary(smoke))
    return 1 if smoke.failed else 0


if __name__ == "__main__":
    sys.exit(main())
