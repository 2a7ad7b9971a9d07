"""GPU memory between vLLM servers: who holds it, waiting until it is free, and reading a
failed start's log for vLLM's refusal to start without it.

Plain module: no Django, no vLLM import. NVML is asked through the vLLM interpreter (vLLM 0.32
ships its own copy of nvidia-ml-py as `vllm/third_party/pynvml.py`, on CPU builds too), and
nvidia-smi where that cannot be done. Either lists the GPUs the worker may use
(CUDA_VISIBLE_DEVICES, by index or UUID) and the compute processes on them.
"""

import dataclasses
import json
import logging
import re
import shutil
import time
from collections.abc import Callable, Collection

# The quiet subprocess call envinfo asks the vLLM interpreter and nvidia-smi with: "" on failure.
from workers.host.envinfo import _run

logger = logging.getLogger(__name__)

POLL_S = 0.5
# Run by the vLLM interpreter; argv[1] is CUDA_VISIBLE_DEVICES ("" for every GPU). The module
# is loaded from its file: importing the vllm package would import torch (seconds per poll).
_NVML_SCRIPT = """
import importlib.util, json, os, sys
spec = importlib.util.find_spec("vllm")
path = os.path.join(list(spec.submodule_search_locations)[0], "third_party", "pynvml.py") if spec else ""
if os.path.exists(path):
    loader = importlib.util.spec_from_file_location("_vllm_pynvml", path)
    pynvml = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(pynvml)
else:
    import pynvml
pynvml.nvmlInit()
ids = [i.strip() for i in sys.argv[1].split(",") if i.strip()]
ids = ids or [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
gpus, processes = [], []
for device in ids:
    if device.isdigit():
        handle = pynvml.nvmlDeviceGetHandleByIndex(int(device))
    else:
        handle = pynvml.nvmlDeviceGetHandleByUUID(device)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    gpus.append({"total_mb": memory.total >> 20, "free_mb": memory.free >> 20})
    for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
        processes.append({"pid": process.pid, "used_mb": (process.usedGpuMemory or 0) >> 20})
print(json.dumps({"gpus": gpus, "processes": processes}))
"""

# vLLM 0.32's refusals to start for want of GPU memory (tests/workers/server/test_gpu_memory.py holds
# the lines with the file each comes from), and torch's CUDA allocator's own.
_MEMORY_REFUSALS = re.compile(
    "|".join(
        [
            r"Free memory on device \S* ?\(.*\) on startup is less than",
            r"This happens when other processes sharing the same container release GPU memory",
            r"No available memory for the cache blocks",
            r"Failed to load model - not enough GPU memory",
            r"CUDA out of memory",
            r"CUDA error: out of memory",
        ]
    )
)


def is_memory_refusal(log_text: str) -> bool:
    """Whether a failed start's log shows vLLM (or torch under it) refusing for GPU memory."""
    return _MEMORY_REFUSALS.search(log_text) is not None


@dataclasses.dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_mb: int


@dataclasses.dataclass(frozen=True)
class Gpu:
    total_mb: int
    free_mb: int


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The worker's GPUs and the compute processes on them, at one moment."""

    gpus: list[Gpu]
    processes: list[GpuProcess]

    def held_by(self, pids: Collection[int]) -> list[GpuProcess]:
        return [process for process in self.processes if process.pid in pids]

    def short_of(self, fraction: float) -> list[Gpu]:
        """The GPUs with less than `fraction` of their memory free, as vLLM checks at a start."""
        return [gpu for gpu in self.gpus if gpu.free_mb < fraction * gpu.total_mb]


class Probe:
    """Reads a Snapshot through NVML in the vLLM interpreter, or nvidia-smi where that fails."""

    def __init__(self, vllm_python: str, visible_devices: str = ""):
        self.vllm_python = vllm_python
        self.visible_devices = visible_devices

    def snapshot(self) -> Snapshot | None:
        """None when neither NVML nor nvidia-smi answers."""
        nvml = _run([self.vllm_python, "-c", _NVML_SCRIPT, self.visible_devices])
        lines = nvml.strip().splitlines()
        if lines:
            data = json.loads(lines[-1])
            return Snapshot([Gpu(**gpu) for gpu in data["gpus"]], [GpuProcess(**p) for p in data["processes"]])
        return self._nvidia_smi()

    def _nvidia_smi(self) -> Snapshot | None:
        nvidia_smi = shutil.which("nvidia-smi")
        if nvidia_smi is None:
            return None
        devices = [f"--id={self.visible_devices}"] if self.visible_devices else []
        gpus = _run([nvidia_smi, "--query-gpu=memory.total,memory.free", "--format=csv,noheader,nounits", *devices])
        apps = _run([nvidia_smi, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits", *devices])
        if not gpus.strip():
            return None
        return Snapshot(parse_gpu_memory(gpus), parse_compute_apps(apps))


def _mebibytes(field: str) -> int:
    """A memory field of nvidia-smi's CSV ("4096", "4096 MiB"; "[N/A]" reads as 0)."""
    number = field.strip().removesuffix("MiB").strip()
    return int(number) if number.isdigit() else 0


def parse_compute_apps(csv_text: str) -> list[GpuProcess]:
    """nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader[,nounits]."""
    processes = []
    for line in csv_text.strip().splitlines():
        pid, _, used = line.partition(",")
        if pid.strip().isdigit():
            processes.append(GpuProcess(pid=int(pid), used_mb=_mebibytes(used)))
    return processes


def parse_gpu_memory(csv_text: str) -> list[Gpu]:
    """nvidia-smi --query-gpu=memory.total,memory.free --format=csv,noheader[,nounits]."""
    gpus = []
    for line in csv_text.strip().splitlines():
        total, _, free = line.partition(",")
        gpus.append(Gpu(total_mb=_mebibytes(total), free_mb=_mebibytes(free)))
    return gpus


def wait_until(
    probe: Callable[[], Snapshot | None],
    done: Callable[[Snapshot], bool],
    *,
    timeout_s: float,
    tick: Callable[[], None] | None = None,
) -> Snapshot | None:
    """Poll `probe` until `done` holds or `timeout_s` passed; the last snapshot (None: the GPUs
    could not be asked, so nothing was waited for). `tick` runs between polls (a cancel check)."""
    deadline = time.monotonic() + timeout_s
    while True:
        snapshot = probe()
        if snapshot is None or done(snapshot) or time.monotonic() >= deadline:
            return snapshot
        if tick is not None:
            tick()
        time.sleep(POLL_S)


def describe(processes: list[GpuProcess]) -> str:
    return ", ".join(f"pid {process.pid} ({process.used_mb} MiB)" for process in processes)
