"""Which CPU cores the load generator and vLLM's engine use on a host without a GPU.

By default vLLM binds its engine's OpenMP threads to every core (`auto`), so the load
generator, the API front end and the engine fight for the same cores: on the 2-core
development machine, separating them raised the throughput by 40-55% and halved the
spread between two starts of the same server (DESIGN.md, "Facts checked"). The rule here: the client
gets the first usable core, the engine's threads the rest, through
`VLLM_CPU_OMP_THREADS_BIND` (a list such as "1-3,5"). `VLLM_CPU_NUM_OF_RESERVED_CPU`
only matters for vLLM's `auto` binding, so it is not set. vLLM's API server and engine
core process are not bound by that variable; they keep the worker's own affinity.

Plain module: no Django.
"""

import contextlib
import itertools
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

OMP_BIND_VAR = "VLLM_CPU_OMP_THREADS_BIND"


@dataclass(frozen=True)
class CpuBinding:
    client_cores: tuple[int, ...]
    engine_cores: tuple[int, ...]

    @property
    def env(self) -> dict[str, str]:
        """Environment variables for the vLLM server process."""
        return {OMP_BIND_VAR: core_list(self.engine_cores)}

    def record(self) -> dict:
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
