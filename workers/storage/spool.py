"""A finished run's results on the worker's disk until PostgreSQL has them.

A run's measurements are written here before the database is tried: if PostgreSQL is
restarting, the worker retries until it answers; if the worker dies first, its next task
(the pool process that replaces the dead one, or the worker restarted under its node name)
stores the file. The database decides whether a spooled result is still wanted
(execution.run_record_result): a run stored, cancelled or failed meanwhile takes nothing, and
storing replaces the run's rows, so a result is never recorded twice.

The files are pickles written and read by the worker itself, in a folder of its own under
its data folder: workers that share a data folder never take each other's files, which a
live worker may be storing at that moment.
"""

import logging
import os
import pickle
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

from experiments.execution import services as execution
from experiments.measurement.engine.prom import SpecCounters
from experiments.models import Experiment
from workers.measure.loadgen import LoadResult
from workers.storage import ingest

logger = logging.getLogger(__name__)

RETRY_MAX_S = 5.0


@dataclass(frozen=True)
class SpooledRun:
    run_id: int
    experiment_id: int
    load: LoadResult
    counters: SpecCounters
    environment: dict


def spool_dir(worker_name: str) -> Path:
    """The folder of the worker with this Celery node name."""
    path = settings.DATA_DIR / "spool" / worker_name
    path.mkdir(parents=True, exist_ok=True)
    return path


def spool_write(record: SpooledRun, *, worker_name: str) -> Path:
    """Write atomically (rename), and to disk (fsync): a half-written file is never read."""
    path = spool_dir(worker_name) / f"run-{record.run_id}.pickle"
    partial = path.with_suffix(".partial")
    with open(partial, "wb") as file:
        pickle.dump(record, file)
        file.flush()
        os.fsync(file.fileno())
    partial.replace(path)
    return path


# Spool files written before the worker's modules (or measurement's) moved into packages name the old modules;
# a worker upgraded with runs still on its disk reads them under the new names.
MOVED_MODULES = {
    "workers.loadgen": "workers.measure.loadgen",
    "workers.prom": "experiments.measurement.engine.prom",
    "workers.measure.prom": "experiments.measurement.engine.prom",
    "workers.spool": "workers.storage.spool",
    "experiments.measurement.capacity": "experiments.measurement.engine.capacity",
    "experiments.measurement.stream_fidelity": "experiments.measurement.engine.stream_fidelity",
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(MOVED_MODULES.get(module, module), name)


def spool_read(path: Path) -> SpooledRun:
    with path.open("rb") as file:
        record: SpooledRun = _Unpickler(file).load()
    return record


def _store(record: SpooledRun, worker_name: str) -> bool:
    experiment = Experiment.objects.get(id=record.experiment_id)
    return execution.run_record_result(
        run_id=record.run_id,
        store=lambda: ingest.ingest_run(
            run_id=record.run_id, load=record.load, counters=record.counters,
            environment=record.environment, experiment=experiment,
        ),
        worker_name=worker_name,
    )  # fmt: skip


def spool_store(path: Path, *, wait_s: float) -> bool:
    """Store a spooled run, retrying while the database cannot be reached (up to `wait_s`),
    then remove the file. True if the run took it; False if it no longer wanted it."""
    record = spool_read(path)
    worker_name = path.parent.name  # the folder of the worker that measured it (spool_dir)
    deadline, delay = time.monotonic() + wait_s, 0.5
    while True:
        try:
            stored = _store(record, worker_name)
        except DatabaseError as error:
            if time.monotonic() >= deadline:
                raise
            logger.warning(
                "run %s: the database is not answering (%s); its results wait in %s", record.run_id, error, path
            )
            connection.close()
            time.sleep(delay)
            delay = min(delay * 2, RETRY_MAX_S)
            close_old_connections()
            continue
        path.unlink(missing_ok=True)
        return stored


def spool_flush(*, worker_name: str, wait_s: float) -> list[int]:
    """Store every run this worker left on its disk when a process of it died or gave up
    waiting. Returns the ids of the runs that took their results."""
    stored = []
    for path in sorted(spool_dir(worker_name).glob("run-*.pickle")):
        record_id = path.stem.removeprefix("run-")
        if spool_store(path, wait_s=wait_s):
            logger.warning("stored run %s from the spool", record_id)
            stored.append(int(record_id))
    return stored
