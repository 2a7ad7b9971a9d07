"""A server session's launch: how one of an experiment's vLLM servers starts on this worker,
decided in one place before any process starts.

The runner groups an experiment's runs into sessions (workers/runner.py) and asks here for
each session's ServerLaunch (workers/server/command.py), which VllmServer runs and does not
change: the command (the arm's model and speculative config, the experiment's settings, the
KV cache's size on CPU hosts, the profiler where the session profiles), the environment and
the CPU placement (workers/server/affinity.py), the log and pid paths under the data folder,
and the start time-out of the experiment's queue. The checks made before a server starts are
here too: a model this worker's settings do not allow, or a method or a synthetic sweep its vLLM
cannot run, raises a ServerStartError (launch_check), which fails the session's runs without a
server; an experiment that asks for more GPUs than the worker sees is refused before its first
session (tensor_parallel_refusal).

What a launch takes from the worker is its ServerHost, made once per experiment execution;
everything else comes from the experiment and the arm, so a worker that claims a single block
makes that block's launches from its own ServerHost. A queue's limits are read by the
experiment's queue name in experiments/execution/worker_queues.py, where the form reads them
too: the start time-out and the seconds per token of the run limit (workers/sessions.py, run_limit_s).
"""

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from experiments.execution import worker_queues
from experiments.models import Arm, Experiment
from experiments.rules import speculation_targets
from experiments.rules.model_paths import model_path_refusal
from workers.host.envinfo import cuda_visible, gpu_info
from workers.server import affinity, method_support, profiling, synthetic_acceptance
from workers.server.chat_template import chat_template_for
from workers.server.command import ServerLaunch, build_server_args, free_port, model_paths, profiler_args
from workers.server.model_prefetch import ModelPrefetch
from workers.server.vllm_server import ServerStartError


class SyntheticAcceptanceUnsupported(ServerStartError):
    """A synthetic acceptance session on a host whose vLLM refuses it: no server is started."""


class TargetRefused(ServerStartError):
    """An arm whose method cannot run beside the experiment's target, as this worker's disk shows
    it (experiments/rules/speculation_targets.py: MTP without MTP layers, a draft model at another
    tensor parallel size than the target's): no server is started."""


class ModelRefused(ServerStartError):
    """A model this worker's settings do not allow (experiments/rules/model_paths.py): no server
    is started. The form applied the same rule, but with the web server's settings and at
    submission; an experiment run again, or a worker configured apart, is checked here."""


@dataclass(frozen=True)
class ServerHost:
    """What every server of one worker process shares: the folder that records them while they
    run (its successor stops the ones it leaves: workers/server/orphans.py), and how the host's
    cores are split between the load generator and the engine (None on GPU hosts)."""

    pid_dir: Path
    binding: affinity.CpuBinding | None

    @classmethod
    def of_worker(cls, worker_name: str) -> "ServerHost":
        return cls(pid_dir=server_pid_dir(worker_name), binding=worker_binding())


def session_launch(
    host: ServerHost,
    experiment: Experiment,
    arm: Arm,
    *,
    name: str,
    synthetic_acceptance_length: float | None = None,
    profiled: bool = False,
) -> ServerLaunch:
    """The launch of the server of one session (`name`, as its log is called), on a free port;
    `profiled`: the session profiles after its runs (workers/server/profiling.py)."""
    args = arm_server_args(experiment, arm, free_port(), synthetic_acceptance_length)
    env = server_env(host.binding)
    if profiled:
        args += profiler_args(profiling.profile_dir(experiment, arm))
        env |= profiling.SCOPES_ENV
    return ServerLaunch(
        args,
        log_path=server_log_path(experiment, name),
        env=env,
        start_timeout_s=worker_queues.server_start_timeout_s(experiment.worker_queue),
        pid_dir=host.pid_dir,
        placement=server_placement(host.binding),
    )


def launch_check(launch: ServerLaunch, arm: Arm, synthetic_acceptance_length: float | None) -> None:
    """Refuse a launch this worker must not or cannot make, before any process starts."""
    for model in model_paths(launch.args):
        refusal = model_path_refusal(model)
        if refusal is not None:
            raise ModelRefused(f"This worker does not load {model}: {refusal}", log_tail="")
    if synthetic_acceptance_length is not None:
        reason = synthetic_acceptance.unsupported_reason(settings.SPECDASH_VLLM_PYTHON)
        if reason is not None:
            raise SyntheticAcceptanceUnsupported(f"{reason}. Run the sweep on a GPU worker's queue.", log_tail="")
    method_support.check(arm.method, settings.SPECDASH_VLLM_PYTHON)
    target_check(arm)


def target_check(arm: Arm) -> None:
    """The doors checked the arm beside its target where the web server could read the target;
    the worker reads its own copy, and the experiment may predate the rule."""
    if arm.is_calibration:
        return  # it serves its draft model alone
    experiment = arm.experiment
    problem = speculation_targets.target_problem(arm.method, experiment.target_model)
    draft = arm.params.get("draft_tensor_parallel_size")
    if problem is None and isinstance(draft, int):
        tp = speculation_targets.draft_tensor_parallel_problem(
            arm.method, draft, target=experiment.tensor_parallel_size
        )
        problem = f"its draft tensor parallel size {tp}" if tp else None
    if problem:
        raise TargetRefused(f"{arm.label}: {problem}.", log_tail="")


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


def arm_model(experiment: Experiment, arm: Arm) -> str:
    """The model the arm's server serves: the target, or for a calibration arm the draft
    model it measures, alone."""
    return str(arm.params["model"]) if arm.is_calibration else experiment.target_model


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
        # The experiment's own KV cache size goes with its settings; else a CPU worker's default.
        kv_cache_bytes=None
        if cuda_visible(settings.SPECDASH_VLLM_PYTHON) or experiment.kv_cache_memory_bytes
        else round(settings.SPECDASH_CPU_KVCACHE_GIB * 2**30),
        tensor_parallel_size=experiment.tensor_parallel_size,
        engine_settings=experiment.server_setting_values,
    )


def server_env(binding: affinity.CpuBinding | None) -> dict[str, str | None]:
    """The vLLM server's extra environment on CPU hosts (workers/server/affinity.server_env), with
    fork as the way it starts its engine process where SPECDASH_CPU_FORK_ENGINE says so."""
    if cuda_visible(settings.SPECDASH_VLLM_PYTHON):
        return {}
    return affinity.server_env(binding, fork_engine=settings.SPECDASH_CPU_FORK_ENGINE)


def server_placement(binding: affinity.CpuBinding | None) -> affinity.ServerPlacement | None:
    """Where the server's API server and engine core run beside the client and the engine's
    threads, on CPU hosts (workers/server/affinity.py)."""
    return affinity.ServerPlacement(binding) if binding else None


def worker_binding() -> affinity.CpuBinding | None:
    """How to split this host's cores between the client and the engine; None on GPU hosts."""
    return None if cuda_visible(settings.SPECDASH_VLLM_PYTHON) else affinity.plan_binding(affinity.usable_cores())


def client_cores(binding: affinity.CpuBinding | None) -> contextlib.AbstractContextManager[None]:
    """Keep the load generator on its own cores while it measures."""
    return affinity.pinned(binding.client_cores) if binding else contextlib.nullcontext()


def experiment_logs(experiment: Experiment) -> Path:
    return Path(settings.DATA_DIR) / "server-logs" / f"experiment-{experiment.id}"


def server_log_path(experiment: Experiment, name: str) -> Path:
    path = experiment_logs(experiment) / f"{name}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def server_pid_dir(worker_name: str) -> Path:
    """Where a worker records the servers it runs, so that its successor can stop orphans."""
    return Path(settings.DATA_DIR) / "server-pids" / worker_name


def experiment_models(experiment: Experiment, arms: Iterable[Arm]) -> list[str]:
    """The models the arms' servers load (targets, draft models, heads), in order."""
    return [model for arm in arms for model in model_paths(arm_server_args(experiment, arm, 0))]


def models_prefetch(experiment: Experiment, arms: Iterable[Arm]) -> ModelPrefetch:
    """The arms' model files, fetched while the first server starts (workers/server/model_prefetch.py)."""
    return ModelPrefetch(
        experiment_models(experiment, arms),
        python=settings.SPECDASH_VLLM_PYTHON,
        log_path=experiment_logs(experiment) / "model-prefetch.log",
    )
