"""Whether this host's vLLM can run a synthetic acceptance sweep (experiments/analysis/acceptance_sweep.py).

vLLM 0.32 reads `rejection_sample_method: "synthetic"` on every build, and its GPU
sampling kernels (Triton) implement it, but the CPU build's sampling kernels refuse it: the
server starts and reports healthy, then its engine dies on the first speculative step
("Synthetic acceptance not supported with CPU sampling", vllm/utils/cpu_triton_utils.py).
So before a CPU host starts a synthetic server, it calls that kernel once in the vLLM
environment and fails the sweep's runs with vLLM's own message when it refuses, instead of
starting servers that die under the first request.
"""

import functools
import subprocess

from workers.host.envinfo import cuda_visible

REFUSED_EXIT_CODE = 3
PROBE_TIMEOUT_S = 300

# The greedy rejection kernel on a one-token draft, in synthetic mode. It exits with
# REFUSED_EXIT_CODE and vLLM's message only when vLLM refuses synthetic mode; anything else
# (a layout of vLLM this probe does not know) is left to the servers to tell.
PROBE = f"""
import sys
import torch
from vllm.utils import cpu_triton_utils as kernels
ids = lambda *values: torch.tensor(values, dtype=torch.int64)
try:
    kernels._rejection_greedy_sample_kernel_impl(
        ids(-1, -1), ids(1), ids(5), ids(5), ids(7), None, 1,
        torch.zeros(1, dtype=torch.float64), torch.ones(1), SYNTHETIC_MODE=True,
    )
except AssertionError as refused:
    print(refused)
    sys.exit({REFUSED_EXIT_CODE})
"""


@functools.cache
def unsupported_reason(vllm_python: str) -> str | None:
    """Why this host's vLLM cannot run synthetic acceptance, or None when it can (or the
    probe cannot tell). Asked once per worker process and vLLM interpreter."""
    if cuda_visible(vllm_python):
        return None
    try:
        probe = subprocess.run(
            [vllm_python, "-c", PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if probe.returncode != REFUSED_EXIT_CODE:
        return None
    return f"this host's vLLM (CPU build) refuses synthetic acceptance: {probe.stdout.strip()}"
