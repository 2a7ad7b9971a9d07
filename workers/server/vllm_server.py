"""Start, health-check and stop one vLLM OpenAI-compatible server as a child process.

Plain module: no Django, no vLLM import. It runs a ServerLaunch (workers/server/command.py),
decided before: the command (the vLLM virtual environment's interpreter first), environment,
log, start time-out, pid record and placement. The server runs in its own process group so
that stopping it also stops the engine processes it spawns; the groups a killed worker left
behind are stopped by workers/server/orphans.py.
"""

import atexit
import contextlib
import logging
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO, NoReturn, Protocol

from workers.host.envinfo import cuda_visible
from workers.server import gpu_memory
from workers.server.command import ServerLaunch, memory_utilization, missing_model_paths

logger = logging.getLogger(__name__)

STOP_GRACE_S = 20.0
KILL_WAIT_S = 10.0
# After a stopped server's processes are gone, the driver may list them a while longer.
GPU_RELEASE_S = 60.0
# Before the one retry of a start that vLLM refused for want of GPU memory.
GPU_FREE_WAIT_S = 120.0
HEALTH_POLL_S = 0.5
# A raised exception as vLLM logs it: a traceback's last line, or after a log record's
# "[file.py:N] " or a process tag's ") " (not an exception named inside a warning's text).
EXCEPTION_LINE = re.compile(r"(?:^|\] |\) )\w+(?:Error|Exception): \S")
# What signal.signal takes and returns.
SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class ServerStartError(RuntimeError):
    """The server exited or never became healthy; `log_tail` holds the end of its log."""

    def __init__(self, message: str, log_tail: str):
        super().__init__(message)
        self.message = message
        self.log_tail = log_tail

    def __str__(self) -> str:
        return f"{self.message}\n--- vLLM server log (last lines) ---\n{self.log_tail}"


class GpuProbe(Protocol):
    """Reads the worker's GPUs and their compute processes (gpu_memory.Probe)."""

    def snapshot(self) -> gpu_memory.Snapshot | None: ...


class VllmServer:
    """One vLLM server process group. Use as a context manager: it is stopped on every exit path."""

    def __init__(
        self,
        launch: ServerLaunch,
        *,
        stop_check: Callable[[], None] | None = None,
        gpu_probe: GpuProbe | None = None,
    ):
        self.launch = launch
        # None: found at start(), on a GPU host only (no GPU part on CPU hosts).
        self.gpu_probe = gpu_probe
        # Called between health checks while the server starts; whatever it raises (the run
        # was cancelled) stops the starting server and propagates: a start on a GPU host takes
        # minutes, which a cancel should not wait for.
        self.stop_check = stop_check
        # Where the launch's placement bound the API server and engine core, once healthy.
        self.placed: dict[str, list[int]] = {}
        self.port = launch.port
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: BinaryIO | None = None
        # Seconds from launch to answering /health, once it does: device time (the worker records
        # it). A start retried for GPU memory counts from the first launch: the worker held its
        # devices, or waited for them, throughout.
        self.start_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def exit_code(self) -> int | None:
        """The server's exit code once it has exited (died under a run), else None."""
        return self._proc.poll() if self._proc else None

    def __enter__(self) -> "VllmServer":
        launched = time.monotonic()
        try:
            self._start_healthy()
        except BaseException:
            self.stop()
            raise
        self.start_s = time.monotonic() - launched
        return self

    def _start_healthy(self) -> None:
        """start() and wait_healthy(); a start vLLM refused for want of GPU memory is made once
        more, once the memory is free (or GPU_FREE_WAIT_S passed)."""
        self.start()
        try:
            self.wait_healthy()
        except ServerStartError as refused:
            if self.gpu_probe is None or not gpu_memory.is_memory_refusal(refused.log_tail):
                raise
            self._retry_start(self.gpu_probe, refused)

    def _retry_start(self, probe: GpuProbe, refused: ServerStartError) -> None:
        log_path = self.launch.log_path
        first_log = log_path.with_name(f"{log_path.stem}.refused{log_path.suffix}")
        os.replace(log_path, first_log)
        share = memory_utilization(self.launch.args)
        logger.warning(
            "vLLM refused to start for want of GPU memory (its log: %s); waiting up to %.0f s for %.0f%% "
            "of each GPU to be free, then starting it once more",
            first_log, GPU_FREE_WAIT_S, share * 100,
        )  # fmt: skip
        started = time.monotonic()
        last = gpu_memory.wait_until(
            probe.snapshot,
            lambda snapshot: not snapshot.short_of(share),
            timeout_s=GPU_FREE_WAIT_S,
            tick=self.stop_check,
        )
        waited = time.monotonic() - started
        free = last is not None and not last.short_of(share)
        self.start()
        try:
            self.wait_healthy()
        except ServerStartError as again:
            retry = (
                f"retried once: the first start was refused for want of GPU memory (log: {first_log}), the second "
                f"began after waiting {waited:.0f} s {'with' if free else 'without'} {share:.0%} of each GPU free"
            )
            raise ServerStartError(f"{again.message} ({retry})", again.log_tail) from refused

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def child_env(self) -> dict[str, str]:
        """os.environ with the launch's `env` laid over it (e.g. the engine's cores on CPU hosts:
        workers/server/launch.py decides them); a variable it maps to None is left out."""
        env = {name: value for name, value in {**os.environ, **self.launch.env}.items() if value is not None}
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def start(self) -> None:
        if self._proc is not None:
            raise RuntimeError("server already started")
        stuck = _surviving_groups()
        if stuck:
            raise ServerStartError(
                f"No server was started: processes of an earlier vLLM server outlived SIGKILL ({stuck}) and may "
                "hold GPU memory, so vLLM would refuse to start. A process in state D is stuck in the kernel, "
                "often in the GPU driver; servers start again once they are gone.",
                log_tail="",
            )
        launch = self.launch
        if self.gpu_probe is None and cuda_visible(launch.args[0]):
            self.gpu_probe = gpu_memory.Probe(launch.args[0], self.child_env().get("CUDA_VISIBLE_DEVICES", ""))
        launch.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(launch.log_path, "wb")  # noqa: SIM115 (open for the server's life, closed in stop())
        _live_servers.add(self)
        try:
            self._proc = subprocess.Popen(
                launch.args,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env=self.child_env(),
                start_new_session=True,
            )
        except BaseException:
            self.stop()
            raise
        if launch.pid_dir is not None:
            # A record that outlives a worker killed with SIGKILL (workers/server/orphans.py).
            launch.pid_dir.mkdir(parents=True, exist_ok=True)
            (launch.pid_dir / f"{self._proc.pid}.pid").write_text(" ".join(launch.args) + "\n")

    def wait_healthy(self) -> None:
        """Return once GET /health answers 200; stop the server and raise ServerStartError
        otherwise, or what `stop_check` raised (the caller stops the server: __enter__ does)."""
        timeout_s = self.launch.start_timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            if self.stop_check is not None:
                self.stop_check()
            code = self._started().poll()
            if code is not None:
                self._fail(f"vLLM server exited with code {code} before it became healthy")
            if self._health_ok():
                if self.launch.placement is not None:
                    self.placed = self.launch.placement.apply(self._started().pid)
                return
            if time.monotonic() >= deadline:
                self._fail(f"vLLM server not healthy after {timeout_s:.0f} s")
            time.sleep(HEALTH_POLL_S)

    def _health_ok(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as response:
                status: int = response.status
                return status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _fail(self, message: str) -> NoReturn:
        self.stop()
        missing = missing_model_paths(self.launch.args)
        if missing:
            # Said by the worker, which sees its own disk: the web host may not have the models.
            message += f"; there is no model at {', '.join(missing)} on {socket.gethostname()} (no config.json)"
        raise ServerStartError(message, self.log_tail())

    def _started(self) -> subprocess.Popen[bytes]:
        # None before start() and after stop(), which the SIGTERM handler may call at any time.
        if self._proc is None:
            raise RuntimeError("server not running")
        return self._proc

    def stop(self) -> None:
        """SIGTERM the process group, wait up to STOP_GRACE_S for every process of it to end, then
        SIGKILL it; on a GPU host, wait until the GPU memory its processes held is released.
        Idempotent. Never raises: it runs on every exit path, after a good session too. A group
        that outlives SIGKILL is logged as an error, its pid record kept for the next worker
        process, and this process starts no server while it lives (start())."""
        proc, self._proc = self._proc, None
        if proc is not None:
            members = group_pids(proc.pid)
            if self._end_group(proc):
                self._wait_gpu_released(proc.pid, members)
                if self.launch.pid_dir is not None:
                    (self.launch.pid_dir / f"{proc.pid}.pid").unlink(missing_ok=True)
        if self._log is not None:
            self._log.close()
            self._log = None
        _live_servers.discard(self)

    def _end_group(self, proc: subprocess.Popen[bytes]) -> bool:
        """Whether every process of the server's group has ended."""
        self._signal_group(proc.pid, signal.SIGTERM)
        if self._wait_group_gone(proc, STOP_GRACE_S):
            return True
        logger.warning("vLLM server (process group %d) runs %.0f s after SIGTERM; killing it", proc.pid, STOP_GRACE_S)
        self._signal_group(proc.pid, signal.SIGKILL)
        if self._wait_group_gone(proc, KILL_WAIT_S):
            return True
        _unkillable.add(proc.pid)
        logger.error(
            "vLLM server (process group %d) outlived SIGKILL by %.0f s: %s. They may hold GPU memory; "
            "this worker process starts no server until they are gone",
            proc.pid, KILL_WAIT_S, _describe_group(proc.pid),
        )  # fmt: skip
        return False

    def _wait_gpu_released(self, pgid: int, members: list[int]) -> None:
        if self.gpu_probe is None or not members:
            return
        first = self.gpu_probe.snapshot()
        if first is None:
            logger.warning("neither NVML nor nvidia-smi answered: not waiting for the stopped server's GPU memory")
            return
        if not first.held_by(members):
            return
        logger.info(
            "waiting up to %.0f s for the GPU memory of the stopped vLLM server (process group %d): %s",
            GPU_RELEASE_S, pgid, gpu_memory.describe(first.held_by(members)),
        )  # fmt: skip
        started = time.monotonic()
        last = gpu_memory.wait_until(
            self.gpu_probe.snapshot, lambda snapshot: not snapshot.held_by(members), timeout_s=GPU_RELEASE_S
        )
        held = last.held_by(members) if last is not None else []
        if held:
            logger.error(
                "GPU memory of the stopped vLLM server (process group %d) still held after %.0f s: %s; "
                "the next start may be refused for want of it",
                pgid, GPU_RELEASE_S, gpu_memory.describe(held),
            )  # fmt: skip
        else:
            logger.info("GPU memory of the stopped vLLM server released after %.1f s", time.monotonic() - started)

    @staticmethod
    def _signal_group(pgid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)

    @staticmethod
    def _wait_group_gone(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            proc.poll()  # reap the leader, whose zombie would keep the group's id in use
            if not group_pids(proc.pid):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)

    def log_tail(self, lines: int = 40) -> str:
        """The log's last `lines` lines (of its last 64 KiB), after the first exception logged
        above them: vLLM often ends with a generic "Engine core initialization failed. See
        root cause above." while the reason (e.g. not enough memory for the KV cache) was
        raised by a worker process a hundred lines earlier."""
        try:
            with open(self.launch.log_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 64 * 1024))
                data = log.read()
        except FileNotFoundError:
            return ""
        text = data.decode("utf-8", "replace").splitlines()
        tail, above = text[-lines:], text[:-lines]
        first = next((line for line in above if EXCEPTION_LINE.search(line)), None)
        return "\n".join([first, "[...]", *tail] if first else tail)


def _group_states(pgid: int) -> dict[int, str]:
    """The processes of a process group with their states ("Z": zombie, "D": stuck in the kernel), from /proc."""
    states = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:
                states[int(stat.parent.name)] = fields[0]
        except (OSError, IndexError, ValueError):
            continue
    return states


def group_pids(pgid: int) -> list[int]:
    """The live processes of a process group: every member, not only the leader, and no zombie
    (it has released its memory and waits only for its parent to reap it)."""
    return sorted(pid for pid, state in _group_states(pgid).items() if state != "Z")


def _describe_group(pgid: int) -> str:
    live = sorted((pid, state) for pid, state in _group_states(pgid).items() if state != "Z")
    return ", ".join(f"pid {pid} in state {state}" for pid, state in live) or "no process any more"


# Process groups that outlived SIGKILL in this process (VllmServer.stop).
_unkillable: set[int] = set()


def _surviving_groups() -> str:
    """The processes of the groups that outlived SIGKILL and still run; forgets the ended ones."""
    for pgid in [pgid for pgid in _unkillable if not group_pids(pgid)]:
        _unkillable.discard(pgid)
    return "; ".join(f"process group {pgid}: {_describe_group(pgid)}" for pgid in sorted(_unkillable))


class _LiveServers:
    """Servers still running in this process, stopped at interpreter exit and on SIGTERM.

    The SIGTERM handler is installed only while a server runs, and only from the main
    thread (Python allows no other); it stops the servers, then hands the signal to the
    handler that was there before.
    """

    def __init__(self) -> None:
        self._servers: set[VllmServer] = set()
        self._previous_handler: SignalHandler = None
        self._installed = False
        atexit.register(self.stop_all)

    def add(self, server: VllmServer) -> None:
        self._servers.add(server)
        if not self._installed and threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
            self._installed = True

    def discard(self, server: VllmServer) -> None:
        self._servers.discard(server)
        if not self._servers and self._installed and threading.current_thread() is threading.main_thread():
            # None: the handler before ours was not installed from Python; the default stands in.
            previous = self._previous_handler
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
            self._installed = False

    def stop_all(self) -> None:
        for server in list(self._servers):
            server.stop()

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous_handler
        self.stop_all()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)


_live_servers = _LiveServers()
