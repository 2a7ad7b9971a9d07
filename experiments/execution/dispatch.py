"""Writes that keep work moving through faults: handing experiments to the broker, the
lease a worker process holds on the experiment it executes, and taking work back from
worker processes that died.

An experiment is dispatched when its row commits. If Redis cannot be reached then, it
stays queued with no `dispatched_at`, the page says it waits for the broker, and the
periodic dispatcher (workers.tasks.experiments_dispatch_waiting) hands it over once Redis
answers. A worker process that executes an experiment holds its lease and beats every
second (workers/liveness.py); a lease whose beat is older than SPECDASH_HEARTBEAT_STALE_S
belongs to a dead process, and the reaper gives its runs and the experiment back.
"""

import logging
import os
from datetime import timedelta

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from kombu.exceptions import OperationalError as BrokerError

from experiments.models import Block, Experiment, Run
from specdash.celery import app

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
# An experiment created this recently is being dispatched by its own on_commit callback.
DISPATCH_GRACE = timedelta(seconds=5)
# The web side reaches the worker side by this name only (the import-linter contract in
# pyproject.toml forbids importing workers here); tests/workers/test_tasks.py checks that it names
# the registered task.
EXECUTE_TASK = "workers.tasks.experiment_execute"


def task_send(*, args: list[object], queue: str) -> None:
    """Send the experiment task by its name to a worker queue."""
    app.send_task(EXECUTE_TASK, args=args, queue=queue)


def messages_due(experiment: Experiment) -> int:
    """One message per queued block of an experiment dispatched by block (each worker that takes
    one claims a block, and goes on claiming while blocks are queued: experiments/execution/
    block_claims.py), so that every idle worker of the queue can take one; else one."""
    return max(1, Block.objects.filter(experiment_id=experiment.id, status=Block.Status.QUEUED).count())


def experiment_dispatch(*, experiment: Experiment, messages: int | None = None) -> bool:
    """Hand the experiment's task to the broker on its worker queue, `messages` times (by default
    messages_due). False, with the experiment left waiting for the periodic dispatcher, when Redis
    cannot be reached."""
    try:
        for _ in range(messages_due(experiment) if messages is None else messages):
            task_send(args=[experiment.id], queue=experiment.worker_queue)
    except (BrokerError, OSError) as error:
        logger.warning("experiment %s waits for the broker: %s", experiment.id, error)
        return False
    Experiment.objects.filter(id=experiment.id).update(dispatched_at=timezone.now())
    return True


def experiments_waiting_for_broker() -> list[Experiment]:
    """Queued or running experiments whose task never reached the broker."""
    cutoff = timezone.now() - DISPATCH_GRACE
    return list(Experiment.objects.active().filter(dispatched_at__isnull=True, created_at__lt=cutoff))


def lease_owner_name(worker_name: str, host: str) -> str:
    return f"{host}:{os.getpid()}:{worker_name}"


def _lease_parts(owner: str) -> tuple[str, str, str]:
    """Host, process id and Celery node name of a lease owner (lease_owner_name)."""
    host, _, rest = owner.partition(":")
    pid, _, node = rest.partition(":")
    return host, pid, node


def owner_dead_here(current: str, owner: str) -> bool:
    """A holder that was this same worker (host and Celery node) in a process that is gone: a
    pool process killed mid-run, whose replacement need not wait for the beat to go stale.
    Another worker is never judged so, even one reporting the same host name: containers
    started with the machine's hostname each have process ids of their own."""
    current_host, pid, current_node = _lease_parts(current)
    own_host, _, own_node = _lease_parts(owner)
    if (current_host, current_node) != (own_host, own_node) or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def experiment_lease_take(*, experiment_id: int, owner: str, stale_after: timedelta) -> bool:
    """Hold the experiment for this worker process. False while another live process holds it
    (a re-delivered task then leaves it alone)."""
    now = timezone.now()
    free = Q(lease_owner="") | Q(lease_owner=owner) | Q(lease_at__lt=now - stale_after)
    current = Experiment.objects.filter(id=experiment_id).values_list("lease_owner", flat=True).first()
    if current and owner_dead_here(current, owner):
        free |= Q(lease_owner=current)
    return bool(Experiment.objects.filter(free, id=experiment_id).update(lease_owner=owner, lease_at=now))


def experiment_lease_beat(*, experiment_id: int, owner: str) -> bool:
    """The holder's beat, with the heartbeat of the runs it has under way. False when the
    lease went to someone else (the reaper took the experiment back during a long outage)."""
    now = timezone.now()
    held = Experiment.objects.filter(id=experiment_id, lease_owner__in=[owner, ""]).update(
        lease_owner=owner, lease_at=now
    )
    if held:
        Run.objects.filter(experiment_id=experiment_id, status=Run.Status.RUNNING).update(heartbeat_at=now)
    return bool(held)


def experiment_lease_release(*, experiment_id: int, owner: str) -> None:
    Experiment.objects.filter(id=experiment_id, lease_owner=owner).update(lease_owner="", lease_at=None)


def runs_requeue(runs: QuerySet[Run], *, reason: str, max_attempts: int = MAX_ATTEMPTS) -> None:
    """Queue runs again, or fail those tried `max_attempts` times."""
    runs.filter(attempts__gte=max_attempts).update(
        status=Run.Status.FAILED,
        finished_at=timezone.now(),
        error=f"{reason} (tried {max_attempts} times); gave up.",
    )
    runs.filter(attempts__lt=max_attempts).update(
        status=Run.Status.QUEUED, started_at=None, heartbeat_at=None, requests_done=0, worker_host="", worker_name=""
    )


def runs_take_back(*, experiment_id: int, reason: str) -> None:
    """The runs a dead holder of the experiment left running: queued again (or failed)."""
    runs_requeue(Run.objects.filter(experiment_id=experiment_id, status=Run.Status.RUNNING), reason=reason)


@transaction.atomic
def experiments_take_back_dead(*, stale_after: timedelta) -> list[int]:
    """Active experiments whose holder stopped beating: lease cleared, its runs queued again.
    Returns their ids, to be dispatched again."""
    cutoff = timezone.now() - stale_after
    dead = Experiment.objects.active().select_for_update(skip_locked=True).filter(lease_at__lt=cutoff)
    ids = list(dead.values_list("id", flat=True))
    for experiment_id in ids:
        runs_take_back(experiment_id=experiment_id, reason="The worker process stopped beating")
    Experiment.objects.filter(id__in=ids).update(lease_owner="", lease_at=None, dispatched_at=None)
    return ids


def run_requeue(*, run_id: int, reason: str) -> bool:
    """A run whose server died under it: queued again for a fresh server, unless it was
    tried MAX_ATTEMPTS times (then failed). True when it is queued again."""
    runs = Run.objects.filter(id=run_id, status=Run.Status.RUNNING)
    runs_requeue(runs, reason=reason)
    return Run.objects.filter(id=run_id, status=Run.Status.QUEUED).exists()
