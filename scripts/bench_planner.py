"""What the break-even search saves: device-minutes, break-evens found and family-wise false
calls of the adaptive plan against a fixed grid of the same resolution, on simulated
experiments with known break-even points (experiments/simulation/search.py says the rules).

Device-minutes: every server session costs a start (--start-minutes) and each run on it
(--run-minutes); the defaults are the GPU-like model of the issue (3 and 1).

    .venv/bin/python -m scripts.bench_planner [--experiments N] [--seed S] [--start-minutes M] [--run-minutes M]

About 10 minutes at the default size on one core.
"""

import argparse

from experiments.simulation import search_tables
from experiments.simulation.simulator import DISTURBANCES


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", type=int, default=100, help="simulated experiments per row")
    parser.add_argument("--seed", type=int, default=20261203)
    parser.add_argument("--start-minutes", type=float, default=3.0, help="device-minutes of one server start")
    parser.add_argument("--run-minutes", type=float, default=1.0, help="device-minutes of one run")
    parser.add_argument("--disturbance", default="normal", choices=DISTURBANCES, help="the simulated host's")
    parser.add_argument("--max-blocks", type=int, default=10, help="the design's most blocks (the form's default 10)")
    args = parser.parse_args(argv)
    search_tables.print_tables(
        experiments=args.experiments, seed=args.seed, costs=(args.start_minutes, args.run_minutes),
        disturbance=args.disturbance, max_blocks=args.max_blocks,
    )  # fmt: skip


if __name__ == "__main__":
    main()
