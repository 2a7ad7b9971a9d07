"""What PostgreSQL itself takes of binary COPY on this machine: rows and MB a second, per case
(workers/bench/storage/copy_ceiling.py lists them), in a scratch database next to the
project's, dropped at the end.

    eval "$(./dev env)" && .venv/bin/python -m scripts.bench_copy_ceiling [--rows 200000] [--batch 500]
"""

import argparse

import django


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows per case")
    parser.add_argument("--batch", type=int, default=500, help="rows per COPY and commit (one run)")
    args = parser.parse_args(argv)
    django.setup()
    from django.conf import settings

    from workers.bench.storage import copy_ceiling

    database = settings.DATABASES["default"]
    params: copy_ceiling.Params = {
        "host": str(database["HOST"]), "port": str(database["PORT"]), "user": str(database["USER"]),
        "password": str(database["PASSWORD"]),
    }  # fmt: skip
    copy_ceiling.report(params, rows=args.rows, batch=args.batch)


if __name__ == "__main__":
    main()
