"""How often the page's verdicts are wrong: experiments with known effects, simulated and
pushed through the same inference code the page uses (experiments/simulation/cell_verdicts.py).

Prints tables of the share of experiments called faster / slower / equivalent /
inconclusive, and as its last line the false-call rate under no effect at the default
design (3 blocks, 2 % margin), pooled over every spread setting and both metrics.

    .venv/bin/python -m scripts.check_verdicts [--simulations N] [--seed S]

Runs in about five minutes on one core at the default size.
"""

import argparse

from experiments.simulation import cell_verdict_tables


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--simulations", type=int, default=2000, help="experiments per row of the no-effect table")
    parser.add_argument("--seed", type=int, default=20261130)
    args = parser.parse_args(argv)
    cell_verdict_tables.print_tables(simulations=args.simulations, seed=args.seed)


if __name__ == "__main__":
    main()
