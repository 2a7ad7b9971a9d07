"""Server time and query count of the history page over 10,000 experiments, in a database of
its own (workers/bench/pages/history.py, seeded by history_seed.py).

    eval "$(./dev env)" && .venv/bin/python -m scripts.bench_history

--request-rows N adds N per-request rows over the succeeded runs, 200 a run
(workers/bench/storage/request_rows.py): the history never reads them, but they make the database
as large as years of use do. --keep leaves the database for the next run (which then skips
the seeding); without it the database is dropped at the end.
"""

import argparse
import warnings

import django


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the database (and reuse it next time)")
    parser.add_argument("--experiments", type=int, default=10_000)
    parser.add_argument("--request-rows", type=int, default=0, help="per-request rows to add")
    parser.add_argument("--database", default="specdash_bench_history")
    parser.add_argument("--gets", type=int, default=25, help="timed GETs of each URL")
    args = parser.parse_args(argv)
    django.setup()
    warnings.filterwarnings("ignore", message="No directory at")
    from workers.bench.pages import history

    with history.in_database(args.database, keep=args.keep):
        history.run(experiments=args.experiments, request_rows_wanted=args.request_rows, gets=args.gets)


if __name__ == "__main__":
    main()
