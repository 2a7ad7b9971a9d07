"""Execute an experiment on this worker: one vLLM server per arm, every run of that arm
against it, each run's requests ingested as soon as the run ends.

All arms of an experiment run on the same worker host, one after another, so that the
baseline and the speculative arms share hardware, runtime and settings.
"""

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import transaction

from experiments import services
from experiments.models import Arm, Experiment, Run
from experiments.workloads import experiment_prompts
from workers import ingest
from workers.envinfo import capture_environment
from workers.loadgen import run_load_sync
from workers.vllm_server import ServerStartError, VllmServer, build_server_args, free_port

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY_S = 1.0


@dataclass
class ProgressReporter:
    """Heartbeat and progress of one run, written at most once a second."""

    run: Run
    total: int
    last_beat: float = field(default=0.0)

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last_beat < HEARTBEAT_EVERY_S and done < total:
            return
        self.last_beat = now
        services.run_heartbeat(run_id=self.run.id, requests_done=done, requests_total=self.total)
        logger.info("%s: %d/%d requests", self.run, done, self.total)


class RunFailed(Exception):
    """A run whose measurement cannot be used."""


def server_log_path(experiment: Experiment, arm: Arm) -> Path:
    path = settings.DATA_DIR / "server-logs" / f"experiment-{experiment.id}" / f"arm-{arm.position}-{arm.id}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def server_pid_dir(worker_name: str) -> Path:
    """Where this worker records the servers it runs, so its successor can stop orphans."""
    return settings.DATA_DIR / "server-pids" / worker_name


def arm_server_args(experiment: Experiment, arm: Arm, port: int) -> list[str]:
    return build_server_args(
        python=settings.SPECDASH_VLLM_PYTHON,
        model=experiment.target_model,
        port=port,
        dtype=experiment.dtype,
        max_model_len=experiment.max_model_len,
        seed=experiment.seed,
        speculative_config=arm.speculative_config(),
    )


def _load(server: VllmServer, experiment: Experiment, prompts: list[str], concurrency: int, on_done=None):
    return run_load_sync(
        base_url=server.base_url,
        model="target",
        prompts=prompts,
        max_tokens=experiment.max_tokens,
        temperature=experiment.temperature,
        top_p=experiment.top_p,
        seed=experiment.seed,
        ignore_eos=experiment.ignore_eos,
        concurrency=concurrency,
        request_rate=experiment.request_rate,
        on_request_done=on_done,
    )


def run_measure(server: VllmServer, experiment: Experiment, run: Run, prompts: list[str]):
    """Warm up, then drive the measured requests; the load generator reads the spec
    counters around the measured ones only."""
    if experiment.warmup_requests:
        _load(server, experiment, prompts[: experiment.warmup_requests], run.concurrency)
    load = _load(server, experiment, prompts, run.concurrency, ProgressReporter(run, len(prompts)))
    if load.spec_counters is None:
        raise RunFailed(f"could not read {server.base_url}/metrics around the measured requests")
    return load, load.spec_counters


def _check_load(server: VllmServer, load) -> None:
    if load.requests and all(r.error for r in load.requests):
        raise RunFailed(
            f"every request failed, first error: {load.requests[0].error}\n\nLast lines of the server log:\n"
            f"{server.log_tail()}"
        )


def _run_execute(server, experiment, run, prompts, environment, worker_host) -> None:
    if not services.run_claim(run_id=run.id, worker_host=worker_host):
        logger.info("%s is taken by another worker; skipping", run)
        return
    logger.info("starting %s", run)
    try:
        load, counters = run_measure(server, experiment, run, prompts)
        _check_load(server, load)
        # The rows, the summary and the status change land together or not at all.
        with transaction.atomic():
            ingest.ingest_run(
                run_id=run.id, load=load, counters=counters, environment=environment, experiment=experiment
            )
            services.run_mark_succeeded(run_id=run.id)
    except SoftTimeLimitExceeded:
        services.run_mark_failed(run_id=run.id, error="The run went past its time limit.")
        raise
    except Exception as exc:
        logger.exception("%s failed", run)
        services.run_mark_failed(run_id=run.id, error=f"{type(exc).__name__}: {exc}")


def _arm_fail_runs(runs: list[Run], error: str, worker_host: str) -> None:
    for run in runs:
        if services.run_claim(run_id=run.id, worker_host=worker_host):
            services.run_mark_failed(run_id=run.id, error=error)


def arm_execute(experiment: Experiment, arm: Arm, prompts: list[str], worker_host: str, worker_name: str) -> None:
    runs = list(arm.runs.filter(status=Run.Status.QUEUED).order_by("repetition", "concurrency"))
    if not runs:
        return
    args = arm_server_args(experiment, arm, free_port())
    log_path = server_log_path(experiment, arm)
    logger.info("starting vLLM for %s: %s", arm, " ".join(args))
    try:
        server = VllmServer(
            args,
            log_path=log_path,
            start_timeout_s=settings.SPECDASH_SERVER_START_TIMEOUT_S,
            pid_dir=server_pid_dir(worker_name),
        )
        with server:
            environment = capture_environment(vllm_python=settings.SPECDASH_VLLM_PYTHON, server_command=args)
            for run in runs:
                _run_execute(server, experiment, run, prompts, environment, worker_host)
    except ServerStartError as exc:
        logger.error("vLLM did not start for %s: %s", arm, exc)
        _arm_fail_runs(
            runs, f"The vLLM server did not start: {exc}\n\nLast lines of its log:\n{exc.log_tail}", worker_host
        )


def experiment_run_all(experiment_id: int, *, worker_host: str, worker_name: str) -> None:
    experiment = Experiment.objects.get(id=experiment_id)
    if not experiment.is_active:
        logger.info("experiment %s is %s; nothing to do", experiment_id, experiment.status)
        return
    services.experiment_mark_running(experiment=experiment)
    prompts = experiment_prompts(experiment)
    for arm in experiment.arms.order_by("position"):
        arm_execute(experiment, arm, prompts, worker_host, worker_name)
    if not experiment.runs.open().exists():
        services.experiment_finish(experiment=experiment)
