"""What the pages read about experiments: the list, and an experiment's protocol, environment,
runs and progress. The results block's data is in experiments/results/block_selectors.py, downloads in
experiments/results/exports.py."""

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Prefetch, Q, QuerySet
from django.shortcuts import get_object_or_404

from experiments.analysis import engine_decisions as engine
from experiments.analysis import host_states
from experiments.execution import worker_queues
from experiments.models import (
    Arm,
    EnvironmentSnapshot,
    Experiment,
    ExperimentAnalysis,
    Run,
)
from experiments.rules import commands as shell


def experiment_list(*, user, status: str = "", owner=None, search: str = "") -> QuerySet[Experiment]:
    """The experiments `user` may see, newest first, with owner, team, arms and run counts
    loaded in a fixed number of queries."""
    experiments = (
        Experiment.objects.visible_to(user)
        .select_related("owner", "team")
        .prefetch_related(Prefetch("arms", queryset=Arm.objects.order_by("position")))
        .annotate(
            runs_total=Count("runs"),
            runs_done=Count("runs", filter=~Q(runs__status__in=Run.OPEN_STATUSES)),
        )
        .order_by("-created_at", "-id")
    )
    if status:
        experiments = experiments.filter(status=status)
    if owner is not None:
        experiments = experiments.filter(owner=owner)
    if search:
        experiments = experiments.filter(Q(name__icontains=search) | Q(target_model__icontains=search))
    return experiments


@dataclass(frozen=True)
class ArmProtocol:
    arm: Arm
    speculative_config_json: str
    # Every distinct command line its servers ran (the port, which each server picks, shown as <port>).
    server_commands: list[str] = field(default_factory=list)
    # What vLLM decided for its servers (each distinct one), and where that differs from the baseline's.
    engine_decisions: list[engine.EngineDecision] = field(default_factory=list)
    engine_flags: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Progress:
    total: int
    queued: int
    running: int
    succeeded: int
    failed: int
    cancelled: int

    @property
    def done(self) -> int:
        return self.succeeded + self.failed + self.cancelled


def _without_port(command: list[str]) -> list[str]:
    """A server command with its port shown as <port>: each server of an arm (one per block)
    gets a free port, and the commands are otherwise the same."""
    return ["<port>" if index and command[index - 1] == "--port" else part for index, part in enumerate(command)]


def experiment_arms(*, experiment: Experiment) -> list[ArmProtocol]:
    snapshots = EnvironmentSnapshot.objects.filter(run__experiment=experiment)
    commands = defaultdict(set)
    for arm_id, command in snapshots.values_list("run__arm_id", "server_command").distinct():
        commands[arm_id].add(shell.shell_join(_without_port(command)))
    arms = list(experiment.arms.order_by("position"))
    decisions = engine.arm_decisions(experiment=experiment)
    baseline = next((decisions.get(arm.id, []) for arm in arms if arm.is_baseline), [])
    return [
        ArmProtocol(
            arm=arm,
            speculative_config_json=json.dumps(arm.speculative_config()) if arm.is_speculative else "",
            server_commands=sorted(commands[arm.id]),
            engine_decisions=decisions.get(arm.id, []),
            engine_flags=engine.arm_flags(arm, decisions.get(arm.id, []), baseline),
        )
        for arm in arms
    ]


@dataclass(frozen=True)
class Environment:
    """The distinct values the runs' environment snapshots recorded: one each when all arms agree."""

    vllm: list[str]
    torch: list[str]
    python: list[str]
    hardware: list[str]
    hosts: list[str]
    host_state: str = ""  # how busy the host was over the runs (experiments/analysis/host_states.py)
    host_definition: str = host_states.DEFINITION


def _hardware(snapshot: Mapping[str, Any]) -> str:
    if snapshot["gpu_count"]:
        memory = f", {snapshot['gpu_memory_mb']} MB" if snapshot["gpu_memory_mb"] else ""
        return (
            f"{snapshot['gpu_count']} × {snapshot['gpu_name']}{memory}, driver {snapshot['gpu_driver'] or '?'}, "
            f"CUDA {snapshot['cuda_version'] or '?'}"
        )
    cores = f", {snapshot['cpu_count']} cores" if snapshot["cpu_count"] else ""
    return f"CPU only: {snapshot['cpu_model'] or 'unknown CPU'}{cores}"


def experiment_environment(*, experiment: Experiment) -> Environment | None:
    """What the runs ran on, from their environment snapshots; None before any run recorded one."""
    snapshots: list[Mapping[str, Any]] = list(
        EnvironmentSnapshot.objects.filter(run__experiment=experiment)
        .values(
            "vllm_version",
            "torch_version",
            "python_version",
            "host_name",
            "cpu_model",
            "cpu_count",
            "gpu_name",
            "gpu_count",
            "gpu_memory_mb",
            "gpu_driver",
            "cuda_version",
        )
        .distinct()
    )
    if not snapshots:
        return None

    def distinct(key):
        return sorted({s[key] or "unknown" for s in snapshots})

    return Environment(
        vllm=distinct("vllm_version"),
        torch=distinct("torch_version"),
        python=distinct("python_version"),
        hardware=sorted({_hardware(s) for s in snapshots}),
        hosts=distinct("host_name"),
        host_state=host_states.card_sentence(host_states.host_runs(experiment)),
    )


def experiment_runs(*, experiment: Experiment) -> QuerySet[Run]:
    """The runs in the order the worker executes them: the block schedule."""
    runs = experiment.runs.select_related("arm")
    return runs.in_execution_order(server_per_block=experiment.server_per_block)


def experiment_workers(*, experiment: Experiment) -> list[str]:
    """The Celery workers (node names) that claimed its runs. One, unless a worker died
    mid-experiment and another took the rest over (experiments/execution/dispatch.py)."""
    names = experiment.runs.exclude(worker_name="").values_list("worker_name", flat=True)
    return sorted(set(names))


def experiment_progress(*, experiment: Experiment) -> Progress:
    counts = experiment.runs.aggregate(
        total=Count("id"),
        **{status: Count("id", filter=Q(status=status)) for status in Run.Status.values},
    )
    return Progress(**counts)


def experiment_queue_notice(*, experiment: Experiment) -> str | None:
    """While the experiment waits or runs: that no live worker listens on its queue, or that
    it cannot be told, or that only CPU workers serve a synthetic sweep still to run. An
    experiment that ended asks nothing of the workers."""
    if not experiment.is_active:
        return None
    notice = worker_queues.no_worker_notice(experiment.worker_queue)
    if notice is None and experiment.runs.synthetic().open().exists():
        notice = worker_queues.synthetic_sweep_notice(experiment.worker_queue)
    return notice


def sweep_cpu_only_queues(*, experiment: Experiment) -> tuple[str, ...]:
    """The live queues where this experiment's synthetic sweep would fail if it ran again there
    (only CPU workers: worker_queues.synthetic_sweep_notice); none when it has no sweep."""
    if not any(arm.synthetic_sweep for arm in experiment.arms.all()):
        return ()
    return worker_queues.live_queues().cpu_only_names


def experiment_warnings(*, experiment: Experiment, analysis: ExperimentAnalysis | None = None) -> list[str]:
    """The benchmarking traps this experiment walks into (docs/metrics.md). Once the
    analysis exists it holds them all, with what the measurements added."""
    if analysis is None:
        return experiment.protocol_warnings()
    return list(analysis.warnings)


def experiment_for_user(*, user, pk: int) -> Experiment:
    """The experiment if the user may see it (experiments/teams.py); a 404 for another team's,
    which does not tell whether it exists. Login is enforced by middleware."""
    experiments = Experiment.objects.visible_to(user).select_related("owner", "origin", "cancelled_by", "team")
    return get_object_or_404(experiments, pk=pk)
