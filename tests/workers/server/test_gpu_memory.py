import os
import sys
import textwrap

import pytest

from workers.server import gpu_memory
from workers.server.gpu_memory import Gpu, GpuProcess, Probe, Snapshot, is_memory_refusal

# vLLM 0.32.0's refusals as its server logs them: the f-strings of the named files (line of the
# message), with values filled in as a GPU host would.
REFUSALS = {
    # vllm/v1/worker/utils.py:763, request_memory(): the check at every start.
    "utils.py:763": "(EngineCore_DP0 pid=812) ERROR [core.py:1012] ValueError: Free memory on device cuda:0 "
    "(3.12/79.19 GiB) on startup is less than desired GPU memory utilization (0.92, 72.85 GiB). "
    "Decrease GPU memory utilization or reduce GPU memory used by other processes.",
    # vllm/v1/worker/utils.py:742, the same with weights held outside the process.
    "utils.py:742": "ValueError: Free memory on device cuda:1 (10.00/79.19 GiB) on startup is less than the "
    "engine's budget after excluding external process's weights (0.92, 60.00 GiB). Decrease GPU memory "
    "utilization or reduce GPU memory used by other processes.",
    # vllm/v1/worker/gpu_worker.py:719, memory released by another process while vLLM profiled.
    "gpu_worker.py:719": "AssertionError: Error in memory profiling. Initial free memory 70.1 GiB, current free "
    "memory 75.3 GiB. This happens when other processes sharing the same container release GPU memory while "
    "vLLM is profiling during initialization. To fix this, ensure consistent GPU memory allocation or isolate "
    "vLLM in its own container.",
    # vllm/v1/core/kv_cache_utils.py:1011, _check_enough_kv_cache_memory().
    "kv_cache_utils.py:1011": "(EngineCore_DP0 pid=812) ValueError: No available memory for the cache blocks. "
    "Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory "
    "reservation on the CPU backend, despite its name). See "
    "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
    # vllm/v1/worker/gpu_model_runner.py:5140, torch.cuda.OutOfMemoryError while loading weights.
    "gpu_model_runner.py:5140": "ERROR [gpu_model_runner.py:5148] Failed to load model - not enough GPU memory. "
    "Try lowering --gpu-memory-utilization to free memory for weights, increasing --tensor-parallel-size, or "
    "using --quantization.",
    # vllm/v1/worker/gpu_model_runner.py:5991, around torch's own "CUDA out of memory. Tried to allocate".
    "gpu_model_runner.py:5991": "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 "
    "dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
    # torch's CUDA caching allocator (raised as torch.OutOfMemoryError inside any of vLLM's steps).
    "torch allocator": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 1.02 GiB is free.",
}

# Failures that another try would not mend: a wrong path, a model too long for the KV cache as
# configured (kv_cache_utils.py:1030), vLLM's CPU build short of host memory.
NOT_REFUSALS = [
    "OSError: /models/none does not appear to have a file named config.json",
    "ValueError: To serve at least one request with the model's max seq len (8192), (4.00 GiB KV cache is "
    "needed, which is larger than the available KV cache memory (1.00 GiB). Try increasing `gpu_memory_utilization`",
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    "WARNING [system_utils.py:255] This can cause fd limit errors like `OSError: [Errno 24] Too many open files`.",
]


@pytest.mark.parametrize("line", REFUSALS.values(), ids=REFUSALS.keys())
def test_vllms_memory_refusals_are_read_as_such(line):
    assert is_memory_refusal(f"INFO starting\n{line}\nRuntimeError: Engine core initialization failed.")


@pytest.mark.parametrize("line", NOT_REFUSALS)
def test_other_start_failures_are_not(line):
    assert not is_memory_refusal(line)


def test_nvidia_smi_csv_with_and_without_units():
    apps = "4242, 20480 MiB\n4243, [N/A]\n"
    assert gpu_memory.parse_compute_apps(apps) == [GpuProcess(4242, 20480), GpuProcess(4243, 0)]
    assert gpu_memory.parse_compute_apps("") == []
    assert gpu_memory.parse_gpu_memory("81559, 1200\n81559 MiB, 80000 MiB\n") == [Gpu(81559, 1200), Gpu(81559, 80000)]


def test_a_snapshot_says_who_holds_memory_and_which_gpus_lack_it():
    snapshot = Snapshot(gpus=[Gpu(80000, 75000), Gpu(80000, 70000)], processes=[GpuProcess(7, 9000)])
    assert snapshot.held_by({7, 8}) == [GpuProcess(7, 9000)]
    assert snapshot.held_by({8}) == []
    assert snapshot.short_of(0.9) == [Gpu(80000, 70000)]
    assert snapshot.short_of(0.5) == []


def test_waiting_stops_when_done_at_the_bound_or_when_the_gpus_cannot_be_asked(monkeypatch):
    monkeypatch.setattr(gpu_memory, "POLL_S", 0.01)
    held, free = Snapshot([], [GpuProcess(7, 100)]), Snapshot([], [])
    answers = iter([held, held, free, held])
    ticks = []
    last = gpu_memory.wait_until(
        lambda: next(answers), lambda s: not s.held_by({7}), timeout_s=10, tick=lambda: ticks.append(1)
    )
    assert last == free
    assert len(ticks) == 2
    assert gpu_memory.wait_until(lambda: held, lambda s: not s.held_by({7}), timeout_s=0.05) == held
    assert gpu_memory.wait_until(lambda: None, lambda s: True, timeout_s=10) is None


# A stand-in for vLLM's vendored nvidia-ml-py (vllm/third_party/pynvml.py): two GPUs, one process.
FAKE_PYNVML = textwrap.dedent(
    """
    from types import SimpleNamespace as NS
    GPUS = {"0": (80 << 30, 70 << 30, [NS(pid=4242, usedGpuMemory=9 << 30)]),
            "GPU-b": (40 << 30, 40 << 30, [NS(pid=4243, usedGpuMemory=None)])}
    def nvmlInit(): pass
    def nvmlDeviceGetCount(): return 2
    def nvmlDeviceGetHandleByIndex(i): return ["0", "GPU-b"][i]
    def nvmlDeviceGetHandleByUUID(uuid): return uuid
    def nvmlDeviceGetMemoryInfo(h): return NS(total=GPUS[h][0], free=GPUS[h][1])
    def nvmlDeviceGetComputeRunningProcesses(h): return GPUS[h][2]
    """
)


def test_the_probe_asks_nvml_through_the_vllm_interpreter(tmp_path, monkeypatch):
    (tmp_path / "vllm" / "third_party").mkdir(parents=True)
    (tmp_path / "vllm" / "__init__.py").write_text("raise ImportError('the package itself is never imported')\n")
    (tmp_path / "vllm" / "third_party" / "pynvml.py").write_text(FAKE_PYNVML)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("PATH", "")  # no nvidia-smi to fall back on
    assert Probe(sys.executable).snapshot() == Snapshot(
        gpus=[Gpu(81920, 71680), Gpu(40960, 40960)], processes=[GpuProcess(4242, 9216), GpuProcess(4243, 0)]
    )
    assert Probe(sys.executable, "GPU-b").snapshot() == Snapshot([Gpu(40960, 40960)], [GpuProcess(4243, 0)])


def test_the_probe_falls_back_on_nvidia_smi_and_gives_up_without_it(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    fake = tmp_path / "nvidia-smi"
    fake.write_text(
        textwrap.dedent(
            f"""\
            #!{sys.executable}
            import sys
            open({str(calls)!r}, "a").write(" ".join(sys.argv[1:]) + "\\n")
            print("4242, 512" if "--query-compute-apps=pid,used_memory" in sys.argv else "81559, 81000")
            """
        )
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    no_vllm = os.devnull  # not an interpreter: NVML cannot be asked
    assert Probe(no_vllm, "1").snapshot() == Snapshot([Gpu(81559, 81000)], [GpuProcess(4242, 512)])
    assert all(line.endswith("--id=1") for line in calls.read_text().splitlines())
    monkeypatch.setenv("PATH", "")
    assert Probe(no_vllm).snapshot() is None
