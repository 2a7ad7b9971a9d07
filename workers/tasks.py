"""Celery tasks: thin wrappers that take ids and call the code in workers/."""

import logging
import socket
from datetime import timedelta

from celery import shared_task
from django.conf import settings

from experiments import services
from experiments.models import Experiment
from workers.runner import execute_experiment

logger = logging.getLogger(__name__)


@shared_task(
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=settings.SPECDASH_RUN_SOFT_TIME_LIMIT_S,
)
def experiment_execute(experiment_id: int) -> None:
    """Run every queued run of the experiment on this worker. Safe to deliver twice:
    each run is claimed with a conditional update before it starts."""
    logger.info("received experiment %s", experiment_id)
    execute_experiment(experiment_id, worker_host=socket.gethostname())


@shared_task
def runs_reap_stale() -> None:
    """Re-queue runs whose worker stopped sending heartbeats, and dispatch their
    experiments again."""
    stale_after = timedelta(seconds=settings.SPECDASH_HEARTBEAT_STALE_S)
    experiment_ids = services.runs_requeue_stale(stale_after=stale_after)
    for experiment in Experiment.objects.filter(id__in=experiment_ids):
        logger.warning("re-dispatching experiment %s after a stale run", experiment.id)
        experiment_execute.apply_async(args=[experiment.id], queue=experiment.worker_queue)
    for experiment in services.experiments_without_work():
        services.experiment_finish(experiment=experiment)
