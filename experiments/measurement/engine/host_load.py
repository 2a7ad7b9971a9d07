"""How busy the host was while a run measured (issue 36): a word holds for the host state its
blocks ran under, and the arms answer to host load differently (an n-gram proposer runs on the
host's cores, which an A/A replicate of plain decoding cannot see).

The worker (workers/host/host_load.py) reads /proc before and after a run's requests — the CPU
times of /proc/stat (with steal), the CPU times of the run's own processes (its vLLM server's
process group and the worker with its load generator) from /proc/<pid>/stat, the load average,
memory pressure from /proc/pressure/memory — and, where there is a GPU, the utilisation of the
processes on it that are not the run's (nvidia-smi). This module turns the two readings into the
run's HostState. The CPU time the host spent busy minus what the run's processes took is what
other work took; as a share of every core over the run's wall time it is `foreign_cpu`.

A run is under foreign load (flagged on the page like a run whose stream was distorted) when
other work took more than FOREIGN_CPU of the host's CPU, the hypervisor stole more than STEAL, or
other processes kept the GPU more than FOREIGN_GPU busy. The words of an experiment are marked
when its blocks ran under different host states: some under foreign load and some not, or other
processes' share ranging over more than STATES_APART between blocks. Plain Python, no Django.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

FOREIGN_CPU = 0.10  # of every core: on 2 cores, a fifth of one core taken by other processes
STEAL = 0.05
FOREIGN_GPU = 0.10
STATES_APART = 0.15  # other processes' CPU share, between the quietest and the busiest block
CLOCK_TICKS = 100  # USER_HZ: the unit of /proc's CPU times (100 on every Linux the project runs on)


@dataclass(frozen=True)
class Reading:
    """One reading of the host: its CPU times in ticks (all cores, from /proc/stat's "cpu" line:
    `busy` = user + nice + system + irq + softirq, `steal`, `total` with idle and iowait), the
    run's own processes' CPU ticks (utime + stime), memory pressure's total stall in µs (None
    without pressure stall information), the load average and the online cores."""

    at_s: float
    busy: int
    steal: int
    total: int
    own: int
    memory_stall_us: int | None
    load: float
    cores: int


@dataclass(frozen=True)
class HostState:
    """Over a run: other processes' share of the host's CPU, the stolen share, the share of time
    some task stalled on memory, the load average at the end, the cores, and the GPU's
    utilisation by other processes (None without a GPU)."""

    foreign_cpu: float
    steal: float
    memory_stall: float | None
    load: float
    cores: int
    gpu_foreign: float | None = None

    @property
    def flagged(self) -> bool:
        return foreign_load(self.foreign_cpu, self.steal, self.gpu_foreign)


def parse_stat(text: str) -> tuple[int, int, int]:
    """(busy, steal, total) ticks from /proc/stat's aggregate "cpu" line."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(value) for value in fields[1:]]
            user, nice, system, idle, iowait, irq, softirq = (values + [0] * 7)[:7]
            steal = values[7] if len(values) > 7 else 0
            # guest and guest_nice (fields 9 and 10) are already counted in user and nice.
            return (
                user + nice + system + irq + softirq,
                steal,
                user + nice + system + idle + iowait + irq + softirq + steal,
            )
    raise ValueError("no aggregate cpu line in /proc/stat")


def parse_process_ticks(text: str) -> int:
    """utime + stime of one /proc/<pid>/stat (fields 14 and 15; the name in parentheses may hold spaces)."""
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def parse_pressure(text: str) -> int | None:
    """The "some" line's total stall in µs of /proc/pressure/memory."""
    for line in text.splitlines():
        if line.startswith("some"):
            values = dict(item.split("=") for item in line.split()[1:])
            return int(values["total"])
    return None


def parse_loadavg(text: str) -> float:
    return float(text.split()[0])


def state(before: Reading, after: Reading, *, gpu_foreign: float | None = None) -> HostState:
    """The host's state between two readings."""
    total = max(1, after.total - before.total)
    busy = after.busy - before.busy
    own = after.own - before.own
    stall = None
    if before.memory_stall_us is not None and after.memory_stall_us is not None and after.at_s > before.at_s:
        stall = min(1.0, (after.memory_stall_us - before.memory_stall_us) / 1e6 / (after.at_s - before.at_s))
    return HostState(
        foreign_cpu=min(1.0, max(0.0, (busy - own) / total)),
        steal=max(0.0, (after.steal - before.steal) / total),
        memory_stall=stall,
        load=after.load,
        cores=after.cores,
        gpu_foreign=gpu_foreign,
    )


def foreign_load(foreign_cpu: float | None, steal: float | None, gpu_foreign: float | None) -> bool:
    """Whether other work took a share of the host that a measurement should not share it with."""
    return (
        (foreign_cpu is not None and foreign_cpu > FOREIGN_CPU)
        or (steal is not None and steal > STEAL)
        or (gpu_foreign is not None and gpu_foreign > FOREIGN_GPU)
    )


def gpu_foreign_share(utilisation: Mapping[int, float], own: set[int]) -> float | None:
    """Other processes' GPU utilisation (nvidia-smi pmon's sm %, by pid) as a share; None without readings."""
    if not utilisation:
        return None
    return min(1.0, sum(value for pid, value in utilisation.items() if pid not in own) / 100)


@dataclass(frozen=True)
class BlockStates:
    """How the blocks' host states compare: the blocks with a run under foreign load, and the range
    of the blocks' mean foreign CPU share."""

    loaded: tuple[int, ...]
    quietest: float | None
    busiest: float | None
    blocks: int

    @property
    def differ(self) -> bool:
        """Some blocks ran under foreign load and some not, or their shares lie far apart."""
        if 0 < len(self.loaded) < self.blocks:
            return True
        return self.quietest is not None and self.busiest is not None and self.busiest - self.quietest > STATES_APART

    def sentence(self) -> str:
        if not self.differ:
            return ""
        spread = f"other processes took {self.quietest:.0%}–{self.busiest:.0%} of its CPU"
        if self.loaded:
            blocks = ", ".join(str(block) for block in self.loaded)
            return f"blocks ran under different host states: foreign load in block(s) {blocks}; {spread}"
        return f"blocks ran under different host states: {spread}"


def block_states(foreign_by_block: Mapping[int, Sequence[float | None]], flagged: Mapping[int, bool]) -> BlockStates:
    """From each block's runs' foreign CPU shares (None where not recorded) and whether any of its
    runs was flagged."""
    means = [
        math.fsum(known) / len(known)
        for values in foreign_by_block.values()
        if (known := [value for value in values if value is not None])
    ]
    loaded = tuple(sorted(block for block, flag in flagged.items() if flag))
    return BlockStates(loaded, min(means, default=None), max(means, default=None), len(foreign_by_block))
