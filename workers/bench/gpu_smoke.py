"""The GPU path in one go, with the project's own modules: the demo model pair (built on the CPU,
no download), one vLLM server per method (baseline, draft model, suffix, n-gram, n-gram on the
GPU, synthetic acceptance), what vLLM decided read from each server's log
(workers/server/engine_report.py), per-request engine metrics and speculative counters from the
load generator, a V2 profile that reads "not split" and a V1 profile that splits
(experiments/measurement/engine/trace_shares.py), and a second server started on a GPU the first
one fills, which must be refused for memory and retried once (workers/server/vllm_server.py).

One line per check: pass, FAIL or skip with the reason. On a host without a GPU the checks a
CPU can answer run (vLLM's CPU build: the V1 runner, eager, a fixed KV cache) and the GPU-only
ones are reported as skipped by name, never as passed. scripts/gpu_smoke.py is its command
line; docs/gpu-hosts.md ends its first hour with it. Plain module: no Django.
"""

import json
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.measurement.engine import trace_shares
from workers.host.envinfo import cuda_visible
from workers.measure.loadgen import LoadResult, run_load_sync
from workers.server import method_support
from workers.server.command import ServerLaunch, build_server_args, free_port, profiler_args
from workers.server.engine_report import EngineReport, read_engine_report
from workers.server.vllm_server import ServerStartError, VllmServer

PASS, FAIL, SKIP = "pass", "FAIL", "skip"
# vLLM's V1 runner records its phase scopes only with this set (workers/server/profiling.py).
SCOPES_ENV = {"VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1"}
CPU_KV_CACHE_BYTES = 2**30
PROMPTS = [
    "def fibonacci(n):\n    ",
    "The capital of France is Paris. The capital of Italy is",
    "for i in range(10):\n    print(i)\nfor j in range(10):\n    print(",
    "Once upon a time there was a",
]


@dataclass(frozen=True)
class Options:
    """What scripts/gpu_smoke.py asks for (its --help says each)."""

    vllm_python: str
    work_dir: Path
    models: Path | None = None
    max_tokens: int = 24
    start_timeout_s: float = 900.0
    only: tuple[str, ...] = ()


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str = ""

    def line(self) -> str:
        return f"{self.status:<4} {self.name}" + (f": {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class Server:
    """One server of the smoke test: its method's speculative config, and what is asked of it."""

    name: str
    speculative: dict[str, Any] | None
    gpu_only: bool = False
    profile: str = ""  # "V1" or "V2": profile it and expect the trace split (V1) or not (V2)
    runner: str = ""  # the model runner vLLM must pick for it on a GPU


def servers(models: Path, *, gpu: bool) -> list[Server]:
    """On a GPU the baseline runs on V2 (vLLM 0.32's default with Triton) and is profiled there, the
    suffix arm falls back to V1 and is profiled there; on a CPU every server is V1, and the n-gram
    server (the cheapest speculative one) is the V1 profile."""
    draft = {"method": "draft_model", "model": str(models / "draft"), "num_speculative_tokens": 4}
    ngram = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
    # vLLM 0.32's synthetic acceptance (experiments/models/arm.py, Arm.synthetic_config), on the draft pair.
    synthetic = draft | {"rejection_sample_method": "synthetic", "synthetic_acceptance_length": 2.5}
    return [
        Server("baseline", None, profile="V2" if gpu else "", runner="V2"),
        Server("draft model", draft, runner="V2"),
        Server("suffix", {"method": "suffix", "num_speculative_tokens": 8}, profile="V1" if gpu else "", runner="V1"),
        Server("n-gram", ngram, profile="" if gpu else "V1"),
        Server("n-gram on the GPU", ngram | {"method": "ngram_gpu"}, gpu_only=True, runner="V2"),
        Server("synthetic acceptance", synthetic, gpu_only=True),
    ]


@dataclass
class Smoke:
    """The run: its options, whether the host has a GPU, the checks so far and where they are printed."""

    options: Options
    gpu: bool
    say: Callable[[str], None] = print
    checks: list[Check] = field(default_factory=list)

    def add(self, name: str, status: str, detail: str = "") -> Check:
        check = Check(name, status, detail)
        self.checks.append(check)
        self.say(check.line())
        return check

    def expect(self, name: str, ok: bool, detail: str) -> None:
        self.add(name, PASS if ok else FAIL, detail)

    @property
    def failed(self) -> bool:
        return any(check.status == FAIL for check in self.checks)


def run(options: Options, say: Callable[[str], None] = print) -> Smoke:
    options.work_dir.mkdir(parents=True, exist_ok=True)
    smoke = Smoke(options, gpu=cuda_visible(options.vllm_python), say=say)
    smoke.add("host", PASS, "a GPU: the GPU path" if smoke.gpu else "no GPU: vLLM's CPU build; GPU-only checks skipped")
    models = demo_models(smoke)
    if models is None:
        return smoke
    for server in servers(models, gpu=smoke.gpu):
        if options.only and server.name not in options.only:
            continue
        serve(smoke, server, models)
    memory_refusal(smoke, models)
    return smoke


def demo_models(smoke: Smoke) -> Path | None:
    """The demo pair given, or built into the work folder on the CPU (workers/host/demo_models.py)."""
    models = smoke.options.models or smoke.options.work_dir / "models"
    if all((models / name / "config.json").is_file() for name in ("target", "draft")):
        smoke.add("demo models", PASS, f"{models} (target and draft)")
        return models
    started = time.monotonic()
    done = subprocess.run(
        [smoke.options.vllm_python, "-m", "workers.host.demo_models", "--out", str(models)],
        capture_output=True, text=True, check=False, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    if done.returncode != 0:
        smoke.add("demo models", FAIL, (done.stderr.strip().splitlines() or ["no output"])[-1])
        return None
    smoke.add("demo models", PASS, f"built on the CPU into {models} in {time.monotonic() - started:.0f} s")
    return models


def launch(smoke: Smoke, server: Server, models: Path, *, log_name: str, profile_dir: Path | None) -> ServerLaunch:
    args = build_server_args(
        python=smoke.options.vllm_python, model=str(models / "target"), port=free_port(), dtype="float32",
        max_model_len=512, seed=0, speculative_config=server.speculative,
        kv_cache_bytes=None if smoke.gpu else CPU_KV_CACHE_BYTES,
    )  # fmt: skip
    env: dict[str, str | None] = {}
    if profile_dir is not None:
        args += profiler_args(profile_dir)
        env |= SCOPES_ENV
    return ServerLaunch(
        args,
        log_path=smoke.options.work_dir / f"{log_name}.log",
        env=env,
        start_timeout_s=smoke.options.start_timeout_s,
    )


def serve(smoke: Smoke, server: Server, models: Path) -> None:
    if server.gpu_only and not smoke.gpu:
        smoke.add(f"{server.name}: server", SKIP, "GPU-only: vLLM's CPU build cannot run it")
        return
    method = (server.speculative or {}).get("method", "")
    missing = method_support.arctic_inference_error(smoke.options.vllm_python) if method == "suffix" else None
    if missing is not None:
        smoke.add(f"{server.name}: server", FAIL if smoke.gpu else SKIP, f"arctic-inference not installed ({missing})")
        return
    profile_dir = smoke.options.work_dir / "profiles" / server.name.replace(" ", "-") if server.profile else None
    try:
        with VllmServer(
            launch(smoke, server, models, log_name=server.name.replace(" ", "-"), profile_dir=profile_dir)
        ) as up:
            smoke.add(f"{server.name}: server", PASS, f"healthy in {up.start_s or 0:.0f} s")
            engine_checks(smoke, server, read_engine_report(up.launch.log_path))
            load_checks(smoke, server, load(up.base_url, smoke.options.max_tokens))
            if profile_dir is not None:
                profile_check(smoke, server, up.base_url, profile_dir)
    except ServerStartError as error:
        smoke.add(f"{server.name}: server", FAIL, error.message[:300])


def engine_checks(smoke: Smoke, server: Server, report: EngineReport) -> None:
    said = (
        f"runner {report.model_runner or '?'}, async scheduling {report.async_scheduling}, CUDA graphs "
        f"{report.cuda_graphs or '?'}, KV cache {report.kv_cache_tokens or '?'} tokens"
        + (f", FlashInfer {report.flashinfer}" if report.flashinfer else "")
    )
    known = report.model_runner is not None and report.kv_cache_tokens is not None
    smoke.expect(f"{server.name}: what vLLM decided", known, said)
    if not smoke.gpu:
        smoke.expect(
            f"{server.name}: CPU build eager on V1", (report.model_runner, report.cuda_graphs) == ("V1", "off"), said
        )
        return
    if server.runner:
        smoke.expect(f"{server.name}: model runner {server.runner}", report.model_runner == server.runner, said)
    smoke.expect(f"{server.name}: CUDA graphs captured", report.cuda_graphs not in (None, "off"), said)
    smoke.expect(
        f"{server.name}: FlashInfer kernels", report.flashinfer is None, report.flashinfer or "no word of them"
    )


def load(base_url: str, max_tokens: int) -> LoadResult:
    return run_load_sync(
        base_url=base_url, model="target", prompts=PROMPTS, max_tokens=max_tokens, temperature=0.0, top_p=1.0,
        seed=0, ignore_eos=True, concurrency=2, warmup=0, time_limit_s=600,
    )  # fmt: skip


def load_checks(smoke: Smoke, server: Server, result: LoadResult) -> None:
    done = [r for r in result.requests if not r.error]
    errors = sorted({r.error for r in result.requests if r.error})
    smoke.expect(
        f"{server.name}: requests", len(done) == len(PROMPTS), f"{len(done)}/{len(PROMPTS)} " + "; ".join(errors)
    )
    timed = [r for r in done if r.server_decode_ms is not None and r.server_ttft_ms is not None]
    smoke.expect(
        f"{server.name}: per-request engine metrics",
        bool(done) and len(timed) == len(done),
        f"{len(timed)}/{len(done)} timed by the engine",
    )
    if server.speculative is None:
        return
    counters = result.spec_counters
    drafts = counters.num_drafts if counters is not None else None
    smoke.expect(f"{server.name}: spec counters", bool(drafts), f"/metrics: {drafts} drafts over the interval")
    per_request = [r for r in done if r.spec_proposed_per_step is not None]
    smoke.expect(
        f"{server.name}: per-request spec metrics", bool(per_request), f"{len(per_request)}/{len(done)} requests"
    )


def profile_check(smoke: Smoke, server: Server, base_url: str, directory: Path) -> None:
    prefix = f"smoke-{uuid.uuid4().hex[:8]}"
    name = f"{server.name}: {server.profile} profile " + ("splits" if server.profile == "V1" else "reads not split")
    try:
        _post(f"{base_url}/start_profile", {"profile_prefix": prefix}, 60.0)
        try:
            load(base_url, 8)
        finally:
            _post(f"{base_url}/stop_profile", None, 600.0)
        summary = trace_shares.summarise_files(sorted(directory.glob(f"{prefix}_*.pt.trace.json.gz")))
    except (OSError, trace_shares.TraceError) as error:
        smoke.add(name, FAIL, f"{type(error).__name__}: {error}"[:300])
        return
    detail = f"{summary.steps} steps, " + ("split" if summary.split else summary.not_split_reason[:120])
    smoke.expect(name, summary.steps > 0 and summary.split == (server.profile == "V1"), detail)


def _post(url: str, body: dict[str, Any] | None, timeout_s: float) -> None:
    data = json.dumps(body).encode() if body is not None else b""
    request = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        response.read()


def memory_refusal(smoke: Smoke, models: Path) -> None:
    """A second server on the GPU the first one fills (vLLM's default 92 % each): vLLM refuses it
    for memory, the driver waits for the memory and starts it once more, and says so."""
    name = "second server on a full GPU: memory refusal, retried once"
    if not smoke.gpu:
        smoke.add(name, SKIP, "GPU-only: vLLM's CPU build sizes its KV cache from --kv-cache-memory-bytes")
        return
    if smoke.options.only and "memory refusal" not in smoke.options.only:
        return
    baseline = Server("baseline", None)
    with VllmServer(launch(smoke, baseline, models, log_name="full-gpu-first", profile_dir=None)):
        try:
            with VllmServer(launch(smoke, baseline, models, log_name="full-gpu-second", profile_dir=None)):
                smoke.add(name, FAIL, "the second server started beside the first")
        except ServerStartError as refused:
            smoke.expect(name, "retried once" in refused.message, refused.message[-300:])


def summary(smoke: Smoke) -> str:
    """The closing line: how many checks passed, failed and were skipped."""
    passed, failed, skipped = (sum(c.status == s for c in smoke.checks) for s in (PASS, FAIL, SKIP))
    return f"{passed} passed, {failed} failed, {skipped} skipped"
