"""How many of an experiment's blocks may be in flight (issue 38): as many as there are workers of
its queue and hardware class that are idle or already running one of its blocks. A block added
beyond that would only wait in the queue, while the looks it could have waited for decide whether
it is needed; fewer would leave a worker of the class idle.

The workers say it through Celery's remote control, as for the form's queue list
(experiments/execution/worker_queues.py): `active_queues`, `hardware` (with each worker's hardware
class) and `active` (the task each one runs). Redis not answering leaves the count to what the
database knows: the workers holding the experiment's blocks now.
"""

import logging
from collections.abc import Mapping
from typing import Any

from kombu.exceptions import OperationalError

from experiments.execution import worker_queues
from experiments.execution.dispatch import EXECUTE_TASK
from experiments.execution.hardware_class import HardwareClass, differences
from specdash.celery import app

logger = logging.getLogger(__name__)


def _running_only(tasks: object, experiment_id: int) -> bool:
    """Whether a worker's active tasks are none, or this experiment's task only."""
    if not isinstance(tasks, list):
        return False
    return all(
        isinstance(task, dict) and task.get("name") == EXECUTE_TASK and list(task.get("args") or []) == [experiment_id]
        for task in tasks
    )


def capacity_from_replies(
    *, queue: str, experiment_id: int, reference: HardwareClass | None,
    queues: Mapping[str, Any], hardware: Mapping[str, Any], active: Mapping[str, Any],
) -> set[str]:  # fmt: skip
    """The workers (node names) of `queue` whose hardware class is `reference` (any, when None)
    and that are idle or run only this experiment's task."""
    found = set()
    for worker, consumed in queues.items():
        if not any(isinstance(q, dict) and q.get("name") == queue for q in consumed or []):
            continue
        reply = hardware.get(worker)
        if not isinstance(reply, dict) or "vllm_version" not in reply:
            continue  # a worker that does not report its class is not counted on
        if reference is not None and differences(reference, HardwareClass.of(reply)):
            continue
        if _running_only(active.get(worker, []), experiment_id):
            found.add(worker)
    return found


def class_capacity(*, queue: str, experiment_id: int, reference: HardwareClass | None, holders: set[str]) -> int:
    """How many blocks of the experiment may be in flight: its class's workers on `queue` that
    are idle or run it, with `holders` (the workers holding its blocks now, the asker among them)
    counted whatever the broadcast missed. At least 1."""
    try:
        queues, hardware = worker_queues.inspect_workers()
        active = app.control.inspect(timeout=worker_queues.INSPECT_TIMEOUT_S).active() or {}
    except (OperationalError, OSError) as error:
        logger.warning("could not ask the workers of queue %s which are idle: %s", queue, error)
        return max(1, len(holders))
    found = capacity_from_replies(
        queue=queue, experiment_id=experiment_id, reference=reference, queues=queues, hardware=hardware, active=active
    )
    return max(1, len(found | holders))
