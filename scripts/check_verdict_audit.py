"""The verdict audit of issue 36: today's method (each cell's t on its own blocks) beside the block
model, per scenario (shared heavy starts, shocks and drift, baseline outliers, missing runs and
failed starts, heteroscedastic arms, a noisy host, a crossing), through the code the page and
the worker use (experiments/simulation/verdict_audit.py). The figures of docs/verdicts.md, "The audit".

    .venv/bin/python -m scripts.check_verdict_audit [--experiments N] [--seed S] [--only SCENARIO] [--max N]

At the default size (400 experiments a row) `--max 4 --max 10` took 744 s on the 2-core host
(2026-12-04, beside the test suite); --experiments 60 for a rough look (90 s).
"""

import argparse

from experiments.simulation import verdict_audit


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = [scenario.name for scenario in verdict_audit.SCENARIOS]
    parser.add_argument("--experiments", type=int, default=400, help="experiments per row (a third at 20 and 50 %%)")
    parser.add_argument("--seed", type=int, default=20261204)
    parser.add_argument("--only", choices=names, action="append", help="a scenario (repeatable; default: all)")
    parser.add_argument(
        "--max", type=int, choices=verdict_audit.MAX_BLOCKS, action="append", help="a maximum of blocks"
    )
    args = parser.parse_args(argv)
    scenarios = [s for s in verdict_audit.SCENARIOS if not args.only or s.name in args.only]
    verdict_audit.audit(
        scenarios, experiments=args.experiments, seed=args.seed, max_blocks=args.max or verdict_audit.MAX_BLOCKS
    )


if __name__ == "__main__":
    main()
