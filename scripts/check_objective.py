"""How often the joint word "pays" is wrong and what the guards cost in power: whole experiments
with known effects (the primary's gain, a queue that costs E2E and throughput) pushed through the
code the page and the worker use (experiments/simulation/objective_tables.py).

    .venv/bin/python -m scripts.check_objective [--experiments N] [--seed S]

About 2 minutes at the default size (200 experiments a row) on one core.
"""

import argparse

from experiments.simulation import objective_tables


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiments", type=int, default=200, help="experiments per row")
    parser.add_argument("--seed", type=int, default=20261204)
    args = parser.parse_args(argv)
    for line in objective_tables.table_lines(experiments=args.experiments, seed=args.seed):
        print(line, flush=True)


if __name__ == "__main__":
    main()
