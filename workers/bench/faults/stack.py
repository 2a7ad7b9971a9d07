"""PostgreSQL, Redis, two Celery workers and gunicorn, in a folder of their own, from the
exported source in `folder/src` (scripts/fault_injection.py exports the last commit there).
Every process it starts is stopped by `shutdown`. Free of Django: the harness sets the
stack's environment up before it imports any."""

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(condition: Callable[[], T | None], *, timeout_s: float, what: str, every_s: float = 0.5) -> T:
    """The first true value of `condition` within the time-out (its errors count as not yet)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            value = condition()
            if value:
                return value
        time.sleep(every_s)
    raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")


class Stack:
    """The stack's processes, ports and environment; `checkout` is where the virtual
    environments and the demo models are."""

    def __init__(self, folder: Path, checkout: Path):
        self.folder = folder
        self.src = folder / "src"
        self.venv = checkout / ".venv" / "bin"
        self.models = checkout / ".specdash" / "models"
        self.pg_port, self.redis_port, self.web_port = free_port(), free_port(), free_port()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.pg_bin = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1]
        self.env = os.environ | {
            "DJANGO_SETTINGS_MODULE": "specdash.settings",
            "SPECDASH_SECRET_KEY": secrets.token_urlsafe(48),
            "SPECDASH_DATA_DIR": str(folder / "data"),
            "SPECDASH_MODELS_DIR": str(self.models),
            "SPECDASH_DB_PORT": str(self.pg_port),
            "SPECDASH_DB_NAME": "specdash",
            "SPECDASH_DB_USER": "specdash",
            "SPECDASH_DB_PASSWORD": "",
            "SPECDASH_REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "SPECDASH_VLLM_PYTHON": str(checkout / ".venv-vllm" / "bin" / "python"),
            "SPECDASH_LOG_LEVEL": "INFO",
        }

    # ---------------------------------------------------------------- PostgreSQL

    def _as_pg(self, *args: str) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else list(args)

    def pg_init(self) -> None:
        data = self.folder / "pg"
        if os.geteuid() == 0:
            subprocess.run(["chown", "postgres:", str(self.folder)], check=True)
        initdb = [str(self.pg_bin / "initdb"), "-D", str(data), "-U", "specdash", "--auth=trust", "-E", "UTF8"]
        subprocess.run(self._as_pg(*initdb), check=True, capture_output=True)
        self.pg_start()
        subprocess.run(
            [str(self.pg_bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.pg_port), "-U", "specdash", "specdash"],
            check=True,
        )

    def pg_start(self) -> None:
        options = f"-p {self.pg_port} -k '' -c listen_addresses=127.0.0.1"
        ctl = [str(self.pg_bin / "pg_ctl"), "-D", str(self.folder / "pg"), "-o", options]
        subprocess.run(
            self._as_pg(*ctl, "-l", str(self.folder / "pg.log"), "-w", "start"), check=True, capture_output=True
        )

    def pg_stop(self) -> None:
        ctl = [str(self.pg_bin / "pg_ctl"), "-D", str(self.folder / "pg"), "-m", "fast", "-w", "stop"]
        subprocess.run(self._as_pg(*ctl), capture_output=True)

    # ---------------------------------------------------------------- Redis and the Python processes

    def redis_start(self) -> None:
        (self.folder / "redis").mkdir(exist_ok=True)
        folder = str(self.folder / "redis")
        args = ["redis-server", "--bind", "127.0.0.1", "--port", str(self.redis_port), "--dir", folder,
                "--appendonly", "yes", "--save", ""]  # fmt: skip
        self._spawn("redis", args)
        wait_for(lambda: socket.create_connection(("127.0.0.1", self.redis_port), 1), timeout_s=20, what="Redis")

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.folder / f"{name}.log", "ab")  # noqa: SIM115 (the child holds it)
        process = subprocess.Popen(
            args, cwd=self.src, env=env or self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self.processes[name] = process
        return process

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def worker_start(self, name: str = "cpu", **env: str) -> None:
        args = [str(self.venv / "celery"), "-A", "specdash", "worker", "-Q", "cpu", "-n", f"{name}@faults",
                "--concurrency", "1", "--prefetch-multiplier", "1", "--loglevel", "INFO"]  # fmt: skip
        log = LogMark(self, f"worker-{name}")  # a restarted worker appends to its log
        self._spawn(f"worker-{name}", args, self.env | env)
        wait_for(lambda: "ready." in log.since(), timeout_s=60, what="worker")

    def control_start(self) -> None:
        args = [str(self.venv / "celery"), "-A", "specdash", "worker", "-Q", "control", "-n", "control@faults",
                "--concurrency", "1", "-B", "-s", str(self.folder / "beat-schedule"), "--loglevel", "INFO"]  # fmt: skip
        log = LogMark(self, "control")
        self._spawn("control", args)
        # Connected and its beat running before a scenario stops Redis: under the fleet's load a
        # boot takes tens of seconds, and a broker lost mid-boot is another scenario.
        wait_for(lambda: "ready." in log.since(), timeout_s=180, what="control worker")

    def web_start(self) -> None:
        # --timeout as ./dev's: on a loaded 2-core host (a vLLM server decoding beside it) a
        # worker's Django import can outlast gunicorn's default 30 s, and the arbiter would kill it
        # and boot another, over and over.
        args = [str(self.venv / "gunicorn"), "specdash.wsgi", "--bind", f"127.0.0.1:{self.web_port}",
                "--workers", "2", "--timeout", "120", "--capture-output"]  # fmt: skip
        process = self._spawn("web", args)

        def answers() -> bool:
            return process.poll() is not None or bool(urllib.request.urlopen(f"{self.url}/login/", timeout=10))

        wait_for(answers, timeout_s=180, what="gunicorn")
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {process.returncode}; see {self.folder / 'web.log'}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def data_dir(self) -> Path:
        return Path(self.env["SPECDASH_DATA_DIR"])

    def manage(self, *args: str) -> None:
        subprocess.run([str(self.venv / "python"), "manage.py", *args], cwd=self.src, env=self.env, check=True)

    def shutdown(self) -> None:
        for name in list(self.processes):
            self.stop(name)
        self.pg_stop()

    def logs_copy(self, target: Path) -> None:
        """The processes' logs and the vLLM servers' (data/server-logs), kept after the folder goes."""
        target.mkdir(parents=True, exist_ok=True)
        for log in self.folder.glob("*.log"):
            shutil.copy(log, target / log.name)
        servers = self.data_dir / "server-logs"
        if servers.is_dir():
            shutil.copytree(servers, target / "server-logs", dirs_exist_ok=True)


class LogMark:
    """What a process wrote to its log since the mark (its log grows across restarts; a
    process not started yet has none)."""

    def __init__(self, stack: Stack, name: str):
        self.path = stack.folder / f"{name}.log"
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def since(self) -> str:
        if not self.path.exists():
            return ""
        with open(self.path, "rb") as log:
            log.seek(self.offset)
            return log.read().decode(errors="replace")
