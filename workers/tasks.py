"""Celery tasks: thin wrappers that take ids, call the code in workers/ and own failure handling.

The web side imports this module (experiments.services enqueues experiment_execute on
commit), so it imports services and the runner inside the task bodies: the import graph
stays one way, web → services → tasks, never back.
"""

import logging
import socket
from datetime import timedelta

from celery import shared_task
from celery.signals import celeryd_init, worker_process_init
from django.conf import settings

logger = logging.getLogger(__name__)

# The worker's node name (e.g. cpu@host), set in the main process before the pool forks.
_worker = {"name": socket.gethostname()}


@celeryd_init.connect
def _remember_worker_name(sender=None, **kwargs) -> None:
    _worker["name"] = sender or _worker["name"]


@worker_process_init.connect
def _stop_orphaned_servers(**kwargs) -> None:
    """A pool process that replaces one killed mid-run stops the servers it left behind."""
    from workers.server.launch import server_pid_dir
    from workers.server.orphans import stop_orphaned_servers

    for pgid in stop_orphaned_servers(server_pid_dir(_worker["name"])):
        logger.warning("stopped an orphaned vLLM server (process group %s)", pgid)


@shared_task(acks_late=True, reject_on_worker_lost=True)
def experiment_execute(experiment_id: int) -> None:
    """Run every queued run of the experiment on this worker. Safe to deliver twice: one
    live worker process holds the experiment (its lease), and each run is claimed with a
    conditional update before it starts. Each run has its own time limit (workers/runner.py)."""
    from workers.runner import experiment_run_all

    logger.info("received experiment %s", experiment_id)
    experiment_run_all(experiment_id, worker_host=socket.gethostname(), worker_name=_worker["name"])


@shared_task
def runs_reap_stale() -> None:
    """Take work back from dead worker processes: experiments whose holder stopped beating,
    blocks whose worker did (released whole: experiments/execution/block_claims.py) and runs
    whose heartbeat went stale are queued again and dispatched on their own queues, as are
    experiments whose blocks wait with no worker on them; experiments with no work left are closed."""
    from experiments import lifecycle
    from experiments.execution import block_claims, dispatch
    from experiments.execution import services as execution
    from experiments.models import Experiment, IllegalTransition

    stale_after = timedelta(seconds=settings.SPECDASH_HEARTBEAT_STALE_S)
    ids = set(dispatch.experiments_take_back_dead(stale_after=stale_after))
    for block in block_claims.blocks_stale(stale_after=stale_after):
        logger.warning("taking %s back from %s: it stopped beating", block, block.worker_name or block.worker_host)
        lifecycle.block_take_back(block=block, reason="Its worker stopped beating")
        ids.add(block.experiment_id)
    ids |= set(execution.runs_requeue_stale(stale_after=stale_after))
    ids |= {experiment.id for experiment in block_claims.experiments_stalled()}
    for experiment in Experiment.objects.filter(id__in=ids).active():
        logger.warning("re-dispatching experiment %s: its worker process stopped beating", experiment.id)
        dispatch.experiment_dispatch(experiment=experiment)
    for experiment in execution.experiments_without_work():
        try:
            lifecycle.experiment_finish(experiment=experiment)
        except IllegalTransition as why:  # a worker added a block or finished it meanwhile
            logger.info("experiment %s not closed by the reaper: %s", experiment.id, why)


@shared_task
def experiments_dispatch_waiting() -> None:
    """Hand the broker the experiments saved while it could not be reached."""
    from experiments.execution import dispatch

    for experiment in dispatch.experiments_waiting_for_broker():
        if dispatch.experiment_dispatch(experiment=experiment):
            logger.warning("dispatched experiment %s, which waited for the broker", experiment.id)
