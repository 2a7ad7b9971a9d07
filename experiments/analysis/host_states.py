"""The host's state over an experiment's runs (RunSummary.host_*, experiments/measurement/engine/
host_load.py): what the protocol card says of it, the runs under foreign load the page flags like
runs with a distorted stream, and the mark on the experiment's words when its blocks ran under
different host states (issue 36: the same demo read "not worth it" under load and 1.24× quiet,
while its A/A replicate read 1.03× both times)."""

from collections import defaultdict
from dataclasses import dataclass

from experiments.measurement.engine import host_load
from experiments.models import Experiment, RunSummary

DEFINITION = (
    "read from /proc (and nvidia-smi) just before and just after each run's measured requests. Other processes' "
    "share: the CPU time the host spent busy, less what the run's own processes took (the worker with its load "
    "generator, its vLLM server and the server's engine), over every core for the run's time; load: the "
    "1-minute load average at the run's end; steal: the share of that time the hypervisor took; memory stalls: "
    "the share of the run's time some task waited for memory (/proc/pressure/memory); GPU used by others: the "
    "utilisation of processes on the GPU that are not the run's. A run is under foreign load when other "
    f"processes took more than {host_load.FOREIGN_CPU:.0%} of the CPU, more than {host_load.STEAL:.0%} was "
    f"stolen, or others kept the GPU more than {host_load.FOREIGN_GPU:.0%} busy; the blocks' host states differ "
    "when some ran under foreign load and some did not, or other processes' mean share of a block lies more than "
    f"{host_load.STATES_APART:.0%} apart between the quietest and the busiest block"
)


@dataclass(frozen=True)
class HostRun:
    arm_id: int
    level: int
    block: int
    foreign_cpu: float | None
    steal: float | None
    load: float | None
    memory_stall: float | None
    gpu_foreign: float | None

    @property
    def flagged(self) -> bool:
        return host_load.foreign_load(self.foreign_cpu, self.steal, self.gpu_foreign)


def host_runs(experiment: Experiment) -> list[HostRun]:
    """The succeeded runs that recorded the host's state."""
    rows = (
        RunSummary.objects.succeeded_of(experiment)
        .filter(host_foreign_cpu__isnull=False)
        .values_list(
            "run__arm_id",
            "run__concurrency",
            "run__repetition",
            "host_foreign_cpu",
            "host_steal",
            "host_load",
            "host_memory_stall",
            "host_gpu_foreign",
        )
    )
    return [HostRun(*row) for row in rows]


def _span(values: list[float | None], share: bool = True) -> str:
    known = sorted(value for value in values if value is not None)
    if not known:
        return ""
    low, high = known[0], known[-1]
    if share:
        return f"{low:.0%}" if round(low, 2) == round(high, 2) else f"{low:.0%}–{high:.0%}"
    return f"{low:.1f}" if round(low, 1) == round(high, 1) else f"{low:.1f}–{high:.1f}"


def card_sentence(runs: list[HostRun]) -> str:
    """The protocol card's line: the range over the runs of each figure, and the runs flagged."""
    if not runs:
        return ""
    parts = [f"other processes took {_span([r.foreign_cpu for r in runs])} of the CPU"]
    if any(r.load is not None for r in runs):
        parts.append(f"load {_span([r.load for r in runs], share=False)}")
    if any(r.steal for r in runs):
        parts.append(f"steal {_span([r.steal for r in runs])}")
    if any(r.memory_stall for r in runs):
        parts.append(f"memory stalls {_span([r.memory_stall for r in runs])} of the time")
    if any(r.gpu_foreign is not None for r in runs):
        parts.append(f"GPU used by others {_span([r.gpu_foreign for r in runs])}")
    flagged = sum(r.flagged for r in runs)
    tail = f"; {flagged} of {len(runs)} runs under foreign load" if flagged else f"; over {len(runs)} runs"
    return ", ".join(parts) + tail


def block_states(runs: list[HostRun]) -> host_load.BlockStates:
    foreign: dict[int, list[float | None]] = defaultdict(list)
    flagged: dict[int, bool] = defaultdict(bool)
    for run in runs:
        foreign[run.block].append(run.foreign_cpu)
        flagged[run.block] |= run.flagged
    return host_load.block_states(foreign, flagged)


def host_warnings(runs: list[HostRun], labels: dict[int, str]) -> list[str]:
    """The runs under foreign load, and the mark on the words when the blocks' host states differ."""
    warnings = []
    flagged = [run for run in runs if run.flagged and run.arm_id in labels]
    if flagged:
        listed = "; ".join(
            f"{labels[r.arm_id]} at {r.level}, block {r.block} (other processes {r.foreign_cpu or 0:.0%} of the CPU)"
            for r in flagged
        )
        warnings.append(
            f"In {len(flagged)} run(s) other work shared the host (more than {host_load.FOREIGN_CPU:.0%} of its CPU "
            f"taken by other processes, more than {host_load.STEAL:.0%} stolen, or the GPU used by others): {listed}. "
            "Arms answer to host load differently (an n-gram proposer runs on the host's cores), which an A/A "
            "replicate cannot see."
        )
    states = block_states(runs)
    if states.differ:
        warnings.append(
            f"The words hold for the host states their blocks ran under, and these differ: {states.sentence()}. "
            "A word measured on a quiet host may not hold on a busy one, and the other way round."
        )
    return warnings
