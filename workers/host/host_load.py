"""The host's state over a run, read from /proc (experiments/measurement/engine/host_load.py turns
two readings into the run's HostState): before the run's requests and after them, the CPU times
of the whole host and of the run's own processes — this worker process, which drives the load,
and its descendants: the vLLM server it started and the server's engine processes — the load
average and memory pressure; and, where nvidia-smi answers, the GPU utilisation of the processes
on the GPU that are not the run's. The load generator reads it around the measured requests
(workers/measure/loadgen.py), so that every caller of the load generator gets it.

Off Linux (no /proc/stat) a watch records nothing and the run stores no host state."""

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from experiments.measurement.engine import host_load

logger = logging.getLogger(__name__)

PROC = Path("/proc")
NVIDIA_SMI_TIMEOUT_S = 5.0


def _text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def own_pids(root: int, *, proc: Path = PROC) -> set[int]:
    """`root` and its descendants, by the parent pid of each /proc/<pid>/stat (field 4)."""
    children: dict[int, list[int]] = {}
    for stat in proc.glob("[0-9]*/stat"):
        text = _text(stat)
        if text is not None and ")" in text:
            parent = int(text[text.rindex(")") + 2 :].split()[1])
            children.setdefault(parent, []).append(int(stat.parent.name))
    own, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in own:
                own.add(child)
                todo.append(child)
    return own


def _own_ticks(pids: Iterable[int], proc: Path) -> int:
    total = 0
    for pid in pids:
        text = _text(proc / str(pid) / "stat")
        if text is not None:
            total += host_load.parse_process_ticks(text)
    return total


def reading(own: Iterable[int], *, proc: Path = PROC) -> host_load.Reading | None:
    """One reading of the host, with `own` the run's processes; None without /proc."""
    stat = _text(proc / "stat")
    if stat is None:
        return None
    busy, steal, total = host_load.parse_stat(stat)
    pressure = _text(proc / "pressure" / "memory")
    loadavg = _text(proc / "loadavg")
    return host_load.Reading(
        at_s=time.monotonic(), busy=busy, steal=steal, total=total, own=_own_ticks(own, proc),
        memory_stall_us=host_load.parse_pressure(pressure) if pressure else None,
        load=host_load.parse_loadavg(loadavg) if loadavg else 0.0, cores=os.cpu_count() or 1,
    )  # fmt: skip


def gpu_foreign(own: set[int]) -> float | None:
    """Other processes' GPU utilisation, from one sample of `nvidia-smi pmon`; None without a GPU."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "pmon", "-c", "1", "-s", "u"], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    utilisation: dict[int, float] = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) > 3 and not line.startswith("#") and fields[1].isdigit() and fields[3] not in ("-", ""):
            utilisation[int(fields[1])] = utilisation.get(int(fields[1]), 0.0) + float(fields[3])
    return host_load.gpu_foreign_share(utilisation, own)


class HostWatch:
    """A run's host state: `with HostWatch() as watch: <the measured requests>` then `watch.state`
    (None off Linux, or when the requests raised). The run's own processes are this process and
    its descendants, read at each end."""

    def __init__(self, *, proc: Path = PROC) -> None:
        self.proc = proc
        self.before: host_load.Reading | None = None
        self.state: host_load.HostState | None = None

    def own(self) -> set[int]:
        return own_pids(os.getpid(), proc=self.proc)

    def __enter__(self) -> "HostWatch":
        self.before = reading(self.own(), proc=self.proc)
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is not None or self.before is None:
            return
        own = self.own()
        after = reading(own, proc=self.proc)
        if after is None:
            return
        self.state = host_load.state(self.before, after, gpu_foreign=gpu_foreign(own))
        if self.state.flagged:
            logger.warning("the host was shared during the run: %s", self.state)
