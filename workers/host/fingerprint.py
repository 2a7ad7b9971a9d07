"""This worker's hardware class (experiments/execution/hardware_class.py): GPU model and count,
driver, vLLM and torch versions, and the CPU model, read once per worker process and kept (the
GPUs are the ones CUDA_VISIBLE_DEVICES leaves it). The worker's main process reads it when it
starts (workers/control_commands.py), so the pool processes it forks inherit the answer. Plain
module: no Django."""

import functools
import os

from workers.host import envinfo


@functools.cache
def worker_fingerprint(vllm_python: str) -> dict[str, object]:
    """The fields of a HardwareClass, as this worker's vLLM interpreter sees its host."""
    gpus = envinfo.gpu_info(vllm_python)
    versions = envinfo.interpreter_versions(vllm_python)
    return {
        "gpu_name": gpus["gpu_name"],
        "gpu_count": gpus["gpu_count"],
        "gpu_driver": gpus["gpu_driver"],
        "vllm_version": versions["vllm_version"],
        "torch_version": versions["torch_version"],
        "cpu_model": envinfo.cpu_model(),
    }


def gpu_ids() -> str:
    """The GPUs this worker drives, as CUDA_VISIBLE_DEVICES names them (one worker per GPU:
    deploy/systemd/specdash-worker@.service); empty when it is not set."""
    return os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
