"""Play faults against a real specdash and print what happened.

    .venv/bin/python scripts/fault_injection.py [--only NAME ...] [--markdown FILE] [--logs DIR]

Starts a stack of its own in a temporary folder, so that nothing shared is restarted, from
the checkout's last commit (`git archive HEAD`: what is played is what was committed, the
harness included): a PostgreSQL cluster and a Redis server on free ports, the experiment
worker (queue cpu), the control worker (reaper, dispatcher, beat) and gunicorn, all real
processes, with the demo models (./dev build_demo_models first). Each scenario submits a small
experiment on the demo target, injects its fault, and reads the database: runs lost (not
succeeded, where success was possible), request rows duplicated, and seconds from the fault
being detectable to recovery. Every process it starts is stopped on every exit path, and the
folder is removed; --logs copies its logs (workers, control worker, gunicorn, PostgreSQL,
Redis, vLLM servers) to a folder first, to check an outcome against what the processes said.
The scenarios are workers/bench/faults/ (their names: --only's choices there); this command
line exports the commit and runs that harness inside it (workers/bench/faults/play.py).
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent


def export(src: Path) -> None:
    """The last commit's files, and the front-end libraries ./dev copied from npm."""
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=CHECKOUT, check=True, capture_output=True).stdout
    src.mkdir()
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    shutil.copytree(CHECKOUT / "static" / "vendor", src / "static" / "vendor")


def harness(folder: Path, passed: list[str]) -> int:
    """The harness in the exported source, until it exits; SIGTERM (from `timeout`, CI or a test)
    is passed on, so that it stops its stack, and a Ctrl-C reaches it as it reaches this process."""
    command = [sys.executable, "-m", "workers.bench.faults.play", "--folder", str(folder), "--checkout", str(CHECKOUT)]
    child = subprocess.Popen([*command, *passed], cwd=folder / "src")
    signal.signal(signal.SIGTERM, lambda *_: child.send_signal(signal.SIGTERM))
    while True:
        try:
            return child.wait()
        except KeyboardInterrupt:
            continue  # the harness got it too, and stops its stack before it exits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", metavar="NAME", help="scenarios to play (default: all)")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    parser.add_argument("--logs", type=Path, help="copy the stack's logs to this folder before it is removed")
    options = parser.parse_args(argv)
    if not (CHECKOUT / ".specdash" / "models" / "target" / "config.json").exists():
        sys.exit("the demo models are missing: ./dev manage build_demo_models")
    passed = ["--only", *options.only] if options.only else []
    passed += ["--markdown", str(options.markdown.resolve())] if options.markdown else []
    passed += ["--logs", str(options.logs.resolve())] if options.logs else []
    with tempfile.TemporaryDirectory(prefix="specdash-faults-", dir="/var/tmp") as folder:
        os.chmod(folder, 0o755)
        export(Path(folder) / "src")
        return harness(Path(folder), passed)


if __name__ == "__main__":
    sys.exit(main())
