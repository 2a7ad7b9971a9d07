"""Fill a benchmark database with per-request rows, fast, and print what they cost on disk
(workers/bench/storage/request_rows.py): the rows per second of the load and the table's size
with its indexes and TOAST (pg_total_relation_size) per million rows.

    eval "$(./dev env)" && SPECDASH_DB_NAME=... .venv/bin/python -m scripts.bench_request_rows --rows N
"""

import argparse

import django


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--per-run", type=int, default=200)
    args = parser.parse_args(argv)
    django.setup()
    from workers.bench.storage import request_rows

    request_rows.report(request_rows.seed_request_rows(args.rows, args.per_run))


if __name__ == "__main__":
    main()
