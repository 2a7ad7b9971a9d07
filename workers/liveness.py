"""The beat of a worker process that holds an experiment: every second, from a thread of its
own, so that a run busy in a long request or a slow server start still shows its process is
alive. A dead process stops beating; the reaper then takes its work back within
SPECDASH_HEARTBEAT_STALE_S (experiments/execution/dispatch.py). Slow but alive is bounded by the
per-run time limit instead."""

import logging
import threading

from django.db import DatabaseError, connection

from experiments.execution import block_claims, dispatch

logger = logging.getLogger(__name__)

BEAT_EVERY_S = 1.0


class LeaseBeat:
    """Beats the experiment's lease while the `with` block runs; stops on every exit path. With
    `block_id` (an experiment dispatched by block), the lease of that block instead
    (experiments/execution/block_claims.py)."""

    def __init__(self, *, experiment_id: int, owner: str, every_s: float = BEAT_EVERY_S, block_id: int | None = None):
        self.experiment_id = experiment_id
        self.owner = owner
        self.block_id = block_id
        self.every_s = every_s
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"lease-beat-{experiment_id}", daemon=True)

    def __enter__(self) -> "LeaseBeat":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        try:
            while not self._stop.wait(self.every_s):
                self._beat()
        finally:
            connection.close()  # this thread's own connection

    def _beat(self) -> None:
        try:
            if self.block_id is not None:
                held = block_claims.block_beat(block_id=self.block_id, owner=self.owner)
            else:
                held = dispatch.experiment_lease_beat(experiment_id=self.experiment_id, owner=self.owner)
            self.lost = self.lost or not held
        except DatabaseError as error:
            # PostgreSQL restarting: beat again once it answers, on a new connection.
            logger.warning("lease beat of experiment %s failed: %s", self.experiment_id, error)
            connection.close()
