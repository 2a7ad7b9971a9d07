"""The harness: the stack started, every scenario asked for played against it, the stack
stopped, the table printed. scripts/fault_injection.py runs it inside the exported source
(`python -m workers.bench.faults.play --folder FOLDER --checkout CHECKOUT ...`), so that the
harness, the ORM it reads the outcomes with and the processes it plays against are all the
last commit's code. Exit status 1 when a scenario lost a run or duplicated a row."""

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from workers.bench.faults.rows import Row, table
from workers.bench.faults.stack import Stack

NAMES = (
    "kill-worker", "kill-whole-worker", "kill-server", "never-healthy", "out-of-memory", "redis-down",
    "postgres-restart", "delivered-twice", "cancel", "cancel-during-start", "web-restart",
)  # fmt: skip


def _orm_on(stack: Stack) -> None:
    """This process's ORM on the stack's database (its settings read the stack's environment)."""
    os.environ.update(stack.env)
    import django

    django.setup()


def _scenarios() -> dict[str, Callable[..., Row]]:
    """The scenarios by name: their modules use the ORM, so they are imported once it is set up."""
    from workers.bench.faults import process_faults as process
    from workers.bench.faults import service_faults as service

    found = {
        "kill-worker": process.kill_worker_child, "kill-whole-worker": process.kill_whole_worker,
        "kill-server": process.kill_server, "never-healthy": process.server_never_healthy,
        "out-of-memory": process.server_out_of_memory, "redis-down": service.redis_down_at_submission,
        "postgres-restart": service.postgres_restart_at_ingestion, "delivered-twice": service.delivered_twice,
        "cancel": service.cancel_mid_run, "cancel-during-start": service.cancel_during_start,
        "web-restart": service.web_restart_while_polling,
    }  # fmt: skip
    assert tuple(found) == NAMES, "NAMES lists every scenario, in the order they are played"
    return found


def play(stack: Stack, names: Sequence[str]) -> list[Row]:
    """Start the stack and play each scenario of `names` (a scenario that broke is a row too)."""
    stack.pg_init()
    stack.redis_start()
    stack.manage("migrate", "--noinput", "-v", "0")
    stack.manage("collectstatic", "--noinput", "-v", "0")
    _orm_on(stack)
    from django.contrib.auth import get_user_model

    from workers.bench.faults.outcomes import PASSWORD

    owner = get_user_model().objects.create_user("faults", password=PASSWORD)
    stack.worker_start()
    stack.control_start()
    stack.web_start()
    scenarios, rows = _scenarios(), []
    for name in names:
        started = time.monotonic()
        try:
            rows.append(scenarios[name](stack, owner))
        except Exception as error:
            message = " ".join(str(error).split())[:200]
            rows.append(Row(name, "see the error", f"did not complete: {message}", -1, -1, None))
        print(f"{name}: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, required=True, help="the stack's folder, the exported source in src/")
    parser.add_argument("--checkout", type=Path, required=True, help="the checkout: its venvs and demo models")
    parser.add_argument("--only", nargs="*", choices=NAMES, help="scenarios to play (default: all)")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    parser.add_argument("--logs", type=Path, help="copy the stack's logs to this folder before it is removed")
    options = parser.parse_args(argv)
    # scripts/fault_injection.py passes SIGTERM on: unwind, so that the stack is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    stack, rows = Stack(options.folder, options.checkout), []
    try:
        rows = play(stack, options.only or NAMES)
    finally:
        stack.shutdown()
        if options.logs:
            stack.logs_copy(options.logs)
    print(table(rows))
    if options.markdown:
        options.markdown.write_text(table(rows) + "\n")
    return 0 if all(r.lost == 0 and r.duplicated == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
