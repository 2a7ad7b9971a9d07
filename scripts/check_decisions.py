"""How often the question's decisions are wrong, and what they cost: whole experiments with
known effects, simulated request by request and pushed through the code the page and the
worker use (experiments/simulation/: the simulator, the decisions, the tables).

    .venv/bin/python -m scripts.check_decisions [--quick] [--experiments N] [--seed S] [--only TABLE]

About 10 minutes at the default size on one core, 2 with --quick.
"""

import argparse

from experiments.simulation import decision_tables


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer experiments per row (a rough look)")
    parser.add_argument("--experiments", type=int, help="experiments per row (default 400, 100 with --quick)")
    parser.add_argument("--seed", type=int, default=20261202)
    parser.add_argument("--only", choices=decision_tables.TABLES, action="append")
    args = parser.parse_args(argv)
    experiments = args.experiments or (100 if args.quick else 400)
    decision_tables.print_tables(experiments=experiments, seed=args.seed, only=args.only or decision_tables.TABLES)


if __name__ == "__main__":
    main()
