"""Execute an experiment on this worker in the order of its randomised block schedule.

An experiment dispatched by block (issue 38; every experiment with a fresh server per arm and
block since then) is shared by the workers of its queue: each claims one queued block whole,
runs every arm of it back to back on its host as server sessions (workers/sessions.py), closes
it with the look it allows, and claims the next while blocks are queued
(experiments/execution/block_claims.py). A worker whose hardware class differs from the
experiment's is passed over and leaves. So the blocks of one experiment run in parallel on
several hosts of one class, each block's arms on one host.

An experiment without blocks (stored before, or one server per arm for all blocks) is held whole
by one worker process, which runs all its runs on this one host, as before.
"""

import logging
from dataclasses import replace
from datetime import timedelta

from django.conf import settings

from experiments import lifecycle
from experiments.execution import block_claims, dispatch, fleet_capacity, services
from experiments.execution.hardware_class import HardwareClass
from experiments.models import Block, Experiment, IllegalTransition, Run
from experiments.prompts.catalog import experiment_requests
from workers.host import fingerprint
from workers.liveness import LeaseBeat
from workers.measure.loadgen import Prompt
from workers.server.launch import ServerHost, models_prefetch, tensor_parallel_refusal
from workers.sessions import (
    Execution,
    RunCancelled,
    Session,
    experiment_cancelled,
    runs_fail,
    session_execute,
    sessions_group,
    stop_if_cancelled,
    worker_claim,
)
from workers.storage import spool

logger = logging.getLogger(__name__)


def experiment_sessions(experiment: Experiment) -> list[Session]:
    """The experiment's queued runs as server sessions, in schedule order: block by block
    with a server per block, else arm by arm (each arm's blocks on its one server)."""
    queued = experiment.runs.filter(status=Run.Status.QUEUED).select_related("arm")
    runs = queued.in_execution_order(server_per_block=experiment.server_per_block)
    return sessions_group(runs, experiment.server_per_block)


def block_sessions(block: Block) -> list[Session]:
    """The block's queued runs as its server sessions, in its drawn arm order."""
    queued = block_claims.block_runs(block).filter(status=Run.Status.QUEUED).select_related("arm")
    return sessions_group(queued.in_execution_order(server_per_block=True), server_per_block=True)


def experiment_prompts_or_fail(experiment: Experiment, *, worker_host: str, worker_name: str) -> list[Prompt] | None:
    """The prompts of every run, or None after failing the queued runs when there are none
    (e.g. the prompt set changed since the experiment was created)."""
    try:
        return experiment_requests(experiment)
    except ValueError as exc:
        queued = list(experiment.runs.filter(status=Run.Status.QUEUED))
        runs_fail(queued, f"No prompts: {exc}", claim=worker_claim(worker_host, worker_name))
        return None


def experiment_run_all(experiment_id: int, *, worker_host: str, worker_name: str) -> None:
    """Execute the experiment, or the blocks of it this worker can claim."""
    experiment = Experiment.objects.get(id=experiment_id)
    if not experiment.is_active:
        logger.info("experiment %s is %s; nothing to do", experiment_id, experiment.status)
        return
    if block_claims.dispatched_by_block(experiment):
        experiment_blocks_run(experiment, worker_host=worker_host, worker_name=worker_name)
    else:
        experiment_whole_run(experiment, worker_host=worker_host, worker_name=worker_name)


# ---------------------------------------------------------------- one worker holds the experiment


def experiment_whole_run(experiment: Experiment, *, worker_host: str, worker_name: str) -> None:
    """Execute the experiment if no other live worker process holds it. Results a dead
    process of this worker left in its spool are stored first, and the runs a dead holder
    left running are queued again: they are this process's now."""
    experiment_id = experiment.id
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
    arms = [session.arm for session in sessions]
    with models_prefetch(experiment, arms) as models:
        execution = Execution(experiment, prompts, worker_host, worker_name, ServerHost.of_worker(worker_name), models)
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
            runs_fail(queued, refusal, claim=worker_claim(worker_host, worker_name))
        elif prompts is not None:
            blocks_execute(experiment, prompts, worker_host=worker_host, worker_name=worker_name)
        if not experiment.runs.open().exists():
            lifecycle.experiment_finish(experiment=experiment)
    except (RunCancelled, IllegalTransition) as stop:
        # Cancelled between runs, during a load, or before the experiment could start or finish.
        if not experiment_cancelled(experiment_id):
            raise
        logger.info("experiment %s was cancelled; stopped (%s)", experiment_id, stop)


# ---------------------------------------------------------------- the blocks, shared by the fleet


def worker_seat(*, worker_host: str, worker_name: str) -> block_claims.Seat:
    """This worker process as it asks for blocks: name, host, GPUs, hardware class, lease name."""
    hardware = HardwareClass.of(fingerprint.worker_fingerprint(settings.SPECDASH_VLLM_PYTHON))
    owner = dispatch.lease_owner_name(worker_name, worker_host)
    return block_claims.Seat(worker_name, worker_host, fingerprint.gpu_ids(), hardware, owner)


def experiment_blocks_run(experiment: Experiment, *, worker_host: str, worker_name: str) -> None:
    """Claim the experiment's queued blocks one after another and run each whole, unless this
    worker's hardware class is not the experiment's. Results a dead process of this worker left
    in its spool are stored first, and blocks it held are taken over (same host, same GPUs)."""
    seat = worker_seat(worker_host=worker_host, worker_name=worker_name)
    reason = block_claims.class_refusal(experiment_id=experiment.id, seat=seat)
    if reason:
        logger.warning("experiment %s is for another hardware class; leaving it: %s", experiment.id, reason)
        return
    spool.spool_flush(worker_name=worker_name, wait_s=settings.SPECDASH_DB_OUTAGE_WAIT_S)
    try:
        services.experiment_mark_running(experiment=experiment)
        prompts = experiment_prompts_or_fail(experiment, worker_host=worker_host, worker_name=worker_name)
        refusal = tensor_parallel_refusal(experiment)
        if refusal is not None:
            # Before any server: vLLM would fail to start, once per arm and block.
            queued = list(experiment.runs.filter(status=Run.Status.QUEUED))
            runs_fail(queued, refusal, claim=worker_claim(worker_host, worker_name))
        blocks_claim_and_run(experiment, prompts if refusal is None else None, seat)
        experiment_close(experiment)
    except (RunCancelled, IllegalTransition) as stop:
        if not experiment_cancelled(experiment.id):
            raise
        logger.info("experiment %s was cancelled; stopped (%s)", experiment.id, stop)


def blocks_claim_and_run(experiment: Experiment, prompts: list[Prompt] | None, seat: block_claims.Seat) -> None:
    """While the experiment has a block to claim, claim it and run it; when none is queued and
    none in flight, take the look that may add blocks. Without prompts the blocks' runs have
    been failed already: the blocks are claimed and closed, nothing is run."""
    with models_prefetch(experiment, experiment.arms.all() if prompts else []) as models:
        execution = Execution(
            experiment, prompts or [], seat.host, seat.name, ServerHost.of_worker(seat.name), models, owner=seat.owner
        )
        for block in block_claims.blocks_adopt_dead_here(experiment_id=experiment.id, owner=seat.owner):
            logger.warning("%s: its worker process died; taken over by this one", block)
            block_run(execution, block, seat)
        while True:
            claim = block_claims.block_claim(experiment_id=experiment.id, seat=seat)
            if claim.passed_over:
                logger.warning("experiment %s: passed over (%s)", experiment.id, claim.passed_over)
                return
            if claim.block is not None:
                block_run(execution, claim.block, seat)
            elif not look_when_idle(experiment, seat):
                return


def block_run(execution: Execution, block: Block, seat: block_claims.Seat) -> None:
    """Run every queued session of the block on this host, beating its lease, then close it and
    take its look. A block taken back meanwhile (the reaper found its beat stale, during a long
    database outage) is left to the host that measures it again."""
    experiment = execution.experiment
    logger.info("%s: claimed by %s (attempt %s)", block, seat.name, block.attempts)
    try:
        with LeaseBeat(experiment_id=experiment.id, owner=seat.owner, block_id=block.id):
            for session in block_sessions(block):
                stop_if_cancelled(experiment)
                session_execute(replace(execution, block_id=block.id), session)
    except RunCancelled:
        if experiment_cancelled(experiment.id):
            raise
        logger.warning("%s is no longer this worker's; leaving it", block)
        return
    blocks_look(experiment, block.id, seat)


def blocks_look(experiment: Experiment, block_id: int | None, seat: block_claims.Seat) -> int:
    """Close the block (None: none) with its look, and hand the blocks it adds to the other
    workers: this one claims one of them itself. Returns the blocks added."""
    capacity = 1
    if experiment.adds_blocks:
        capacity = fleet_capacity.class_capacity(
            queue=experiment.worker_queue, experiment_id=experiment.id,
            reference=block_claims.experiment_class(experiment.id),
            holders=block_claims.block_holders(experiment.id) | {seat.name},
        )  # fmt: skip
    added = lifecycle.experiment_block_done(experiment=experiment, block_id=block_id, capacity=capacity)
    if added > 1:
        dispatch.experiment_dispatch(experiment=experiment, messages=added - 1)
    return added


def look_when_idle(experiment: Experiment, seat: block_claims.Seat) -> bool:
    """Nothing to claim: when no block is in flight either (the last one was closed by the
    reaper, or every one failed), take the look that may add blocks. True when it added one."""
    if in_flight := block_claims.blocks_in_flight(experiment):
        logger.info("experiment %s: every block is claimed (%d in flight); leaving it", experiment.id, in_flight)
        return False
    return blocks_look(experiment, None, seat) > 0


def experiment_close(experiment: Experiment) -> None:
    """Finish the experiment once none of its runs is left. Another worker may finish it, or
    add a block, at the same moment: then it is not this one's to finish."""
    if experiment.runs.open().exists():
        return
    try:
        lifecycle.experiment_finish(experiment=experiment)
    except IllegalTransition as why:
        logger.info("experiment %s not finished by this worker: %s", experiment.id, why)
