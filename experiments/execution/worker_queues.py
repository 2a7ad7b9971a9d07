"""Which Celery queues have a live worker, and what those workers compute on: the choices the
experiment form offers, and what an experiment's page checks its queue against.

The workers say so themselves through Celery's remote control: `inspect active_queues` (every
worker, whatever its version) and `inspect hardware` (workers/control_commands.py). Asking
is a broadcast that waits its whole timeout for replies, so the answer is kept a few seconds
in Django's cache: a page that polls every 2 s does not wait a second on each poll. A worker
that does not answer within the timeout counts as not live; Redis not answering means no one
can tell, and the answer says so instead of claiming that no worker listens.
"""

import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache
from kombu.exceptions import OperationalError

from experiments.measurement.stats.differences import hardware_label
from specdash.celery import app

logger = logging.getLogger(__name__)

# The reaper's and the dispatcher's queue (./dev, deploy/): experiments never run there.
CONTROL_QUEUE = "control"
INSPECT_TIMEOUT_S = 1.0
CACHE_KEY = "experiments:worker-queues"
CACHE_S = 5


@dataclass(frozen=True)
class LiveQueue:
    """`cpu_only`: every worker on the queue reported its hardware, and none has a GPU."""

    name: str
    workers: tuple[str, ...]
    hardware: tuple[str, ...]
    cpu_only: bool = False

    @property
    def label(self) -> str:
        """ "h100: 4 workers, 1 × NVIDIA H100 80GB HBM3", as the form lists it."""
        count = f"{len(self.workers)} worker{'s' if len(self.workers) != 1 else ''}"
        return ", ".join([count, *self.hardware]) if self.hardware else f"{count}, hardware not reported"


@dataclass(frozen=True)
class LiveQueues:
    """`readable` False: Redis did not answer, so nothing is known about any queue."""

    queues: tuple[LiveQueue, ...] = ()
    readable: bool = True

    def listens(self, name: str) -> bool | None:
        """Whether a live worker consumes `name`; None when that cannot be told."""
        if not self.readable:
            return None
        return any(queue.name == name for queue in self.queues)

    def cpu_only(self, name: str) -> bool:
        """Whether the queue has live workers and all of them compute on CPU."""
        return name in self.cpu_only_names

    @property
    def cpu_only_names(self) -> tuple[str, ...]:
        """The live queues whose workers all compute on CPU."""
        return tuple(queue.name for queue in self.queues if queue.cpu_only)


def live_queues() -> LiveQueues:
    """The experiment queues with live workers, at most CACHE_S seconds old."""
    answer: LiveQueues | None = cache.get(CACHE_KEY)
    if answer is None:
        answer = _ask_workers()
        cache.set(CACHE_KEY, answer, CACHE_S)
    return answer


def no_worker_notice(queue: str) -> str | None:
    """What to tell someone whose experiment waits on `queue`, or None when a worker listens."""
    answer = live_queues()
    listens = answer.listens(queue)
    if listens is None:
        return f"Could not tell whether a worker listens on queue {queue}: Redis did not answer."
    if not listens:
        return f"No live worker listens on queue {queue}; the experiment waits until one joins."
    return None


def synthetic_sweep_notice(queue: str) -> str | None:
    """What to tell someone whose synthetic acceptance sweep waits on a queue that only CPU
    workers serve (workers/server/synthetic_acceptance.py: vLLM's CPU build refuses it); None otherwise."""
    if not live_queues().cpu_only(queue):
        return None
    return (
        f"Every live worker on queue {queue} computes on CPU, and vLLM's CPU build refuses synthetic "
        "acceptance: the synthetic sweep's runs will fail without starting a server unless a GPU worker "
        "joins the queue. The arms' own runs are not affected."
    )


def inspect_workers() -> tuple[dict[str, Any], dict[str, Any]]:
    """Celery's raw replies: the queues of each live worker, then the hardware of those
    workers. Raises kombu's OperationalError when Redis cannot be reached."""
    queues = app.control.inspect(timeout=INSPECT_TIMEOUT_S).active_queues() or {}
    if not queues:
        return {}, {}
    # Only the workers that just answered are asked, so the wait ends with their last reply.
    replies = app.control.broadcast(
        "hardware", destination=list(queues), reply=True, timeout=INSPECT_TIMEOUT_S, limit=len(queues)
    )
    return queues, {worker: answer for reply in replies or [] for worker, answer in reply.items()}


def _ask_workers() -> LiveQueues:
    try:
        queues, hardware = inspect_workers()
    except (OperationalError, OSError) as error:
        logger.warning("could not read which workers are live: %s", error)
        return LiveQueues(readable=False)
    return queues_from_replies(queues, hardware)


def queues_from_replies(queues: dict[str, Any], hardware: dict[str, Any]) -> LiveQueues:
    """Group the workers' replies by queue, the control queue left out."""
    by_queue: dict[str, list[str]] = {}
    for worker, consumed in queues.items():
        for queue in consumed:
            if queue.get("name") and queue["name"] != CONTROL_QUEUE:
                by_queue.setdefault(queue["name"], []).append(worker)
    return LiveQueues(
        queues=tuple(
            LiveQueue(
                name=name,
                workers=tuple(sorted(workers)),
                hardware=tuple(sorted({label for w in workers if (label := _hardware_of(hardware.get(w)))})),
                cpu_only=all(_gpu_count(hardware.get(w)) == 0 for w in workers),
            )
            for name, workers in sorted(by_queue.items())
        )
    )


def _gpu_count(reply: object) -> int | None:
    """The GPUs a worker reported; None when it did not report its hardware."""
    if not isinstance(reply, dict) or "gpu_count" not in reply:
        return None
    return reply.get("gpu_count") or 0


def _hardware_of(reply: Any) -> str:
    """The label the history filters use ("1 × NVIDIA H100", "CPU: …"); "" when not reported."""
    gpu_count = _gpu_count(reply)
    if gpu_count is None:
        return ""
    return hardware_label(gpu_name=reply.get("gpu_name", ""), gpu_count=gpu_count, cpu_model=reply.get("cpu_model", ""))


def server_start_timeout_s(queue: str) -> float:
    """How long a vLLM server on this queue may take to become healthy: the queue's own limit
    (SPECDASH_SERVER_START_TIMEOUT_S_BY_QUEUE) or the default. The form's time limit and the
    worker read the same figure."""
    return settings.SPECDASH_SERVER_START_TIMEOUT_S_BY_QUEUE.get(queue, settings.SPECDASH_SERVER_START_TIMEOUT_S)


def seconds_per_token(queue: str) -> float:
    """How long a run on this queue may take per generated token, in its time limit: the queue's
    own pace (SPECDASH_RUN_SECONDS_PER_TOKEN_BY_QUEUE) or the default, a CPU host's. The form's
    time limit, its estimate and the worker's run limit read the same figure."""
    return settings.SPECDASH_RUN_SECONDS_PER_TOKEN_BY_QUEUE.get(queue, settings.SPECDASH_RUN_SECONDS_PER_TOKEN)
