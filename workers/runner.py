"""Execute an experiment on this worker in the order of its randomised block schedule.

Runs are grouped into server sessions: with a server per block, one arm in one block;
otherwise one arm across all its blocks. Every session starts a fresh vLLM server, runs
its runs in their recorded level order, and stops the server. Each run's requests are
ingested as soon as the run ends. All runs of an experiment execute on this one host, so
that the arms share hardware, runtime and settings.
"""

import contextlib
import itertools
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connection

from experiments import lifecycle
from experiments.execution import dispatch, services, worker_queues
from experiments.measurement.planning import limits
from experiments.models import Arm, Experiment, IllegalTransition, Run
from experiments.prompts.catalog import experiment_requests
from experiments.rules.model_paths import model_path_refusal
from workers.host.envinfo import capture_environment, gpu_info
from workers.liveness import LeaseBeat
from workers.measure.loadgen import LoadResult, Prompt, run_load_sync
from workers.measure.prom import SpecCounters
from workers.server import affinity, method_support, profiling, synthetic_acceptance
from workers.server.chat_template import chat_template_for
from workers.server.engine_report import read_engine_report
from workers.server.model_prefetch import ModelPrefetch
from workers.server.vllm_server import (
    ServerStartError,
    VllmServer,
    build_server_args,
    cuda_visible,
    free_port,
    model_paths,
    profiler_args,
)
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
    binding: affinity.CpuBinding | None
    # The later servers' model files, fetched while the first server starts; awaited
    # before the first measured run (workers/server/model_prefetch.py).
    models: ModelPrefetch | None = None

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


class SyntheticAcceptanceUnsupported(ServerStartError):
    """A synthetic acceptance session on a host whose vLLM refuses it: no server is started."""


class ModelRefused(ServerStartError):
    """A model this worker's settings do not allow (experiments/rules/model_paths.py): no server
    is started. The form applied the same rule, but with the web server's settings and at
    submission; an experiment run again, or a worker configured apart, is checked here."""


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


def experiment_sessions(experiment: Experiment) -> list[Session]:
    """The experiment's queued runs as server sessions, in schedule order: block by block
    with a server per block, else arm by arm (each arm's blocks on its one server)."""
    queued = experiment.runs.filter(status=Run.Status.QUEUED).select_related("arm")
    runs = queued.in_execution_order(server_per_block=experiment.server_per_block)
    return sessions_group(runs, experiment.server_per_block)


def server_log_path(experiment: Experiment, session: Session) -> Path:
    path = settings.DATA_DIR / "server-logs" / f"experiment-{experiment.id}" / f"{session.name}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def server_pid_dir(worker_name: str) -> Path:
    """Where this worker records the servers it runs, so its successor can stop orphans."""
    return settings.DATA_DIR / "server-pids" / worker_name


def arm_model(experiment: Experiment, arm: Arm) -> str:
    """The model the arm's server serves: the target, or for a calibration arm the draft
    model it measures, alone."""
    return arm.params["model"] if arm.is_calibration else experiment.target_model


def arm_server_args(
    experiment: Experiment, arm: Arm, port: int, synthetic_acceptance_length: float | None = None
) -> list[str]:
    model = arm_model(experiment, arm)
    return build_server_args(
        python=settings.SPECDASH_VLLM_PYTHON,
        model=model,
        port=port,
        dtype=experiment.dtype,
        max_model_len=experiment.max_model_len,
        seed=experiment.seed,
        speculative_config=arm.speculative_config()
        if synthetic_acceptance_length is None
        else arm.synthetic_config(synthetic_acceptance_length),
        chat_template=chat_template_for(model) if experiment.endpoint == Experiment.Endpoint.CHAT else None,
        kv_cache_bytes=None
        if cuda_visible(settings.SPECDASH_VLLM_PYTHON)
        else round(settings.SPECDASH_CPU_KVCACHE_GIB * 2**30),
        tensor_parallel_size=experiment.tensor_parallel_size,
        engine_settings=experiment.server_setting_values,
    )


def experiment_models(experiment: Experiment, sessions: list[Session]) -> list[str]:
    """The models the sessions' servers load (targets, draft models, heads), in order."""
    return [model for session in sessions for model in model_paths(arm_server_args(experiment, session.arm, 0))]


def models_prefetch(experiment: Experiment, sessions: list[Session]) -> ModelPrefetch:
    log_path = settings.DATA_DIR / "server-logs" / f"experiment-{experiment.id}" / "model-prefetch.log"
    return ModelPrefetch(
        experiment_models(experiment, sessions), python=settings.SPECDASH_VLLM_PYTHON, log_path=log_path
    )


def worker_binding() -> affinity.CpuBinding | None:
    """How to split this host's cores between the client and the engine; None on GPU hosts."""
    return None if cuda_visible(settings.SPECDASH_VLLM_PYTHON) else affinity.plan_binding(affinity.usable_cores())


def server_env(binding: affinity.CpuBinding | None) -> dict[str, str | None]:
    """The vLLM server's extra environment on CPU hosts (workers/affinity.server_env), with
    fork as the way it starts its engine process where SPECDASH_CPU_FORK_ENGINE says so."""
    if cuda_visible(settings.SPECDASH_VLLM_PYTHON):
        return {}
    return affinity.server_env(binding, fork_engine=settings.SPECDASH_CPU_FORK_ENGINE)


def server_placement(binding: affinity.CpuBinding | None) -> affinity.ServerPlacement | None:
    """Where the server's API server and engine core run beside the client and the engine's
    threads, on CPU hosts (workers/server/affinity.py)."""
    return affinity.ServerPlacement(binding) if binding else None


def client_cores(binding: affinity.CpuBinding | None) -> contextlib.AbstractContextManager:
    """Keep the load generator on its own cores while it measures."""
    return affinity.pinned(binding.client_cores) if binding else contextlib.nullcontext()


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
        seconds_per_token=settings.SPECDASH_RUN_SECONDS_PER_TOKEN,
    )


def run_measure(server: VllmServer, execution: Execution, run: Run) -> tuple[LoadResult, SpecCounters]:
    """Warm up on the warm-up prompts, then drive the measured ones; the load generator
    reads the spec counters around the measured requests only. A run past its time limit
    (derived from the experiment's size) fails; a server that died under it is replaced."""
    experiment = execution.experiment
    reporter = ProgressReporter(run, experiment.num_prompts)
    limit_s = run_limit_s(experiment, run)
    with client_cores(execution.binding):
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
    claimed = services.run_claim(
        run_id=run.id,
        worker_host=execution.worker_host,
        worker_name=execution.worker_name,
        server_start_s=server_start_s,
    )
    if not claimed:
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


def runs_fail(runs: list[Run], error: str, *, worker_host: str, worker_name: str) -> None:
    for run in runs:
        if services.run_claim(run_id=run.id, worker_host=worker_host, worker_name=worker_name):
            services.run_mark_failed(run_id=run.id, error=error)


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


def check_synthetic_support(session: Session) -> None:
    if session.synthetic_acceptance_length is None:
        return
    reason = synthetic_acceptance.unsupported_reason(settings.SPECDASH_VLLM_PYTHON)
    if reason is not None:
        raise SyntheticAcceptanceUnsupported(f"{reason}. Run the sweep on a GPU worker's queue.", log_tail="")


def check_models_allowed(args: list[str]) -> None:
    for model in model_paths(args):
        refusal = model_path_refusal(model)
        if refusal is not None:
            raise ModelRefused(f"This worker does not load {model}: {refusal}", log_tail="")


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
    args = arm_server_args(experiment, session.arm, free_port(), session.synthetic_acceptance_length)
    levels = profiling.profiled_levels(experiment, session.runs)
    args += profiler_args(profiling.profile_dir(experiment, session.arm)) if levels else []
    logger.info("starting vLLM for %s (%d runs): %s", session.arm, len(session.runs), " ".join(args))
    try:
        check_models_allowed(args)
        check_synthetic_support(session)
        method_support.check(session.arm.method, settings.SPECDASH_VLLM_PYTHON)
        server = VllmServer(
            args,
            log_path=server_log_path(experiment, session),
            env=server_env(execution.binding) | (profiling.SCOPES_ENV if levels else {}),
            start_timeout_s=worker_queues.server_start_timeout_s(experiment.worker_queue),
            pid_dir=server_pid_dir(execution.worker_name),
            placement=server_placement(execution.binding),
            stop_check=lambda: stop_if_cancelled(experiment),
        )
        with server:
            execution.models_ready()
            environment = capture_environment(
                vllm_python=settings.SPECDASH_VLLM_PYTHON,
                server_command=args,
                cpu_binding=execution.binding.record() | {"placement": server.placed} if execution.binding else {},
                engine=read_engine_report(server.log_path).record(),
            )
            session_runs(server, execution, session, environment)
            if levels:
                stop_if_cancelled(experiment)
                profiling.session_profile(server.base_url, experiment, session.arm, levels, execution.prompts)
    except ServerStartError as exc:
        logger.error("vLLM did not start for %s: %s", session.arm, exc)
        error = f"The vLLM server did not start: {exc.message}"
        error += f"\n\nLast lines of its log:\n{exc.log_tail}" if exc.log_tail else ""
        runs_fail(session.runs, error, worker_host=execution.worker_host, worker_name=execution.worker_name)


def session_runs(server: VllmServer, execution: Execution, session: Session, environment: dict) -> None:
    """Run the session's runs on its server, in order. The server's start-up is device time
    (experiments/analysis/device_time.py): the first run this worker claims records it."""
    unrecorded = server.start_s
    for run in session.runs:
        stop_if_cancelled(execution.experiment)
        if run_execute(server, execution, run, environment, server_start_s=unrecorded):
            unrecorded = None


def experiment_prompts_or_fail(experiment: Experiment, *, worker_host: str, worker_name: str) -> list[Prompt] | None:
    """The prompts of every run, or None after failing the queued runs when there are none
    (e.g. the prompt set changed since the experiment was created)."""
    try:
        return experiment_requests(experiment)
    except ValueError as exc:
        queued = list(experiment.runs.filter(status=Run.Status.QUEUED))
        runs_fail(queued, f"No prompts: {exc}", worker_host=worker_host, worker_name=worker_name)
        return None


def tensor_parallel_refusal(experiment: Experiment) -> str | None:
    """Why this worker cannot start the experiment's servers across the GPUs it asks for, or
    None. A worker sees the GPUs CUDA_VISIBLE_DEVICES gives it (docs/gpu-hosts.md)."""
    wanted = experiment.tensor_parallel_size
    if wanted <= 1:
        return None
    visible = gpu_info(settings.SPECDASH_VLLM_PYTHON)["gpu_count"]
    if visible >= wanted:
        return None
    return (
        f"Tensor parallel size {wanted} needs a worker that sees {wanted} GPUs; this one sees {visible}. "
        "Send the experiment to a queue whose workers each own that many (docs/gpu-hosts.md)."
    )


def experiment_run_all(experiment_id: int, *, worker_host: str, worker_name: str) -> None:
    """Execute the experiment if no other live worker process holds it. Results a dead
    process of this worker left in its spool are stored first, and the runs a dead holder
    left running are queued again: they are this process's now."""
    experiment = Experiment.objects.get(id=experiment_id)
    if not experiment.is_active:
        logger.info("experiment %s is %s; nothing to do", experiment_id, experiment.status)
        return
    owner = dispatch.lease_owner_name(worker_name, worker_host)
    stale = timedelta(seconds=settings.SPECDASH_HEARTBEAT_STALE_S)
    if not dispatch.experiment_lease_take(experiment_id=experiment_id, owner=owner, stale_after=stale):
        logger.info("experiment %s is held by another live worker process; leaving it", experiment_id)
        return
    try:
        with LeaseBeat(experiment_id=experiment_id, owner=owner):
            spool.spool_flush(worker_name=worker_name, wait_s=settings.SPECDASH_DB_OUTAGE_WAIT_S)
            dispatch.runs_take_back(experiment_id=experiment_id, reason="Its worker process died")
            experiment_execute_held(experiment, worker_host=worker_host, worker_name=worker_name)
    finally:
        dispatch.experiment_lease_release(experiment_id=experiment_id, owner=owner)


def blocks_execute(experiment: Experiment, prompts: list[Prompt], *, worker_host: str, worker_name: str) -> None:
    """Run the queued sessions; then, while the design adds a block (a primary cell is still
    open, experiments/analysis/continuation.py), run the new block's sessions too. Asked also
    when nothing was queued: a holder that died between two blocks left none."""
    sessions = experiment_sessions(experiment)
    with models_prefetch(experiment, sessions) as models:
        execution = Execution(experiment, prompts, worker_host, worker_name, worker_binding(), models)
        while True:
            for session in sessions:
                session_execute(execution, session)
            stop_if_cancelled(experiment)
            if not lifecycle.experiment_block_add(experiment=experiment):
                return
            sessions = experiment_sessions(experiment)


def experiment_execute_held(experiment: Experiment, *, worker_host: str, worker_name: str) -> None:
    experiment_id = experiment.id
    try:
        services.experiment_mark_running(experiment=experiment)
        prompts = experiment_prompts_or_fail(experiment, worker_host=worker_host, worker_name=worker_name)
        refusal = tensor_parallel_refusal(experiment)
        if refusal is not None:
            # Before any server: vLLM would fail to start, once per arm and block.
            queued = list(experiment.runs.filter(status=Run.Status.QUEUED))
            runs_fail(queued, refusal, worker_host=worker_host, worker_name=worker_name)
        elif prompts is not None:
            blocks_execute(experiment, prompts, worker_host=worker_host, worker_name=worker_name)
        if not experiment.runs.open().exists():
            lifecycle.experiment_finish(experiment=experiment)
    except (RunCancelled, IllegalTransition) as stop:
        # Cancelled between runs, during a load, or before the experiment could start or finish.
        if not experiment_cancelled(experiment_id):
            raise
        logger.info("experiment %s was cancelled; stopped (%s)", experiment_id, stop)
