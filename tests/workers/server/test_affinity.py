import os
import subprocess
import sys
import threading
import time

import pytest

from workers.server import affinity
from workers.server.affinity import CpuBinding, core_list, pinned, plan_binding


def test_the_client_gets_the_first_core_and_the_engine_the_rest():
    binding = plan_binding({3, 0, 1, 2})
    assert binding == CpuBinding(client_cores=(0,), engine_cores=(1, 2, 3))
    assert binding.env == {"VLLM_CPU_OMP_THREADS_BIND": "1-3"}


def test_two_cores_give_the_engine_core_one():
    binding = plan_binding({0, 1})
    assert binding.record() == {
        "engine_cores": "1",
        "client_cores": [0],
        "env": {"VLLM_CPU_OMP_THREADS_BIND": "1"},
    }


def test_a_restricted_worker_splits_the_cores_it_was_given():
    assert plan_binding({4, 6, 7}) == CpuBinding(client_cores=(4,), engine_cores=(6, 7))


def test_one_core_means_no_binding():
    assert plan_binding({5}) is None
    assert plan_binding([]) is None


def test_core_list_is_in_the_form_vllm_parses():
    assert core_list([1]) == "1"
    assert core_list([3, 1, 2]) == "1-3"
    assert core_list([0, 1, 2, 4, 7, 8]) == "0-2,4,7-8"
    assert core_list([5, 5, 9]) == "5,9"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_pinned_restricts_the_thread_and_its_new_threads_then_restores():
    before = os.sched_getaffinity(0)
    core = min(before)
    seen_in_thread = []
    with pinned([core]):
        assert os.sched_getaffinity(0) == {core}
        thread = threading.Thread(target=lambda: seen_in_thread.append(os.sched_getaffinity(0)))
        thread.start()
        thread.join()
    assert seen_in_thread == [{core}]
    assert os.sched_getaffinity(0) == before


def test_pinned_restores_after_an_error():
    before = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError), pinned([min(before)]):
        raise RuntimeError("load failed")
    assert os.sched_getaffinity(0) == before


def test_usable_cores_are_this_process_affinity():
    assert affinity.usable_cores() == os.sched_getaffinity(0)


def test_each_placement_names_the_cores_of_the_api_server_and_the_engine_core():
    binding = CpuBinding(client_cores=(0,), engine_cores=(1, 2, 3))
    cores = {mode: affinity.ServerPlacement(binding, mode).cores() for mode in affinity.PLACEMENTS}
    assert cores == {
        "unbound": (None, None),
        "front": ({0}, {0}),
        "split": ({0}, {1, 2, 3}),
        "engine": ({1, 2, 3}, {1, 2, 3}),
    }
    # The default keeps vLLM's API server off the cores its busy-waiting engine core shares with
    # the engine's threads (docs/metrics.md, "Stream fidelity").
    assert affinity.DEFAULT_PLACEMENT == "split"


def test_the_server_env_sizes_nothing_vllm_would_override():
    binding = plan_binding({0, 1})
    assert affinity.server_env(binding) == {
        "VLLM_CPU_KVCACHE_SPACE": None,
        "VLLM_WORKER_MULTIPROC_METHOD": "fork",
        "VLLM_CPU_OMP_THREADS_BIND": "1",
    }
    assert affinity.server_env(None, fork_engine=False) == {"VLLM_CPU_KVCACHE_SPACE": None}


# A process group shaped like a vLLM server's: the leader (the API server) starts a child that
# names itself as vLLM's engine core does, and one that does not (as the engine's worker).
_GROUP = """
import subprocess, sys, time
code = "import sys, time; open('/proc/self/comm', 'w').write(sys.argv[1]); time.sleep(60)"
children = [subprocess.Popen([sys.executable, "-c", code, name]) for name in ("VLLM::EngineCore", "VLLM::Worker")]
print(" ".join(str(c.pid) for c in children), flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores")
def test_placement_binds_every_thread_of_the_api_server_and_the_engine_core_only():
    client, engine = sorted(os.sched_getaffinity(0))[:2]
    leader = subprocess.Popen([sys.executable, "-c", _GROUP], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        engine_core, worker = map(int, leader.stdout.readline().split())
        deadline = time.monotonic() + 10
        while affinity.process_name(engine_core) != affinity.ENGINE_CORE_NAME and time.monotonic() < deadline:
            time.sleep(0.05)
        placed = affinity.ServerPlacement(CpuBinding((client,), (engine,)), "split").apply(leader.pid)
        assert placed == {"api_server": [client], "engine_core": [engine]}
        assert os.sched_getaffinity(leader.pid) == {client}
        assert os.sched_getaffinity(engine_core) == {engine}
        assert os.sched_getaffinity(worker) == os.sched_getaffinity(0)  # vLLM binds the worker's threads itself
    finally:
        os.killpg(leader.pid, 9)
        leader.wait()
