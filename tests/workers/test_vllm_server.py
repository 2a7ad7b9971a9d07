import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from celery.signals import worker_process_init

from workers import runner, tasks
from workers.server import gpu_memory, vllm_server
from workers.server.vllm_server import ServerStartError, VllmServer, build_server_args, free_port

REPO = Path(__file__).resolve().parents[2]
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 5}


def _args(**overrides):
    kwargs = {
        "python": "/venv/bin/python", "model": "/models/target", "port": 18771, "dtype": "float32",
        "max_model_len": 512, "seed": 7, "speculative_config": None, "enforce_eager": False,
    }  # fmt: skip
    return build_server_args(**{**kwargs, **overrides})


def _value(args, flag):
    return args[args.index(flag) + 1]


def test_baseline_args():
    args = _args()
    assert args[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert _value(args, "--model") == "/models/target"
    assert _value(args, "--served-model-name") == "target"
    assert (_value(args, "--host"), _value(args, "--port")) == ("127.0.0.1", "18771")
    assert (_value(args, "--dtype"), _value(args, "--max-model-len"), _value(args, "--seed")) == ("float32", "512", "7")
    assert "--no-enable-prefix-caching" in args
    assert "--speculative-config" not in args
    assert "--per-request-spec-decode-metrics" not in args
    assert "--enforce-eager" not in args
    assert "--kv-cache-memory-bytes" not in args
    assert "--enable-per-request-metrics" in args  # the engine's decode time, for every arm
    assert all(isinstance(arg, str) for arg in args)


def test_tensor_parallel_size_is_passed_above_one():
    assert "--tensor-parallel-size" not in _args(tensor_parallel_size=1)
    assert _value(_args(tensor_parallel_size=4), "--tensor-parallel-size") == "4"


def test_kv_cache_size_in_bytes():
    assert _value(_args(kv_cache_bytes=6_000_000), "--kv-cache-memory-bytes") == "6000000"


def test_only_the_server_settings_that_are_set_are_passed():
    args = _args(
        engine_settings={
            "gpu_memory_utilization": 0.85, "max_num_seqs": 64, "max_num_batched_tokens": None,
            "kv_cache_dtype": "fp8", "quantization": "",
        }
    )  # fmt: skip
    assert _value(args, "--gpu-memory-utilization") == "0.85"
    assert _value(args, "--max-num-seqs") == "64"
    assert _value(args, "--kv-cache-dtype") == "fp8"
    assert "--max-num-batched-tokens" not in args
    assert "--quantization" not in args


def test_no_server_settings_leave_every_one_to_vllm():
    flags = {"--gpu-memory-utilization", "--max-num-seqs", "--max-num-batched-tokens", "--kv-cache-dtype"}
    assert not flags & set(_args())
    assert not flags & set(_args(engine_settings={}))


def test_speculative_args_carry_the_config_as_json():
    args = _args(speculative_config=NGRAM, served_model_name="arm-1")
    assert json.loads(_value(args, "--speculative-config")) == NGRAM
    assert _value(args, "--per-request-spec-decode-metrics") == "detailed"
    assert _value(args, "--served-model-name") == "arm-1"


def test_enforce_eager_and_prefix_caching_switches():
    assert "--enforce-eager" in _args(enforce_eager=True)
    assert "--enable-prefix-caching" in _args(prefix_caching=True)


def test_enforce_eager_defaults_to_cpu_only(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "--enforce-eager" in _args(enforce_eager=None)
    monkeypatch.setattr(vllm_server, "cuda_visible", lambda python=None: True)
    assert "--enforce-eager" not in _args(enforce_eager=None)  # a GPU keeps its CUDA graphs


@pytest.mark.parametrize("gpu", [True, False])
def test_an_explicit_enforce_eager_wins_on_any_host(monkeypatch, gpu):
    monkeypatch.setattr(vllm_server, "cuda_visible", lambda python=None: gpu)
    assert "--enforce-eager" in _args(enforce_eager=True)
    assert "--enforce-eager" not in _args(enforce_eager=False)


def test_free_port_skips_a_taken_candidate():
    taken = free_port()
    with socket.create_server(("127.0.0.1", taken)):
        other = free_port([taken, *range(18770, 18780)])
        assert other != taken
    assert free_port() > 0


def test_child_env_lays_the_given_env_over_the_workers(monkeypatch, tmp_path):
    # The runner decides the server's variables (workers.runner.server_env), none comes from a
    # default in this module; one given as None is removed (the runner keeps vLLM's
    # VLLM_CPU_KVCACHE_SPACE out, which would override --kv-cache-memory-bytes).
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.setenv("SPECDASH_SOMETHING", "kept")
    args = ["python", "--port", "1"]
    assert "VLLM_CPU_KVCACHE_SPACE" not in VllmServer(args, log_path=tmp_path / "log").child_env()
    given = VllmServer(args, log_path=tmp_path / "log", env={"VLLM_CPU_KVCACHE_SPACE": "8", "X": "1"}).child_env()
    assert (given["VLLM_CPU_KVCACHE_SPACE"], given["X"], given["SPECDASH_SOMETHING"]) == ("8", "1", "kept")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    overridden = VllmServer(args, log_path=tmp_path / "log", env={"VLLM_CPU_KVCACHE_SPACE": "8"}).child_env()
    assert overridden["VLLM_CPU_KVCACHE_SPACE"] == "8"
    removed = VllmServer(args, log_path=tmp_path / "log", env={"VLLM_CPU_KVCACHE_SPACE": None}).child_env()
    assert "VLLM_CPU_KVCACHE_SPACE" not in removed


# --- process handling, with a stand-in server ------------------------------------------

# Answers GET /health, and starts a child of its own like vLLM's engine process.
FAKE_SERVER = textwrap.dedent(
    """
    import http.server, signal, subprocess, sys
    if "--ignore-sigterm" in sys.argv:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    port = int(sys.argv[sys.argv.index("--port") + 1])
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *args):
            pass
    print("fake server listening", flush=True)
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
    """
)


def _group_gone(pgid: int) -> bool:
    """No process of the group runs: every member, read from /proc, not only the leader (a
    zombie has ended; it waits for init to reap it)."""
    return _running_members(pgid) == []


def _fake_args(*extra, script=FAKE_SERVER) -> list[str]:
    return [sys.executable, "-c", script, "--port", str(free_port()), *extra]


def _fake(tmp_path, *extra, script=FAKE_SERVER, timeout=30.0):
    return VllmServer(_fake_args(*extra, script=script), log_path=tmp_path / "server.log", start_timeout_s=timeout)


def _owner(tmp_path, args: list[str], pid_dir: Path | None = None) -> subprocess.Popen:
    """Another process that starts a server on `args` as a worker does, prints its process
    group once it is healthy, then sleeps."""
    code = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from workers.server.vllm_server import VllmServer
        log_path = Path({str(tmp_path / "server.log")!r})
        server = VllmServer({args!r}, log_path=log_path, start_timeout_s=30, pid_dir={pid_dir and str(pid_dir)!r})
        server.__enter__()
        print(server.pid, flush=True)
        time.sleep(600)
        """
    )
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def test_server_is_healthy_then_its_whole_group_is_stopped(tmp_path):
    with _fake(tmp_path) as server:
        pgid = server.pid
        assert not _group_gone(pgid)
        assert server.base_url == f"http://127.0.0.1:{server.port}"
    assert _group_gone(pgid)
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
    assert _group_gone(pgid)


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
    server = VllmServer(_fake_args("--ignore-sigterm"), log_path=tmp_path / "server.log", pid_dir=pid_dir)
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
    with VllmServer(_fake_args(), log_path=tmp_path / "server.log", gpu_probe=gpus) as server:
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
    with VllmServer(_fake_args(), log_path=tmp_path / "server.log", gpu_probe=held) as server:
        leader.append(server.pid)
    assert time.monotonic() - started < 10
    assert held.calls > 2
    assert "still held after 0 s" in caplog.text
    # Memory of processes that are not the server's is none of its stop's business.
    other = FakeGpus(lambda: gpu_memory.Snapshot([], [gpu_memory.GpuProcess(1, 20480)]))
    with VllmServer(_fake_args(), log_path=tmp_path / "other.log", gpu_probe=other):
        pass
    assert other.calls == 1


def test_a_gpu_host_gets_a_probe_and_a_cpu_host_none(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_server, "cuda_visible", lambda python: True)
    server = VllmServer(["/bin/true", "--port", "1"], log_path=tmp_path / "log", env={"CUDA_VISIBLE_DEVICES": "2,3"})
    server.start()
    server.stop()
    assert isinstance(server.gpu_probe, gpu_memory.Probe)
    assert (server.gpu_probe.vllm_python, server.gpu_probe.visible_devices) == ("/bin/true", "2,3")
    monkeypatch.setattr(vllm_server, "cuda_visible", lambda python: False)
    cpu = VllmServer(["/bin/true", "--port", "1"], log_path=tmp_path / "log")
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
    server = VllmServer(
        _fake_args(script=_refused_then_serving(tmp_path, 1)), log_path=tmp_path / "server.log", gpu_probe=gpus
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
    server = VllmServer(_fake_args(script=script), log_path=tmp_path / "server.log", gpu_probe=_gpus_freed_after(99))
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
        VllmServer(_fake_args(script=other), log_path=tmp_path / "server.log", gpu_probe=_gpus_freed_after(0)),
    ):
        pass
    assert (tmp_path / "starts").read_text() == "x"
    (tmp_path / "starts").unlink()
    monkeypatch.setattr(vllm_server, "cuda_visible", lambda python: False)
    with (
        pytest.raises(ServerStartError),
        VllmServer(_fake_args(script=_refused_then_serving(tmp_path, 1)), log_path=tmp_path / "cpu.log"),
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
    assert _group_gone(pgid)


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

    server = VllmServer(
        _fake_args(script=script), log_path=tmp_path / "server.log", start_timeout_s=600, stop_check=stop_check
    )
    server.start()
    pgid = server.pid
    with pytest.raises(_Cancelled):
        server.wait_healthy()
    server.stop()  # as __enter__ does on any error of wait_healthy
    stopped = time.monotonic() - cancel_at
    assert stopped < 2 * vllm_server.HEALTH_POLL_S + 1.0  # the next poll, and the group's SIGTERM
    assert server.pid is None
    assert _group_gone(pgid)  # every process of its group with it
    # Entered as the runner enters it, the cancel propagates and the server is stopped.
    cancel_at = time.monotonic()
    entered = VllmServer(_fake_args(script=script), log_path=tmp_path / "again.log", stop_check=stop_check)
    with pytest.raises(_Cancelled), entered:
        pytest.fail("a cancelled start must not run its body")
    assert entered.pid is None


def test_sigterm_to_the_owner_stops_the_server(tmp_path):
    proc = _owner(tmp_path, _fake_args())
    try:
        pgid = int(proc.stdout.readline())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM
    finally:
        proc.kill()
    assert _group_gone(pgid)


def _sleeper(*marker: str) -> subprocess.Popen:
    """A process group of its own, with `marker` on its command line."""
    code = "import time; time.sleep(60)"
    return subprocess.Popen([sys.executable, "-c", code, *marker], start_new_session=True)


def _running_members(pgid: int) -> list[int]:
    """The group's processes that still run: an orphan's zombie waits for init to reap it."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError, ValueError):
            continue
        if int(group) == pgid and state != "Z":
            members.append(int(stat.parent.name))
    return members


def test_a_server_is_recorded_in_the_pid_dir_while_it_runs(tmp_path):
    pid_dir = tmp_path / "pids"
    with VllmServer(_fake_args("vllm-fake"), log_path=tmp_path / "server.log", pid_dir=pid_dir) as server:
        record = pid_dir / f"{server.pid}.pid"
        assert list(pid_dir.iterdir()) == [record]
        assert "vllm-fake" in record.read_text()
    assert list(pid_dir.iterdir()) == []


@contextlib.contextmanager
def _orphaned_server(tmp_path, pid_dir: Path):
    """A stand-in server recorded in `pid_dir` whose owner was killed (SIGKILL: the worker
    process cleans nothing up), beside a record whose process id was reused by a stranger.
    Yields the server's process group and the stranger; kills whatever is left on exit."""
    # The stand-in server has "vllm" in its command line, as the orphan check requires.
    owner = _owner(tmp_path, _fake_args("vllm-fake"), pid_dir)
    stranger = _sleeper("not-ours")
    pgid = None
    try:
        pgid = int(owner.stdout.readline())
        owner.kill()
        owner.wait()
        assert len(_running_members(pgid)) == 2  # the server and its engine child, orphaned
        (pid_dir / f"{stranger.pid}.pid").write_text("a record whose process id was reused")
        yield pgid, stranger
    finally:
        owner.kill()
        if pgid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        stranger.kill()
        stranger.wait()


def _assert_stopped(pgid: int, stranger: subprocess.Popen, pid_dir: Path) -> None:
    deadline = time.monotonic() + 10
    while _running_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _running_members(pgid) == []
    assert stranger.poll() is None  # a group that is not a vLLM server is left alone
    assert list(pid_dir.iterdir()) == []


def test_the_worker_init_hook_stops_the_servers_of_a_killed_worker(tmp_path, settings, monkeypatch, caplog):
    settings.DATA_DIR = tmp_path
    monkeypatch.setitem(tasks._worker, "name", "cpu@killed")
    pid_dir = runner.server_pid_dir("cpu@killed")
    with _orphaned_server(tmp_path, pid_dir) as (pgid, stranger):
        worker_process_init.send(sender=None)

        _assert_stopped(pgid, stranger, pid_dir)
        assert f"stopped an orphaned vLLM server (process group {pgid})" in caplog.text


def test_dev_down_stops_the_server_a_killed_worker_left_and_nothing_else(tmp_path):
    # `./dev down` kills a worker still busy after its grace period, then runs this module on its folder.
    pid_dir = tmp_path / "server-pids" / "cpu@host"
    with _orphaned_server(tmp_path, pid_dir) as (pgid, stranger):
        done = subprocess.run(
            [sys.executable, "-m", "workers.server.stop_orphans", str(pid_dir)],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip

        assert done.stdout == f"stopped a vLLM server the worker left behind (process group {pgid})\n"
        _assert_stopped(pgid, stranger, pid_dir)
        # Run again, or on a worker that never started a server: nothing to stop, no error.
        again = subprocess.run(
            [sys.executable, "-m", "workers.server.stop_orphans", str(tmp_path / "server-pids" / "cpu@other")],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert again.stdout == ""


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
    server = VllmServer(["/bin/true", "--port", "1"], log_path=log)
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
