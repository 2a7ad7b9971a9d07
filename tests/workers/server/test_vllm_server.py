"""The vLLM server's process group (workers/server/vllm_server.py), with a stand-in server:
health, stop on every path, GPU memory between servers, a start refused for GPU memory,
cancels, pid records and the log's tail."""

import os
import signal
import time
from pathlib import Path

import pytest

from tests.workers.server.stand_in import FAKE_SERVER, fake_args, group_gone, owner_process
from workers.server import gpu_memory, vllm_server
from workers.server.command import ServerLaunch
from workers.server.vllm_server import ServerStartError, VllmServer


def _server(args: list[str], log_path: Path, *, stop_check=None, gpu_probe=None, **launch) -> VllmServer:
    """A VllmServer that runs a launch of `args` (ServerLaunch's other fields in `launch`)."""
    return VllmServer(ServerLaunch(args, log_path=log_path, **launch), stop_check=stop_check, gpu_probe=gpu_probe)


def test_child_env_lays_the_given_env_over_the_workers(monkeypatch, tmp_path):
    # The launch decides the server's variables (workers.server.launch.server_env), none comes
    # from a default in this module; one given as None is removed (the launch keeps vLLM's
    # VLLM_CPU_KVCACHE_SPACE out, which would override --kv-cache-memory-bytes).
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.setenv("SPECDASH_SOMETHING", "kept")
    args = ["python", "--port", "1"]
    assert "VLLM_CPU_KVCACHE_SPACE" not in _server(args, log_path=tmp_path / "log").child_env()
    given = _server(args, log_path=tmp_path / "log", env={"VLLM_CPU_KVCACHE_SPACE": "8", "X": "1"}).child_env()
    assert (given["VLLM_CPU_KVCACHE_SPACE"], given["X"], given["SPECDASH_SOMETHING"]) == ("8", "1", "kept")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    overridden = _server(args, log_path=tmp_path / "log", env={"VLLM_CPU_KVCACHE_SPACE": "8"}).child_env()
    assert overridden["VLLM_CPU_KVCACHE_SPACE"] == "8"
    removed = _server(args, log_path=tmp_path / "log", env={"VLLM_CPU_KVCACHE_SPACE": None}).child_env()
    assert "VLLM_CPU_KVCACHE_SPACE" not in removed


def _fake(tmp_path, *extra, script=FAKE_SERVER, timeout=30.0):
    return _server(fake_args(*extra, script=script), log_path=tmp_path / "server.log", start_timeout_s=timeout)


def test_server_is_healthy_then_its_whole_group_is_stopped(tmp_path):
    with _fake(tmp_path) as server:
        pgid = server.pid
        assert not group_gone(pgid)
        assert server.base_url == f"http://127.0.0.1:{server.port}"
    assert group_gone(pgid)
    assert "fake server listening" in server.log_tail()


def test_a_healthy_server_says_how_long_it_took_from_launch_to_answering_health(tmp_path):
    slow = "import time; time.sleep(1.5)\n" + FAKE_SERVER
    server = _fake(tmp_path, script=slow)
    assert server.start_s is None
    with server:
        assert 1.5 <= server.start_s < 30


def test_sigkill_follows_an_ignored_sigterm(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_server, "STOP_GRACE_S", 0.5)
    with _fake(tmp_path, "--ignore-sigterm") as server:
        pgid = server.pid
    assert group_gone(pgid)


# As FAKE_SERVER, but its engine child ignores SIGTERM while the leader exits on it.
CHILD_IGNORES_SIGTERM = FAKE_SERVER.replace(
    '"import time; time.sleep(600)"',
    '"import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"',
)


def test_stop_waits_for_every_process_of_the_group_not_only_the_leader(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_server, "STOP_GRACE_S", 0.5)
    with _fake(tmp_path, script=CHILD_IGNORES_SIGTERM) as server:
        pgid = server.pid
        time.sleep(0.3)  # the child sets its handler
        assert len(vllm_server.group_pids(pgid)) == 2
    assert vllm_server.group_pids(pgid) == []


def _drop_sigkill(monkeypatch):
    """Signals as sent, but SIGKILL never arrives: a group stuck in the kernel (state D)."""
    send = vllm_server.VllmServer._signal_group

    def signal_group(pgid, sig):
        if sig != signal.SIGKILL:
            send(pgid, sig)

    monkeypatch.setattr(vllm_server.VllmServer, "_signal_group", staticmethod(signal_group))


def test_a_group_that_outlives_sigkill_is_logged_and_blocks_later_starts(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(vllm_server, "STOP_GRACE_S", 0.3)
    monkeypatch.setattr(vllm_server, "KILL_WAIT_S", 0.3)
    monkeypatch.setattr(vllm_server, "_unkillable", set())
    _drop_sigkill(monkeypatch)
    pid_dir = tmp_path / "pids"
    server = _server(fake_args("--ignore-sigterm"), log_path=tmp_path / "server.log", pid_dir=pid_dir)
    with server:
        pgid = server.pid
    try:
        assert vllm_server.group_pids(pgid)  # stop() returned, loudly, without pretending
        assert f"vLLM server (process group {pgid}) outlived SIGKILL" in caplog.text
        assert f"pid {pgid} in state" in caplog.text
        assert (pid_dir / f"{pgid}.pid").exists()  # for the next worker process's clean-up
        later = _fake(tmp_path)
        with pytest.raises(ServerStartError) as caught, later:
            pass
        assert "outlived SIGKILL" in caught.value.message
        assert f"process group {pgid}" in caught.value.message
        assert later.pid is None  # nothing was started
    finally:
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while vllm_server.group_pids(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    with _fake(tmp_path) as again:  # once the survivors are gone, servers start again
        assert again.pid is not None


class FakeGpus:
    """Stands in for gpu_memory.Probe: each snapshot() answers with the next of `answers`, the
    last one from then on; each answer is a function of the call's moment."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = 0

    def snapshot(self):
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return answer()


def test_stop_waits_until_the_gpu_releases_the_groups_memory(tmp_path, monkeypatch, caplog):
    caplog.set_level("INFO")
    monkeypatch.setattr(gpu_memory, "POLL_S", 0.01)
    members: list[int] = []
    seen_alive = []

    def held():
        seen_alive.append(vllm_server.group_pids(members[0]))
        return gpu_memory.Snapshot([], [gpu_memory.GpuProcess(members[-1], 20480), gpu_memory.GpuProcess(1, 5)])

    def released():
        return gpu_memory.Snapshot([], [gpu_memory.GpuProcess(1, 5)])  # another tenant's

    gpus = FakeGpus(held, held, held, released)
    with _server(fake_args(), log_path=tmp_path / "server.log", gpu_probe=gpus) as server:
        time.sleep(0.3)
        members += vllm_server.group_pids(server.pid)
    assert gpus.calls == 4
    assert seen_alive == [[], [], []]  # asked only once every process of the group had ended
    assert f"pid {members[-1]} (20480 MiB)" in caplog.text
    assert "GPU memory of the stopped vLLM server released after" in caplog.text


def test_memory_the_gpu_never_releases_is_waited_for_up_to_the_bound(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(gpu_memory, "POLL_S", 0.01)
    monkeypatch.setattr(vllm_server, "GPU_RELEASE_S", 0.2)
    leader: list[int] = []
    held = FakeGpus(lambda: gpu_memory.Snapshot([], [gpu_memory.GpuProcess(leader[0], 20480)]))
    started = time.monotonic()
    with _server(fake_args(), log_path=tmp_path / "server.log", gpu_probe=held) as server:
        leader.append(server.pid)
    assert time.monotonic() - started < 10
    assert held.calls > 2
    assert "still held after 0 s" in caplog.text
    # Memory of processes that are not the server's is none of its stop's business.
    other = FakeGpus(lambda: gpu_memory.Snapshot([], [gpu_memory.GpuProcess(1, 20480)]))
    with _server(fake_args(), log_path=tmp_path / "other.log", gpu_probe=other):
        pass
    assert other.calls == 1


def test_a_gpu_host_gets_a_probe_and_a_cpu_host_none(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_server, "cuda_visible", lambda python: True)
    server = _server(["/bin/true", "--port", "1"], log_path=tmp_path / "log", env={"CUDA_VISIBLE_DEVICES": "2,3"})
    server.start()
    server.stop()
    assert isinstance(server.gpu_probe, gpu_memory.Probe)
    assert (server.gpu_probe.vllm_python, server.gpu_probe.visible_devices) == ("/bin/true", "2,3")
    monkeypatch.setattr(vllm_server, "cuda_visible", lambda python: False)
    cpu = _server(["/bin/true", "--port", "1"], log_path=tmp_path / "log")
    cpu.start()
    cpu.stop()
    assert cpu.gpu_probe is None


# vllm/v1/worker/utils.py:763 (request_memory), as a GPU host logs it.
VLLM_REFUSAL = (
    "ValueError: Free memory on device cuda:0 (3.12/79.19 GiB) on startup is less than desired GPU memory "
    "utilization (0.92, 72.85 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
)


def _refused_then_serving(tmp_path, refusals: int, line: str = VLLM_REFUSAL) -> str:
    """A stand-in server refused for memory on its first `refusals` starts, healthy after."""
    starts = tmp_path / "starts"
    prelude = (
        f"import sys; from pathlib import Path; starts = Path({str(starts)!r}); "
        f"starts.write_text(starts.read_text() + 'x' if starts.exists() else 'x')\n"
        f"if len(starts.read_text()) <= {refusals}:\n    print({line!r}, flush=True); sys.exit(1)\n"
    )
    return prelude + FAKE_SERVER


def _gpus_freed_after(polls: int) -> FakeGpus:
    busy = gpu_memory.Snapshot([gpu_memory.Gpu(81000, 3200)], [])
    free = gpu_memory.Snapshot([gpu_memory.Gpu(81000, 80000)], [])
    return FakeGpus(*[lambda: busy] * polls, lambda: free)


def test_a_start_refused_for_gpu_memory_waits_and_is_made_once_more(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_memory, "POLL_S", 0.01)
    gpus = _gpus_freed_after(3)
    server = _server(
        fake_args(script=_refused_then_serving(tmp_path, 1)), log_path=tmp_path / "server.log", gpu_probe=gpus
    )
    with server:
        assert server._health_ok()
        assert gpus.calls == 4  # until 92% of the GPU was free
    assert (tmp_path / "starts").read_text() == "xx"
    assert VLLM_REFUSAL in (tmp_path / "server.refused.log").read_text()  # the first start's log is kept
    assert "fake server listening" in server.log_tail()


def test_a_second_refusal_fails_saying_a_retry_was_made(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_memory, "POLL_S", 0.01)
    monkeypatch.setattr(vllm_server, "GPU_FREE_WAIT_S", 0.1)
    script = _refused_then_serving(tmp_path, 2)
    server = _server(fake_args(script=script), log_path=tmp_path / "server.log", gpu_probe=_gpus_freed_after(99))
    with pytest.raises(ServerStartError) as caught, server:
        pass
    assert (tmp_path / "starts").read_text() == "xx"  # once more, not again and again
    assert "exited with code 1" in caught.value.message
    assert "retried once: the first start was refused for want of GPU memory" in caught.value.message
    assert "without 92% of each GPU free" in caught.value.message
    assert VLLM_REFUSAL in caught.value.log_tail
    assert server.pid is None


def test_other_failures_and_cpu_hosts_get_no_second_start(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_memory, "POLL_S", 0.01)
    other = _refused_then_serving(tmp_path, 1, line="OSError: no config.json in /models/x")
    with (
        pytest.raises(ServerStartError),
        _server(fake_args(script=other), log_path=tmp_path / "server.log", gpu_probe=_gpus_freed_after(0)),
    ):
        pass
    assert (tmp_path / "starts").read_text() == "x"
    (tmp_path / "starts").unlink()
    monkeypatch.setattr(vllm_server, "cuda_visible", lambda python: False)
    with (
        pytest.raises(ServerStartError),
        _server(fake_args(script=_refused_then_serving(tmp_path, 1)), log_path=tmp_path / "cpu.log"),
    ):
        pass
    assert (tmp_path / "starts").read_text() == "x"


def test_early_exit_raises_with_the_log_tail(tmp_path):
    script = "import sys; print('no such model: /nowhere'); sys.exit(3)"
    server = _fake(tmp_path, script=script)
    with pytest.raises(ServerStartError) as caught, server:
        pass
    assert "code 3" in caught.value.message
    assert "no such model: /nowhere" in caught.value.log_tail
    assert "no such model" in str(caught.value)


def test_start_timeout_raises_and_stops_the_group(tmp_path):
    server = _fake(tmp_path, script="import time; print('loading', flush=True); time.sleep(600)", timeout=1.0)
    server.start()
    pgid = server.pid
    started = time.monotonic()
    with pytest.raises(ServerStartError) as caught:
        server.wait_healthy()
    assert time.monotonic() - started < 10
    assert "not healthy" in caught.value.message
    assert "loading" in caught.value.log_tail
    assert group_gone(pgid)


class _Cancelled(Exception):
    pass


def test_a_cancel_while_the_server_starts_stops_it_within_a_poll(tmp_path):
    # A server that would load for ten minutes, as a large model on a GPU host does; the run is
    # cancelled two seconds in.
    script = (
        "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        "time.sleep(600)"
    )
    cancel_at = time.monotonic() + 2.0

    def stop_check():
        if time.monotonic() >= cancel_at:
            raise _Cancelled("experiment 7 was cancelled")

    server = _server(
        fake_args(script=script), log_path=tmp_path / "server.log", start_timeout_s=600, stop_check=stop_check
    )
    server.start()
    pgid = server.pid
    with pytest.raises(_Cancelled):
        server.wait_healthy()
    server.stop()  # as __enter__ does on any error of wait_healthy
    stopped = time.monotonic() - cancel_at
    assert stopped < 2 * vllm_server.HEALTH_POLL_S + 1.0  # the next poll, and the group's SIGTERM
    assert server.pid is None
    assert group_gone(pgid)  # every process of its group with it
    # Entered as the runner enters it, the cancel propagates and the server is stopped.
    cancel_at = time.monotonic()
    entered = _server(fake_args(script=script), log_path=tmp_path / "again.log", stop_check=stop_check)
    with pytest.raises(_Cancelled), entered:
        pytest.fail("a cancelled start must not run its body")
    assert entered.pid is None


def test_sigterm_to_the_owner_stops_the_server(tmp_path):
    proc = owner_process(tmp_path, fake_args())
    try:
        pgid = int(proc.stdout.readline())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        proc.kill()
    assert group_gone(pgid)


def test_a_server_is_recorded_in_the_pid_dir_while_it_runs(tmp_path):
    pid_dir = tmp_path / "pids"
    with _server(fake_args("vllm-fake"), log_path=tmp_path / "server.log", pid_dir=pid_dir) as server:
        record = pid_dir / f"{server.pid}.pid"
        assert list(pid_dir.iterdir()) == [record]
        assert "vllm-fake" in record.read_text()
    assert list(pid_dir.iterdir()) == []


def test_the_log_tail_leads_with_the_first_exception_logged_above_it(tmp_path):
    # As vLLM's CPU build logs a KV cache larger than the host: a worker process raises the
    # reason, a hundred lines later the API server ends with a generic "see above".
    lines = [
        "(APIServer pid=1) WARNING [system_utils.py:255] This can cause fd limit errors like `OSError: [Errno 24] Too many open files`.",  # noqa: E501
        *[f"(EngineCore pid=2) INFO loading {n}" for n in range(10)],
        "(VllmWorker-0 pid=3) ERROR [multiproc_executor.py:953] ValueError: Available memory on node 0 (20.26/23.54 GiB) is less than requested memory for kv (4096.0 GiB).",  # noqa: E501
        *[f"(EngineCore pid=2) ERROR traceback line {n}" for n in range(100)],
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(lines) + "\n")
    server = _server(["/bin/true", "--port", "1"], log_path=log)
    tail = server.log_tail().splitlines()
    assert tail[0] == lines[11]  # the reason, not the warning that only names an exception
    assert tail[1] == "[...]"
    assert tail[2:] == lines[-40:]
    # Nothing raised above the tail: just the tail.
    log.write_text("\n".join(lines[:11] + lines[12:]) + "\n")
    assert server.log_tail().splitlines() == (lines[:11] + lines[12:])[-40:]
    # A short log is all tail.
    log.write_text("\n".join(lines[10:13]) + "\n")
    assert server.log_tail().splitlines() == lines[10:13]
