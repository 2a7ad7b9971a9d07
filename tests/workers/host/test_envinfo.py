import platform
import sys

import pytest

from workers.host import envinfo
from workers.host.envinfo import capture_environment, interpreter_versions, parse_cuda_version, parse_gpu_query
from workers.server.engine_report import EngineReport

# experiments.models.EnvironmentSnapshot, without `run` and `captured_at`.
SNAPSHOT_FIELDS = {
    "host_name", "cpu_model", "cpu_count", "gpu_name", "gpu_count", "gpu_memory_mb", "gpu_driver",
    "cuda_version", "vllm_version", "torch_version", "python_version", "server_command", "cpu_binding",
}  # fmt: skip
# What vLLM decided, read from the server's log (workers/server/engine_report.py).
ENGINE_FIELDS = {"model_runner", "async_scheduling", "cuda_graphs", "kv_cache_tokens", "engine_log_lines"}

NVIDIA_SMI_BANNER = """\
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
"""


def test_parse_gpu_query():
    csv = "NVIDIA H100 80GB HBM3, 81559, 550.54.15\nNVIDIA H100 80GB HBM3, 81559, 550.54.15\n"
    assert parse_gpu_query(csv) == {
        "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 2, "gpu_memory_mb": 81559, "gpu_driver": "550.54.15",
    }  # fmt: skip
    assert parse_gpu_query("") == {}


def test_parse_cuda_version():
    assert parse_cuda_version(NVIDIA_SMI_BANNER) == {"cuda_version": "12.4"}
    assert parse_cuda_version("") == {}


def test_interpreter_versions_of_this_python():
    versions = interpreter_versions(sys.executable)
    assert versions["python_version"] == platform.python_version()
    assert versions["vllm_version"] == ""  # the web/worker environment has no vLLM


def test_an_interpreter_that_does_not_run_gives_blanks():
    assert interpreter_versions("/no/such/python") == {"vllm_version": "", "torch_version": "", "python_version": ""}


def test_capture_without_gpu(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    env = capture_environment(vllm_python=sys.executable, server_command=["python", "-m", "x"])
    assert set(env) == SNAPSHOT_FIELDS
    assert (env["gpu_count"], env["gpu_name"], env["gpu_memory_mb"]) == (0, "", None)
    assert env["server_command"] == ["python", "-m", "x"]
    assert env["cpu_binding"] == {}
    assert env["cpu_count"] >= 1
    assert env["host_name"]


def test_capture_records_what_the_servers_log_said():
    report = EngineReport(
        model_runner="V1", async_scheduling=False, cuda_graphs="off", kv_cache_tokens=87_296,
        evidence={"model_runner": "Model Runner V2 requires Triton; using the V1 model runner instead."},
    )  # fmt: skip
    env = capture_environment(vllm_python="/no/such/python", server_command=["python"], engine=report.record())
    assert set(env) == SNAPSHOT_FIELDS | ENGINE_FIELDS
    assert (env["model_runner"], env["async_scheduling"], env["cuda_graphs"], env["kv_cache_tokens"]) == (
        "V1", False, "off", 87_296,
    )  # fmt: skip
    assert env["engine_log_lines"] == report.evidence


@pytest.fixture
def fake_nvidia_smi(tmp_path, monkeypatch):
    script = tmp_path / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {tmp_path}/calls\n'
        'case "$1" in\n'
        '  --query-gpu=*) echo "NVIDIA L4, 23034, 535.104.05" ;;\n'
        f"  *) printf '%s' '{NVIDIA_SMI_BANNER}' ;;\n"
        "esac\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    return tmp_path / "calls"


def test_capture_with_gpu(fake_nvidia_smi, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    env = capture_environment(vllm_python=sys.executable, server_command=[])
    assert (env["gpu_name"], env["gpu_count"], env["gpu_memory_mb"]) == ("NVIDIA L4", 1, 23034)
    assert (env["gpu_driver"], env["cuda_version"]) == ("535.104.05", "12.4")
    assert "--id=1" in fake_nvidia_smi.read_text()


def test_no_visible_gpu_skips_nvidia_smi(fake_nvidia_smi, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    env = capture_environment(vllm_python=sys.executable, server_command=[])
    assert env["gpu_count"] == 0
    assert not fake_nvidia_smi.exists()


def test_capture_records_the_cpu_binding(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    binding = {"engine_cores": "1", "client_cores": [0], "env": {"VLLM_CPU_OMP_THREADS_BIND": "1"}}
    env = capture_environment(vllm_python=sys.executable, server_command=[], cpu_binding=binding)
    assert env["cpu_binding"] == binding


# ---------------------------------------------------------------- the GPUs as the vLLM interpreter's torch sees them


@pytest.fixture
def fake_vllm_python(tmp_path):
    """An interpreter whose `torch` is a stand-in that sees two GPUs unless CUDA_VISIBLE_DEVICES
    names one, as CUDA does."""
    torch = tmp_path / "site" / "torch"
    torch.mkdir(parents=True)
    (torch / "__init__.py").write_text(
        "import os\n"
        "class _Props:\n"
        "    def __init__(self, index):\n"
        "        self.name, self.total_memory = f'NVIDIA H100 #{index}', 81559 * 2**20\n"
        "class cuda:\n"
        "    @staticmethod\n"
        "    def is_available(): return True\n"
        "    @staticmethod\n"
        "    def device_count(): return len(os.environ.get('CUDA_VISIBLE_DEVICES', '0,1').split(','))\n"
        "    @staticmethod\n"
        "    def get_device_properties(index): return _Props(index)\n"
    )
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={tmp_path / "site"} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    return str(python)


def test_the_gpus_are_the_ones_the_vllm_interpreters_torch_sees(fake_vllm_python, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)  # no nvidia-smi on the worker's PATH
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    assert envinfo.gpu_info(fake_vllm_python) == {
        "gpu_name": "NVIDIA H100 #0", "gpu_count": 2, "gpu_memory_mb": 81559, "gpu_driver": "", "cuda_version": "",
    }  # fmt: skip
    assert envinfo.cuda_visible(fake_vllm_python)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert envinfo.gpu_info(fake_vllm_python)["gpu_count"] == 1


def test_torch_answers_before_nvidia_smi_and_nvidia_smi_adds_the_driver(fake_vllm_python, fake_nvidia_smi, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    info = envinfo.gpu_info(fake_vllm_python)

    assert (info["gpu_name"], info["gpu_count"]) == ("NVIDIA H100 #0", 2)  # not nvidia-smi's L4
    assert (info["gpu_driver"], info["cuda_version"]) == ("535.104.05", "12.4")


def test_a_torch_that_sees_no_gpu_is_a_cpu_host_even_beside_nvidia_smi(fake_nvidia_smi, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(envinfo, "torch_gpus", lambda python: [])

    assert envinfo.gpu_info("/opt/vllm/bin/python")["gpu_count"] == 0
    assert not envinfo.cuda_visible("/opt/vllm/bin/python")


def test_where_torch_cannot_be_asked_nvidia_smi_decides(fake_nvidia_smi, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    assert envinfo.torch_gpus(sys.executable) is None  # this environment has no torch
    assert envinfo.gpu_info(sys.executable)["gpu_name"] == "NVIDIA L4"
    assert envinfo.cuda_visible(sys.executable)
