"""A worker's server sessions: the runs that share one vLLM server, in the order they run on it.

Every session starts a fresh vLLM server (workers/server/launch.py decides how, vllm_server.py
runs it), runs its runs in their recorded level order, and stops the server on every path. Each
run is claimed with a conditional update (through the block its worker holds, on a fleet:
experiments/execution/block_claims.py), measured, spooled and stored as soon as it ends. A
server that dies under a run is replaced and the run measured again; one that does not start
fails its session's runs with the reason. workers/runner.py decides which sessions a worker runs.
"""

import itertools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DatabaseError, connection

from experiments.execution import block_claims, dispatch, services, worker_queues
from experiments.measurement.engine.prom import SpecCounters
from experiments.measurement.planning import limits
from experiments.models import Arm, Experiment, Run
from workers.host.envinfo import capture_environment
from workers.measure.loadgen import LoadResult, Prompt, run_load_sync
from workers.server import profiling
from workers.server.engine_report import read_engine_report
from workers.server.launch import ServerHost, client_cores, launch_check, session_launch
from workers.server.model_prefetch import ModelPrefetch
from workers.server.vllm_server import ServerStartError, VllmServer
from workers.storage import spool

logger = logging.getLogger(__name__)

HEARTBEAT_EVERY_S = 1.0

# Suffix decoding keeps the responses of earlier requests in a cache for the server's
# life; on a server that served earlier runs, the same prompts would be answered from it.
ONE_SERVER_PER_RUN_METHODS = {Arm.Method.SUFFIX}


@dataclass
class ProgressReporter:
    """Heartbeat and progress of one run, written at most once a second."""

    run: Run
    total: int
    last_beat: float = field(default=0.0)

    def __call__(self, done: int, total: int) -> None:
        """Runs after every measured request; raising here stops the load (workers.measure.loadgen).
        A database that does not answer does not stop it: the results wait in the spool."""
        now = time.monotonic()
        if now - self.last_beat < HEARTBEAT_EVERY_S and done < total:
            return
        self.last_beat = now
        try:
            running = services.run_heartbeat(run_id=self.run.id, requests_done=done, requests_total=self.total)
        except DatabaseError as error:
            logger.warning("%s: progress not recorded (%s)", self.run, error)
            connection.close()
            return
        if not running:
            raise RunCancelled(f"{self.run} is no longer running here")
        logger.info("%s: %d/%d requests", self.run, done, self.total)


class RunFailed(Exception):
    """A run whose measurement cannot be used."""


class ServerDied(Exception):
    """The session's vLLM server exited under a run: the run is tried again on a fresh one."""


class RunCancelled(Exception):
    """The run stopped being this worker's to do while under way: its experiment was
    cancelled (or the reaper took it back). Nothing is recorded for it; the server stops."""


def experiment_cancelled(experiment_id: int) -> bool:
    return Experiment.objects.filter(id=experiment_id, status=Experiment.Status.CANCELLED).exists()


def stop_if_cancelled(experiment: Experiment) -> None:
    """Checked before each server starts, while it starts, and before each run on it."""
    if experiment_cancelled(experiment.id):
        raise RunCancelled(f"experiment {experiment.id} was cancelled")


@dataclass(frozen=True)
class Execution:
    """What every run of one experiment on this worker shares."""

    experiment: Experiment
    prompts: list[Prompt]  # text, or chat messages (workloads.experiment_requests)
    worker_host: str
    worker_name: str
    # The pid folder and the CPU split this worker's servers share (workers/server/launch.py).
    server_host: ServerHost
    # The later servers' model files, fetched while the first server starts; awaited
    # before the first measured run (workers/server/model_prefetch.py).
    models: ModelPrefetch | None = None
    # On a fleet, the block this worker process holds (its lease name `owner`): a run is claimed
    # only while the block is still this process's (experiments/execution/block_claims.py).
    block_id: int | None = None
    owner: str = ""

    def claim(self, run_id: int, server_start_s: float | None = None) -> bool:
        """Take a queued run for this worker; False when it is not to be had."""
        if self.block_id is None:
            return services.run_claim(
                run_id=run_id, worker_host=self.worker_host, worker_name=self.worker_name,
                server_start_s=server_start_s,
            )  # fmt: skip
        return block_claims.run_claim_in_block(
            run_id=run_id, block_id=self.block_id, owner=self.owner, worker_host=self.worker_host,
            worker_name=self.worker_name, server_start_s=server_start_s,
        )  # fmt: skip

    def models_ready(self) -> None:
        """Wait for the model prefetch, so that no download runs beside a measurement."""
        if self.models is not None:
            self.models.wait(settings.SPECDASH_MODEL_PREFETCH_TIMEOUT_S, lambda: stop_if_cancelled(self.experiment))


@dataclass(frozen=True)
class Session:
    """Runs that share one vLLM server, in the order they run on it."""

    arm: Arm
    runs: list[Run]

    @property
    def synthetic_acceptance_length(self) -> float | None:
        """Set when the session serves one length of the arm's synthetic acceptance sweep."""
        return self.runs[0].synthetic_acceptance_length

    @property
    def name(self) -> str:
        first = self.runs[0]
        synthetic = (
            "" if first.synthetic_acceptance_length is None else f"-synthetic-{first.synthetic_acceptance_length:g}"
        )
        return f"arm-{self.arm.position}-{self.arm.id}{synthetic}-block-{first.repetition}-level-{first.level_position}"


def session_key(run: Run, server_per_block: bool) -> tuple:
    if run.arm.method in ONE_SERVER_PER_RUN_METHODS:
        return ("run", run.id)
    server = (run.arm_id, run.synthetic_acceptance_length)
    return (*server, run.repetition) if server_per_block else server


def sessions_group(runs: Iterable[Run], server_per_block: bool) -> list[Session]:
    """Consecutive runs (in execution order) that share a server, as sessions."""
    groups = itertools.groupby(runs, key=lambda run: session_key(run, server_per_block))
    sessions = []
    for _, group in groups:
        members = list(group)
        sessions.append(Session(arm=members[0].arm, runs=members))
    return sessions


def experiment_size(experiment: Experiment) -> limits.Size:
    return limits.Size(
        warmup=experiment.warmup_requests,
        prompts=experiment.num_prompts,
        max_tokens=experiment.max_tokens,
        request_rate=experiment.request_rate,
    )


def run_limit_s(experiment: Experiment, run: Run) -> float:
    return limits.run_time_limit_s(
        experiment_size(experiment),
        concurrency=run.concurrency,
        seconds_per_token=worker_queues.seconds_per_token(experiment.worker_queue),
    )


def run_measure(server: VllmServer, execution: Execution, run: Run) -> tuple[LoadResult, SpecCounters]:
    """Warm up on the warm-up prompts, then drive the measured ones; the load generator
    reads the spec counters around the measured requests only. A run past its time limit
    (derived from the experiment's size) fails; a server that died under it is replaced."""
    experiment = execution.experiment
    reporter = ProgressReporter(run, experiment.num_prompts)
    limit_s = run_limit_s(experiment, run)
    with client_cores(execution.server_host.binding):
        try:
            load = run_load_sync(
                base_url=server.base_url,
                model="target",
                prompts=execution.prompts,
                warmup=experiment.warmup_requests,
                max_tokens=experiment.max_tokens,
                temperature=experiment.temperature,
                top_p=experiment.top_p,
                seed=experiment.seed,
                ignore_eos=experiment.ignore_eos,
                concurrency=run.concurrency,
                request_rate=experiment.request_rate,
                on_request_done=reporter,
                time_limit_s=limit_s,
            )
        except TimeoutError:
            raise RunFailed(f"The run went past its time limit of {limit_s:.0f} s.") from None
    if server.exit_code() is not None:
        raise ServerDied(f"the vLLM server exited with code {server.exit_code()} during the run")
    if load.spec_counters is None:
        raise RunFailed(f"could not read {server.base_url}/metrics around the measured requests")
    return load, load.spec_counters


def _check_load(server: VllmServer, load: LoadResult) -> None:
    if load.requests and all(r.error for r in load.requests):
        raise RunFailed(
            f"every request failed, first error: {load.requests[0].error}\n\nLast lines of the server log:\n"
            f"{server.log_tail()}"
        )


def run_execute(
    server: VllmServer, execution: Execution, run: Run, environment: dict, *, server_start_s: float | None = None
) -> bool:
    """Claim the run (with `server_start_s`, the start-up of the server it is the first run of),
    measure and store it. False when another worker had claimed it."""
    if not execution.claim(run.id, server_start_s):
        logger.info("%s is taken by another worker; skipping", run)
        return False
    logger.info("starting %s", run)
    try:
        load, counters = run_measure(server, execution, run)
        _check_load(server, load)
        run_store(execution, run, spool.SpooledRun(run.id, execution.experiment.id, load, counters, environment))
    except (RunCancelled, ServerDied):
        raise
    except Exception as exc:
        if not Run.objects.filter(id=run.id, status=Run.Status.RUNNING).exists():
            # Cancelled while its results were being stored: they were rolled back with it.
            raise RunCancelled(f"{run} was cancelled") from exc
        logger.exception("%s failed", run)
        services.run_mark_failed(run_id=run.id, error=f"{type(exc).__name__}: {exc}")
    return True


def run_store(execution: Execution, run: Run, record: spool.SpooledRun) -> None:
    """On the worker's disk first, then in PostgreSQL (retried while it restarts): the rows,
    the summary and the status change land together or not at all."""
    path = spool.spool_write(record, worker_name=execution.worker_name)
    if not spool.spool_store(path, wait_s=settings.SPECDASH_DB_OUTAGE_WAIT_S):
        raise RunCancelled(f"{run} was cancelled while its results were being stored")


def runs_fail(runs: list[Run], error: str, *, claim: Callable[[int], bool]) -> None:
    """Fail the runs `claim` takes (Execution.claim, or a plain run claim of this worker)."""
    for run in runs:
        if claim(run.id):
            services.run_mark_failed(run_id=run.id, error=error)


def worker_claim(worker_host: str, worker_name: str) -> Callable[[int], bool]:
    """A plain run claim for this worker, outside any block."""
    return lambda run_id: services.run_claim(run_id=run_id, worker_host=worker_host, worker_name=worker_name)


def session_execute(execution: Execution, session: Session) -> None:
    """Run the session's runs on fresh servers. A server that dies under a run is replaced,
    and the run tried again, up to its attempt limit (experiments/execution/dispatch.py)."""
    runs = session.runs
    while runs:
        try:
            session_attempt(execution, Session(arm=session.arm, runs=runs))
            return
        except ServerDied as died:
            logger.warning("%s: %s; starting a fresh server", session.arm, died)
            claimed = Run.objects.filter(id__in=[r.id for r in runs], status=Run.Status.RUNNING)
            for run in claimed:
                dispatch.run_requeue(run_id=run.id, reason=f"The vLLM server died: {died}")
            order = {run.id: index for index, run in enumerate(session.runs)}
            queued = Run.objects.filter(id__in=order, status=Run.Status.QUEUED).select_related("arm")
            runs = sorted(queued, key=lambda run: order[run.id])


def session_attempt(execution: Execution, session: Session) -> None:
    """Start a fresh server for the session, run its runs on it, stop it on every path.
    A server that does not start fails this session's runs only."""
    experiment = execution.experiment
    stop_if_cancelled(experiment)
    if not Run.objects.filter(id__in=[run.id for run in session.runs], status=Run.Status.QUEUED).exists():
        # Claimed elsewhere or closed since the sessions were listed: a server would start
        # (tens of seconds on a GPU host) only to find nothing to run.
        logger.info("%s: none of its %d runs is queued any more; no server started", session.arm, len(session.runs))
        return
    levels = profiling.profiled_levels(experiment, session.runs)
    synthetic = session.synthetic_acceptance_length
    launch = session_launch(
        execution.server_host, experiment, session.arm, name=session.name, synthetic_acceptance_length=synthetic,
        profiled=bool(levels),
    )  # fmt: skip
    logger.info("starting vLLM for %s (%d runs): %s", session.arm, len(session.runs), " ".join(launch.args))
    binding = execution.server_host.binding
    try:
        launch_check(launch, session.arm, synthetic)
        with VllmServer(launch, stop_check=lambda: stop_if_cancelled(experiment)) as server:
            execution.models_ready()
            environment = capture_environment(
                vllm_python=settings.SPECDASH_VLLM_PYTHON,
                server_command=launch.args,
                cpu_binding=binding.record() | {"placement": server.placed} if binding else {},
                engine=read_engine_report(launch.log_path).record(),
            )
            session_runs(server, execution, session, environment)
            if levels:
                stop_if_cancelled(experiment)
                profiling.session_profile(server.base_url, experiment, session.arm, levels, execution.prompts)
    except ServerStartError as exc:
        logger.error("vLLM did not start for %s: %s", session.arm, exc)
        error = f"The vLLM server did not start: {exc.message}"
        error += f"\n\nLast lines of its log:\n{exc.log_tail}" if exc.log_tail else ""
        runs_fail(session.runs, error, claim=execution.claim)


def session_runs(server: VllmServer, execution: Execution, session: Session, environment: dict) -> None:
    """Run the session's runs on its server, in order. The server's start-up is device time
    (experiments/analysis/device_time.py): the first run this worker claims records it."""
    unrecorded = server.start_s
    for run in session.runs:
        stop_if_cancelled(execution.experiment)
        if run_execute(server, execution, run, environment, server_start_s=unrecorded):
            unrecorded = None
