"""Stop the vLLM servers a stopped worker left behind, from the records in its server-pid folder.

A worker's warm shutdown waits for its experiment's current block, so `./dev down` kills a
worker that is still busy after its grace period; the killed pool process cannot stop the vLLM
server it started (servers run in process groups of their own). `./dev down` runs this after the
worker is gone, as the worker's successor would at its start (workers/tasks.py):

    python -m workers.server.stop_orphans .specdash/server-pids/cpu@HOST

Only process groups that still run vLLM are stopped; records whose process id was reused by
something else are dropped and that process is left alone (vllm_server.stop_orphaned_servers).
"""

import argparse
import sys
from pathlib import Path

from workers.server.vllm_server import stop_orphaned_servers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pid_dir", type=Path, help="the worker's server-pid folder (DATA/server-pids/NODE)")
    args = parser.parse_args(argv)
    for pgid in stop_orphaned_servers(args.pid_dir):
        print(f"stopped a vLLM server the worker left behind (process group {pgid})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
