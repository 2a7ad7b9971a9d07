"""Which CPU cores the load generator and vLLM's engine use on a host without a GPU.

By default vLLM binds its engine's OpenMP threads to every core (`auto`), so the load
generator, the API front end and the engine fight for the same cores: on the 2-core
development machine, separating them raised the throughput by 40-55% and halved the
spread between two starts of the same server (DESIGN.md, "Facts checked"). The rule here: the client
gets the first usable core, the engine's threads the rest, through
`VLLM_CPU_OMP_THREADS_BIND` (a list such as "1-3,5"). `VLLM_CPU_NUM_OF_RESERVED_CPU`
only matters for vLLM's `auto` binding, so it is not set.

That variable binds the engine's worker only. vLLM's CPU server has two more processes: the
API server, which streams the responses, and the engine core, the scheduler, which after
each step busy-waits (sched_yield, for a second) on the worker's shared-memory queue. Left
where the worker was, the engine core lands on the client's core in some server starts; its
spinning then starves the client (and the API server, where it lands beside it), chunks
queue up and reach the client in bursts: with the 1-layer demo draft served alone, 44-46 %
of the requests stalled and 9-11 of 64 at concurrency 1 received their decode in one burst,
against 4 % and none with the engine core on the engine's core (docs/metrics.md, "Stream
fidelity"). So once the server is healthy, ServerPlacement binds the API server to the
client's cores and the engine core to the engine's ("split"); the other placements are there
for the check scripts to compare.

Plain module: no Django.
"""

import contextlib
import itertools
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from workers.server.vllm_server import group_pids

OMP_BIND_VAR = "VLLM_CPU_OMP_THREADS_BIND"


@dataclass(frozen=True)
class CpuBinding:
    client_cores: tuple[int, ...]
    engine_cores: tuple[int, ...]

    @property
    def env(self) -> dict[str, str]:
        """Environment variables for the vLLM server process."""
        return {OMP_BIND_VAR: core_list(self.engine_cores)}

    def record(self) -> dict[str, object]:
        """What EnvironmentSnapshot.cpu_binding stores."""
        return {"engine_cores": core_list(self.engine_cores), "client_cores": list(self.client_cores), "env": self.env}


def plan_binding(cores: Iterable[int]) -> CpuBinding | None:
    """The first core for the client, the others for the engine; None with a single core,
    where separating them is impossible."""
    ordered = sorted(set(cores))
    if len(ordered) < 2:
        return None
    return CpuBinding(client_cores=(ordered[0],), engine_cores=tuple(ordered[1:]))


def usable_cores() -> set[int]:
    return os.sched_getaffinity(0)


def core_list(cores: Iterable[int]) -> str:
    """Cores in the form vLLM parses ("0-2,4,7-8"): consecutive runs become ranges."""
    ordered = sorted(set(cores))
    runs = itertools.groupby(enumerate(ordered), key=lambda pair: pair[1] - pair[0])
    parts = []
    for _, group in runs:
        members = [core for _, core in group]
        parts.append(str(members[0]) if len(members) == 1 else f"{members[0]}-{members[-1]}")
    return ",".join(parts)


@contextlib.contextmanager
def pinned(cores: Iterable[int]) -> Iterator[None]:
    """Run the calling thread (and the threads it starts meanwhile) on `cores` only, and
    give it back its previous cores afterwards, whatever happens inside."""
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(cores))
    try:
        yield
    finally:
        os.sched_setaffinity(0, previous)


# Where vLLM's API server (the process that streams the responses) and its engine core (the
# scheduler, which busy-waits on the engine's worker) run, beside the client and the
# engine's OpenMP threads.
PLACEMENTS = {
    "unbound": "API server and engine core on any core",
    "front": "API server and engine core on the client's cores",
    "split": "API server on the client's cores, engine core on the engine's",
    "engine": "API server and engine core on the engine's cores",
}
DEFAULT_PLACEMENT = "split"
ENGINE_CORE_NAME = "VLLM::EngineCor"  # /proc/<pid>/comm keeps 15 characters of "VLLM::EngineCore"


def server_env(binding: CpuBinding | None, *, fork_engine: bool = True) -> dict[str, str | None]:
    """The vLLM server's extra environment on a CPU host: the engine's cores, and fork as the
    way it starts its engine process. The KV cache's size goes as --kv-cache-memory-bytes,
    which takes fractions of a GiB; vLLM's VLLM_CPU_KVCACHE_SPACE (whole GiB) would override
    it, so it is left out."""
    start_method = {"VLLM_WORKER_MULTIPROC_METHOD": "fork"} if fork_engine else {}
    return {"VLLM_CPU_KVCACHE_SPACE": None} | start_method | (binding.env if binding else {})


@dataclass(frozen=True)
class ServerPlacement:
    """Puts a started vLLM server's API server and engine core on their cores (PLACEMENTS)."""

    binding: CpuBinding
    mode: str = DEFAULT_PLACEMENT

    def cores(self) -> tuple[set[int] | None, set[int] | None]:
        """(API server's cores, engine core's cores); None leaves a process where it is."""
        client, engine = set(self.binding.client_cores), set(self.binding.engine_cores)
        return {
            "unbound": (None, None),
            "front": (client, client),
            "split": (client, engine),
            "engine": (engine, engine),
        }[self.mode]

    def apply(self, leader_pid: int) -> dict[str, list[int]]:
        """Bind every thread of the API server (the group's leader) and of the engine core;
        returns {role: cores} as bound."""
        front, engine_core = self.cores()
        placed = {}
        for pid in group_pids(leader_pid):
            cores = front if pid == leader_pid else engine_core if process_name(pid) == ENGINE_CORE_NAME else None
            if cores is not None:
                bind_process(pid, cores)
                placed["api_server" if pid == leader_pid else "engine_core"] = sorted(cores)
        return placed


def process_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def bind_process(pid: int, cores: set[int]) -> None:
    """Every thread of `pid` on `cores` (sched_setaffinity binds one thread; the threads it
    starts later inherit it)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(task.name), cores)
