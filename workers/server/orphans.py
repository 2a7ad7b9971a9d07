"""Stop the vLLM servers a worker process left behind, from the records in its server-pid folder.

Every server runs in a process group of its own (workers/server/vllm_server.py), so a worker
process killed with SIGKILL cannot stop it, and it holds its cores or GPU memory on. While it
runs, VllmServer keeps a record of it, `<process group>.pid`, in its worker's server-pid folder
(workers/server/launch.server_pid_dir). Two callers read that folder:

- a worker's new pool process, at its start (workers/tasks.py), for the servers of the one it
  replaces;
- `./dev down`, after the worker is gone: a worker's warm shutdown waits for its experiment's
  current block, so `./dev down` kills a worker still busy after its grace period, and then runs

    python -m workers.server.orphans .specdash/server-pids/cpu@HOST

Only process groups that still run vLLM are stopped; a record whose process id was reused by
something else is dropped and that process is left alone. Plain module: no Django.
"""

import argparse
import contextlib
import os
import signal
import sys
from pathlib import Path

from workers.server.vllm_server import group_pids


def stop_orphaned_servers(pid_dir: Path) -> list[int]:
    """Kill the process groups of servers that a previous worker process started and never
    stopped (it was killed with SIGKILL, so no cleanup ran). Returns the group ids killed."""
    killed = []
    for pidfile in Path(pid_dir).glob("*.pid"):
        pgid = int(pidfile.stem)
        if _group_runs_vllm(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            killed.append(pgid)
        pidfile.unlink(missing_ok=True)
    return killed


def _group_runs_vllm(pgid: int) -> bool:
    """Whether any live process of the group is a vLLM process (not a reused group id)."""
    for pid in group_pids(pgid):
        try:
            if b"vllm" in Path(f"/proc/{pid}/cmdline").read_bytes().lower():
                return True
        except OSError:
            continue
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pid_dir", type=Path, help="the worker's server-pid folder (DATA/server-pids/NODE)")
    args = parser.parse_args(argv)
    for pgid in stop_orphaned_servers(args.pid_dir):
        print(f"stopped a vLLM server the worker left behind (process group {pgid})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
