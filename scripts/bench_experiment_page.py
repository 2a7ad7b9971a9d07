"""Server time of the experiment page at a realistic size, in the dev database: one finished
experiment seeded, analysed and its page timed (workers/bench/pages/experiment_page.py), then
deleted.

Run against the database `./dev services` starts, or any other through SPECDASH_DB_NAME
(such as the one `python -m scripts.bench_history --keep --request-rows 20000000` leaves):

    eval "$(./dev env)" && .venv/bin/python -m scripts.bench_experiment_page
"""

import argparse
import warnings

import django


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--requests", type=int, default=500, help="requests per run")
    parser.add_argument("--gets", type=int, default=10, help="timed GETs of the page")
    args = parser.parse_args(argv)
    django.setup()
    # WhiteNoise warns that collectstatic has not run; the timed page does not depend on it.
    warnings.filterwarnings("ignore", message="No directory at")
    from workers.bench.pages import experiment_page

    experiment_page.report(repetitions=args.repetitions, requests=args.requests, gets=args.gets)


if __name__ == "__main__":
    main()
