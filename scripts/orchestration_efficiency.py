"""Where an experiment's wall time went: under measured load, starting vLLM, warming up,
and what specdash adds around them, from what the experiment recorded
(workers/bench/efficiency.py; its DEFINITIONS are printed first).

    eval "$(./dev env)" && .venv/bin/python -m scripts.orchestration_efficiency [EXPERIMENT_ID]

Without an id: the latest finished experiment. --log-dir: where the worker wrote the
session's vLLM logs (default: DATA_DIR/server-logs, the worker's own).
"""

import argparse
from pathlib import Path

import django


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", type=int, nargs="?", help="default: the latest finished experiment")
    parser.add_argument("--log-dir", type=Path, help="default: DATA_DIR/server-logs")
    args = parser.parse_args(argv)
    django.setup()
    from django.conf import settings

    from workers.bench import efficiency

    log_dir = args.log_dir or settings.DATA_DIR / "server-logs"
    print("\n".join(efficiency.report_experiment(args.experiment, log_dir)))


if __name__ == "__main__":
    main()
