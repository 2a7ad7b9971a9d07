"""Rows per second of storing a finished run's requests, as a worker stores them
(workers/bench/storage/ingest.py says what is timed).

    eval "$(./dev env)" && .venv/bin/python -m scripts.bench_ingest [--runs 40] [--requests 500]
"""

import argparse

import django


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="runs to store (half baseline, half speculative)")
    parser.add_argument("--requests", type=int, default=500, help="requests per run")
    args = parser.parse_args(argv)
    django.setup()
    from workers.bench.storage import ingest

    ingest.report(runs=args.runs, requests=args.requests)


if __name__ == "__main__":
    main()
