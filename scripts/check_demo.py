"""Run the demo N times on a fresh `./dev up` and print its settle rate, wall time and server
starts per run (workers/bench/live/fresh_demo.py; the report is `./dev manage check_demo`'s).

    .venv/bin/python -m scripts.check_demo --runs 5 [--cache DIR] [--share-venvs] [--keep]

The clone lives in --folder on free ports; `./dev down` and its removal follow, unless --keep.
An empty --cache measures a machine whose demo-model cache is empty (by default the machine's
cache is used); --share-venvs links this checkout's virtual environments instead of installing
new ones (several GB and minutes each).
"""

import argparse
import sys
import tempfile
from pathlib import Path

from workers.bench.live import fresh_demo

REPO = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="demos to run, one after the other")
    parser.add_argument("--folder", type=Path, help="where the clone goes (default: a new temporary folder)")
    parser.add_argument("--cache", type=Path, help="the demo-model cache the clone uses (SPECDASH_MODEL_CACHE)")
    parser.add_argument("--share-venvs", action="store_true", help="link this checkout's .venv and .venv-vllm")
    parser.add_argument("--keep", action="store_true", help="leave the clone in place afterwards")
    args = parser.parse_args(argv)
    folder = args.folder or Path(tempfile.mkdtemp(prefix="specdash-check-demo-"))
    options = fresh_demo.Options(REPO, folder, args.runs, args.cache, args.share_venvs, args.keep)
    return fresh_demo.run(options)


if __name__ == "__main__":
    sys.exit(main())
