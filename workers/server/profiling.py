"""Profiled intervals: after an arm's measured runs, one short extra interval per level under
vLLM's torch profiler, summarised into where an engine step's time goes.

Only the server of the arm's last block profiles (its levels after its measured runs), so
every other server runs as an unprofiled one does. That server is started with the profiler
configured (workers/server/command.profiler_args) and with vLLM's named scopes around the
model runner's phases (forward, sample, draft: what experiments/measurement/engine/trace_shares.py classifies);
while no profile is being taken those scopes cost a few microseconds per step. Only vLLM's V1
model runner has those scopes: a trace of its V2 runner (vLLM 0.32's default on GPU hosts
with Triton) is stored with its steps and profiled time, its shares empty and the reason in
its error ("not split on this model runner"). The trace stays on the worker's disk under the
experiment's data folder, its path and the shares in the database
(execution.profiled_interval_record). The interval is not a run: its requests
are not stored and no statistic reads it.
"""

import json
import logging
import socket
import urllib.request
import uuid
from pathlib import Path
from typing import TypedDict

from django.conf import settings

from experiments.execution import services as execution
from experiments.execution import worker_queues
from experiments.measurement.engine import trace_shares as profiles
from experiments.measurement.planning import limits
from experiments.models import Arm, Experiment, ProfiledInterval, Run
from workers.measure.loadgen import LoadResult, Prompt, run_load_sync

logger = logging.getLogger(__name__)

# A few requests: enough for a full batch at the level, and a trace small enough to write
# and read in seconds.
MIN_REQUESTS = 4
# /stop_profile answers once the worker has written its trace, which on CPU hosts can take
# tens of seconds for a trace of some thousand steps.
STOP_TIMEOUT_S = 600.0
# vLLM's V1 model runner wraps its phases in torch.profiler.record_function only when this is
# set (vllm/v1/utils.py, record_function_or_nullcontext); the V2 runner has no such scopes.
SCOPES_ENV = {"VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1"}


class _IntervalOf(TypedDict):
    """What every record of one profiled interval names."""

    experiment: Experiment
    arm: Arm
    level: int
    worker_host: str


def profiled_levels(experiment: Experiment, runs: list[Run]) -> list[int]:
    """The levels a session profiles after its runs: those of the arm's last block it runs,
    in their order, when the experiment asks for profiles. A synthetic acceptance sweep's
    server is not the arm's own: it does not profile."""
    if not experiment.profile_intervals:
        return []
    return [
        run.concurrency
        for run in runs
        if run.repetition == experiment.repetitions and run.synthetic_acceptance_length is None
    ]


def profile_dir(experiment: Experiment, arm: Arm) -> Path:
    return settings.DATA_DIR / "profiles" / f"experiment-{experiment.id}" / f"arm-{arm.position}-{arm.id}"


def interval_prompts(prompts: list[Prompt], *, warmup: int, level: int) -> list[Prompt]:
    """The first measured prompts, enough for one full batch at the level (at least MIN_REQUESTS)."""
    measured = prompts[warmup:]
    return measured[: max(MIN_REQUESTS, level)]


def _post(url: str, body: dict | None, timeout_s: float) -> None:
    data = json.dumps(body).encode() if body is not None else b""
    request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        response.read()


def trace_files(directory: Path, prefix: str) -> list[Path]:
    """The traces one profiling session wrote: one per engine worker (rank)."""
    return sorted(directory.glob(f"{prefix}_*.pt.trace.json.gz"))


def profiled_load(base_url: str, *, prefix: str, load_args: dict) -> LoadResult:
    """The load between /start_profile and /stop_profile; the profile is stopped on every path."""
    _post(f"{base_url}/start_profile", {"profile_prefix": prefix}, timeout_s=60.0)
    try:
        return run_load_sync(base_url=base_url, model="target", warmup=0, **load_args)
    finally:
        _post(f"{base_url}/stop_profile", None, timeout_s=STOP_TIMEOUT_S)


def interval_profile(base_url: str, experiment: Experiment, arm: Arm, level: int, prompts: list[Prompt]) -> None:
    """Run and store one profiled interval; a failure is recorded on it, never raised."""
    directory = profile_dir(experiment, arm)
    # Unique, so that a trace left by an earlier interval (a retried session, or another
    # database's experiment of the same id on this disk) is never read as this one's.
    prefix = f"level-{level}-{uuid.uuid4().hex[:12]}"
    chosen = interval_prompts(prompts, warmup=experiment.warmup_requests, level=level)
    size = limits.Size(warmup=0, prompts=len(chosen), max_tokens=experiment.max_tokens, request_rate=None)
    load_args = {
        "prompts": chosen, "max_tokens": experiment.max_tokens, "temperature": experiment.temperature,
        "top_p": experiment.top_p, "seed": experiment.seed, "ignore_eos": experiment.ignore_eos,
        "concurrency": level,
        "time_limit_s": limits.run_time_limit_s(
            size, concurrency=level, seconds_per_token=worker_queues.seconds_per_token(experiment.worker_queue)
        ),
    }  # fmt: skip
    record: _IntervalOf = {"experiment": experiment, "arm": arm, "level": level, "worker_host": socket.gethostname()}
    try:
        load = profiled_load(base_url, prefix=prefix, load_args=load_args)
        files = trace_files(directory, prefix)
        if not files:
            raise FileNotFoundError(f"vLLM wrote no trace named {prefix}_* into {directory}")
        summary = profiles.summarise_files(files)
    except profiles.TraceError as exc:  # the trace says why it holds no step: that is the whole message
        logger.warning("profiled interval of %s at %d: %s", arm, level, exc)
        execution.profiled_interval_record(**record, requests=len(chosen), error=str(exc))
        return
    except Exception as exc:
        logger.exception("profiled interval of %s at %d failed", arm, level)
        execution.profiled_interval_record(**record, requests=len(chosen), error=f"{type(exc).__name__}: {exc}")
        return
    execution.profiled_interval_record(
        **record,
        requests=len(load.requests),
        completed=sum(1 for r in load.requests if not r.error),
        duration_s=load.duration_s,
        trace_path=str(files[0].relative_to(settings.DATA_DIR)),
        trace_bytes=sum(path.stat().st_size for path in files),
        summary=summary,
        error=summary.not_split_reason,
    )


def session_profile(base_url: str, experiment: Experiment, arm: Arm, levels: list[int], prompts: list[Prompt]) -> None:
    """Profile the levels not profiled yet (a retried session does not profile twice)."""
    done = set(ProfiledInterval.objects.filter(arm=arm).values_list("concurrency", flat=True))
    for level in levels:
        if level not in done:
            interval_profile(base_url, experiment, arm, level, prompts)
