"""Whether this host's vLLM can run an arm's speculative method, asked before its server starts.

- suffix: vLLM 0.32 proposes with arctic-inference's SuffixDecodingCache
  (vllm/v1/spec_decode/suffix_decoding.py) and refuses the config without the package ("Arctic
  Inference is required for suffix decoding", config/speculative.py), after the server's process
  has started. So the vLLM interpreter is asked once whether that import works.
- ngram_gpu: on a host without a GPU, vLLM 0.32's engine dies while it starts (the V1 runner
  asks for pinned memory for its n-gram buffers: "pin_memory=True requires a CUDA or other
  accelerator backend"), so a CPU host refuses the method with a word instead.

Plain module: no Django.
"""

import functools
import subprocess

from workers.host.envinfo import cuda_visible
from workers.host.host_check import ARCTIC_INFERENCE
from workers.server.vllm_server import ServerStartError

SUFFIX, NGRAM_GPU = "suffix", "ngram_gpu"
PROBE = "from arctic_inference.suffix_decoding import SuffixDecodingCache"
PROBE_TIMEOUT_S = 120


class MethodUnsupported(ServerStartError):
    """An arm whose method this host's vLLM cannot run: no server is started."""


def check(method: str, vllm_python: str) -> None:
    """Raise MethodUnsupported, naming the fix, when this host cannot run `method`."""
    reason = unsupported_reason(method, vllm_python)
    if reason is not None:
        raise MethodUnsupported(f"{reason}.", log_tail="")


@functools.cache
def arctic_inference_error(vllm_python: str) -> str | None:
    """Why `vllm_python` cannot import what suffix decoding needs, or None when it can (or
    the interpreter cannot be asked: the server's start then tells). Asked once per worker
    process and interpreter."""
    try:
        probe = subprocess.run(
            [vllm_python, "-c", PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if probe.returncode == 0:
        return None
    return (probe.stderr.strip().splitlines() or ["no output"])[-1]


def unsupported_reason(method: str, vllm_python: str) -> str | None:
    """Why this host's vLLM cannot run `method`, with the fix, or None."""
    if method == SUFFIX:
        error = arctic_inference_error(vllm_python)
        return None if error is None else _suffix_refusal(vllm_python, error)
    if method == NGRAM_GPU and not cuda_visible(vllm_python):
        return (
            "ngram_gpu runs its n-gram lookup on a GPU, and this worker has none (vLLM's CPU build dies while "
            "it starts). Send the experiment to a GPU worker's queue, or use ngram on CPU workers"
        )
    return None


def _suffix_refusal(vllm_python: str, error: str) -> str:
    return (
        f"suffix decoding needs arctic-inference, and this worker's vLLM environment cannot import it ({error}). "
        f"Install it there: {vllm_python} -m pip install {ARCTIC_INFERENCE} (requirements/vllm-gpu.txt), "
        "then restart the worker"
    )
