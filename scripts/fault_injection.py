"""Play faults against a real specdash and print what happened.

    .venv/bin/python scripts/fault_injection.py [--only NAME ...] [--markdown FILE] [--logs DIR]

Starts a stack of its own in a temporary folder, so that nothing shared is restarted, from
the checkout's last commit (`git archive HEAD`: what is played is what was committed): a
PostgreSQL cluster and a Redis server on free ports, the experiment worker (queue cpu), the
control worker (reaper, dispatcher, beat) and gunicorn, all real processes, with the demo
models (./dev build_demo_models first). Each scenario submits a small experiment on the
demo target, injects its fault, and reads the database: runs lost (not succeeded, where
success was possible), request rows duplicated, and seconds from the fault being
detectable to recovery. Every process it starts is stopped on every exit path, and the
folder is removed; --logs copies its logs (workers, control worker, gunicorn, PostgreSQL,
Redis, vLLM servers) to a folder first, to check an outcome against what the processes said.
"""

import argparse
import contextlib
import http.cookiejar
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
VENV = CHECKOUT / ".venv" / "bin"
MODELS = CHECKOUT / ".specdash" / "models"
PASSWORD = "fault-injection-password"


@dataclass
class Row:
    scenario: str
    done: str
    outcome: str
    lost: int
    duplicated: int
    recover_s: float | None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(condition: Callable[[], object], *, timeout_s: float, what: str, every_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            value = condition()
            if value:
                return value
        time.sleep(every_s)
    raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")


class Stack:
    """PostgreSQL, Redis, two Celery workers and gunicorn, in a folder of their own."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.src = folder / "src"
        self.pg_port, self.redis_port, self.web_port = free_port(), free_port(), free_port()
        self.processes: dict[str, subprocess.Popen] = {}
        self.pg_bin = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1]
        self.env = os.environ | {
            "DJANGO_SETTINGS_MODULE": "specdash.settings",
            "SPECDASH_SECRET_KEY": secrets.token_urlsafe(48),
            "SPECDASH_DATA_DIR": str(folder / "data"),
            "SPECDASH_MODELS_DIR": str(MODELS),
            "SPECDASH_DB_PORT": str(self.pg_port),
            "SPECDASH_DB_NAME": "specdash",
            "SPECDASH_DB_USER": "specdash",
            "SPECDASH_DB_PASSWORD": "",
            "SPECDASH_REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "SPECDASH_VLLM_PYTHON": str(CHECKOUT / ".venv-vllm" / "bin" / "python"),
            "SPECDASH_LOG_LEVEL": "INFO",
        }

    # ---------------------------------------------------------------- PostgreSQL

    def export_source(self) -> None:
        """The last commit's files, and the front-end libraries ./dev copied from npm."""
        self.src.mkdir()
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=CHECKOUT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(self.src)], input=archive, check=True)
        shutil.copytree(CHECKOUT / "static" / "vendor", self.src / "static" / "vendor")

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

    def _spawn(self, name: str, args: list[str], env: dict | None = None) -> subprocess.Popen:
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
        args = [str(VENV / "celery"), "-A", "specdash", "worker", "-Q", "cpu", "-n", f"{name}@faults",
                "--concurrency", "1", "--prefetch-multiplier", "1", "--loglevel", "INFO"]  # fmt: skip
        log = LogMark(self, f"worker-{name}")  # a restarted worker appends to its log
        self._spawn(f"worker-{name}", args, self.env | env)
        wait_for(lambda: "ready." in log.since(), timeout_s=60, what="worker")

    def control_start(self) -> None:
        args = [str(VENV / "celery"), "-A", "specdash", "worker", "-Q", "control", "-n", "control@faults",
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
        args = [str(VENV / "gunicorn"), "specdash.wsgi", "--bind", f"127.0.0.1:{self.web_port}", "--workers", "2",
                "--timeout", "120", "--capture-output"]  # fmt: skip
        process = self._spawn("web", args)

        def answers() -> bool:
            return process.poll() is not None or bool(urllib.request.urlopen(f"{self.url}/login/", timeout=10))

        wait_for(answers, timeout_s=180, what="gunicorn")
        if process.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {process.returncode}; see {self.folder / 'web.log'}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def manage(self, *args: str) -> None:
        subprocess.run([str(VENV / "python"), "manage.py", *args], cwd=self.src, env=self.env, check=True)

    def shutdown(self) -> None:
        for name in list(self.processes):
            self.stop(name)
        self.pg_stop()

    def logs_copy(self, target: Path) -> None:
        """The processes' logs and the vLLM servers' (data/server-logs), kept after the folder goes."""
        target.mkdir(parents=True, exist_ok=True)
        for log in self.folder.glob("*.log"):
            shutil.copy(log, target / log.name)
        servers = self.folder / "data" / "server-logs"
        if servers.is_dir():
            shutil.copytree(servers, target / "server-logs", dirs_exist_ok=True)


# ---------------------------------------------------------------- what the scenarios share


def django_setup(stack: Stack) -> None:
    """This process's ORM on the stack's database, with the stack's code: Celery puts the
    working directory on sys.path, so that is the exported source too."""
    os.environ.update(stack.env)
    os.chdir(stack.src)
    sys.path.insert(0, str(stack.src))
    import django

    django.setup()


def submit(owner, **overrides):
    """A small experiment on the demo target: the baseline at levels 1 and 2, one block."""
    from experiments.definition import services as definition
    from experiments.prompts.catalog import prompt_set_hash

    fields = {
        "name": "fault", "target_model": str(MODELS / "target"), "dtype": "float32", "max_model_len": 512,
        "prompt_set": "code_edit", "prompt_set_hash": prompt_set_hash("code_edit"), "num_prompts": 12,
        "max_tokens": 32, "concurrency_levels": [1, 2], "repetitions": 1, "warmup_requests": 1,
    }  # fmt: skip
    return definition.experiment_create(owner=owner, arms=[], **fields | overrides)


def counts(experiment) -> tuple[int, int]:
    """Runs lost (open or failed after the experiment ended) and request rows beyond one per run and prompt."""
    from django.db.models import Count

    from experiments.models import RequestRecord, Run

    lost = experiment.runs.exclude(status__in=[Run.Status.SUCCEEDED, Run.Status.CANCELLED]).count()
    rows = RequestRecord.objects.filter(run__experiment=experiment)
    per_prompt = rows.values("run_id", "prompt_index").annotate(n=Count("id")).filter(n__gt=1)
    return lost, sum(row["n"] - 1 for row in per_prompt)


def running_run(experiment, *, done_at_least: int = 1, timeout_s: float = 400):
    from experiments.models import Run

    return wait_for(
        lambda: experiment.runs.filter(status=Run.Status.RUNNING, requests_done__gte=done_at_least).first(),
        timeout_s=timeout_s,
        what="a run under way",
        every_s=0.1,
    )


def finished(experiment, timeout_s: float = 600):
    from experiments.models import Experiment

    done = (Experiment.Status.FINISHED, Experiment.Status.FAILED, Experiment.Status.CANCELLED)
    return wait_for(
        lambda: (e := Experiment.objects.get(id=experiment.id)).status in done and e,
        timeout_s=timeout_s,
        what="the end",
    )


def pool_child(stack: Stack, name: str = "worker-cpu") -> int:
    children = subprocess.run(["pgrep", "-P", str(stack.processes[name].pid)], capture_output=True, text=True)
    return int(children.stdout.split()[0])


def group_gone(pgid: int, *, what: str) -> None:
    """Wait until no process of the group `pgid` is left (a stopped vLLM server: all of it)."""
    wait_for(
        lambda: subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True).returncode != 0,
        timeout_s=60,
        what=what,
        every_s=0.1,
    )


def server_pgid(stack: Stack) -> int:
    pids = list((Path(stack.env["SPECDASH_DATA_DIR"]) / "server-pids").glob("*/*.pid"))
    return int(pids[0].stem)


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


def host_memory_gib() -> float:
    with open("/proc/meminfo") as meminfo:
        return next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:")) / 2**20


def row(name: str, done: str, experiment, started: float | None, recovered: float | None, expect: str) -> Row:
    experiment = finished(experiment)
    lost, duplicated = counts(experiment)
    statuses = sorted(experiment.runs.values_list("status", flat=True))
    outcome = f"{expect}; experiment {experiment.status}, runs {', '.join(statuses)}"
    return Row(name, done, outcome, lost, duplicated, None if started is None else round(recovered - started, 1))


# ---------------------------------------------------------------- the scenarios


def taken_back(run) -> bool:
    """The run is queued again, or already claimed again by a live process."""
    from experiments.models import Run

    again = Run.objects.get(id=run.id)
    return again.status == Run.Status.QUEUED or again.attempts >= 2


def kill_worker_child(stack: Stack, owner) -> Row:
    experiment = submit(owner)
    run = running_run(experiment)
    log = LogMark(stack, "worker-cpu")
    os.kill(pool_child(stack), signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: taken_back(run), timeout_s=120, what="the run taken back", every_s=0.2)
    taken = time.monotonic()
    finished(experiment)
    said = log.since()
    redelivered = re.search(rf"received experiment {experiment.id}$", said, re.M)
    orphan_stopped = "stopped an orphaned vLLM server" in said
    seen = (
        "run queued again at once, measured again on a fresh server"
        if redelivered and orphan_stopped
        else f"run taken back; worker log: task delivered again {bool(redelivered)}, orphaned server stopped "
        f"{orphan_stopped}"
    )
    return row("worker killed mid-run", "kill -9 of the pool process running the load", experiment, killed, taken, seen)


def kill_whole_worker(stack: Stack, owner) -> Row:
    experiment = submit(owner)
    run = running_run(experiment)
    control = LogMark(stack, "control")
    os.killpg(stack.processes["worker-cpu"].pid, signal.SIGKILL)
    killed = time.monotonic()
    stack.processes.pop("worker-cpu").wait()
    stack.worker_start()  # a supervisor restarts it; the message itself waits for the visibility timeout
    wait_for(lambda: taken_back(run), timeout_s=120, what="the run taken back", every_s=0.2)
    taken = time.monotonic()
    finished(experiment)
    reaped = f"re-dispatching experiment {experiment.id}: its worker process stopped beating" in control.since()
    return row(
        "whole worker killed mid-run",
        "kill -9 of the worker's process group, worker restarted",
        experiment,
        killed,
        taken,
        "reaper took the experiment back after the 30 s beat limit"
        if reaped
        else "run taken back, but the control worker's log does not say the reaper re-dispatched it",
    )


def kill_server(stack: Stack, owner) -> Row:
    experiment = submit(owner)
    run = running_run(experiment)
    log = LogMark(stack, "worker-cpu")
    os.killpg(server_pgid(stack), signal.SIGKILL)
    killed = time.monotonic()
    wait_for(lambda: taken_back(run), timeout_s=120, what="the run taken back", every_s=0.2)
    taken = time.monotonic()
    finished(experiment)
    fresh = "starting a fresh server" in log.since()
    return row(
        "vLLM server killed mid-run",
        "kill -9 of the server's process group",
        experiment,
        killed,
        taken,
        "fresh server started, run measured again"
        if fresh
        else "run taken back, but the worker log does not say a fresh server started",
    )


def server_never_healthy(stack: Stack, owner) -> Row:
    stack.stop("worker-cpu")
    stack.worker_start(SPECDASH_SERVER_START_TIMEOUT_S="10")
    try:
        experiment = submit(owner)
        started = time.monotonic()
        ended = finished(experiment)
        recovered = time.monotonic()  # the worker's restart below is not part of it
    finally:
        stack.stop("worker-cpu")
        stack.worker_start()
    _, duplicated = counts(ended)
    error = ended.runs.first().error.splitlines()[0]
    return Row(
        "server never healthy",
        "start timeout 10 s, below the demo server's start-up",
        f"runs failed: {error}",
        0,
        duplicated,
        round(recovered - started, 1),
    )


def server_out_of_memory(stack: Stack, owner) -> Row:
    stack.stop("worker-cpu")
    stack.worker_start(SPECDASH_CPU_KVCACHE_GIB="4096")
    try:
        experiment = submit(owner)
        started = time.monotonic()
        ended = finished(experiment)
        recovered = time.monotonic()  # the worker's restart below is not part of it
    finally:
        stack.stop("worker-cpu")
        stack.worker_start()
    _, duplicated = counts(ended)
    tail = ended.runs.first().error
    errors = [line for line in tail.splitlines() if re.search(r"Error|memory", line) and "Warning" not in line]
    outcome = f"runs failed with the server's log: {(errors[-1] if errors else tail[:80]).strip()[:160]}"
    # The cause as vLLM states it, from the server's whole log, and whether the run kept it.
    logs = (Path(stack.env["SPECDASH_DATA_DIR"]) / "server-logs" / f"experiment-{ended.id}").glob("*.log")
    lines = [line for log in logs for line in log.read_text(errors="replace").splitlines()]
    causes = [match.group(0).strip() for line in lines if (match := re.search(r"\w*Error\b.*memory.*", line))]
    if causes:
        in_run = [cause for cause in causes if cause in tail]
        kept = "in the run's error" if in_run else "only in the server's log, not in the run's error"
        first_sentence = re.split(r"(?<=\.)\s", (in_run or causes)[0], maxsplit=1)[0][:200]
        outcome += f"; vLLM's reason, {kept}: {first_sentence}"
    return Row(
        "server out of memory",
        f"KV cache of 4096 GiB asked (SPECDASH_CPU_KVCACHE_GIB) on a host of {host_memory_gib():.1f} GiB",
        outcome,
        0,
        duplicated,
        round(recovered - started, 1),
    )


class Browser:
    """Log in and post forms as a person would, cookies and CSRF token included."""

    def __init__(self, url: str):
        self.url = url
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))

    def get(self, path: str, **headers) -> tuple[int, str]:
        try:
            with self.opener.open(urllib.request.Request(self.url + path, headers=headers), timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def post(self, path: str, data: dict) -> tuple[int, str]:
        _, page = self.get(path)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        body = urllib.parse.urlencode(data | {"csrfmiddlewaretoken": token}, doseq=True).encode()
        request = urllib.request.Request(self.url + path, data=body, headers={"Referer": self.url + path})
        try:
            with self.opener.open(request, timeout=60) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()


EXPERIMENT_FORM = {
    "name": "submitted while Redis was down", "description": "", "target_model": str(MODELS / "target"),
    "worker_queue": "cpu", "dtype": "float32", "max_model_len": "512", "workload_kind": "builtin",
    "prompt_set": "code_edit", "max_tokens": "32", "num_prompts": "12", "temperature": "0", "top_p": "1", "seed": "0",
    "concurrency_levels": "1, 2", "repetitions": "1", "server_per_block": "on", "equivalence_margin": "2",
    "warmup_requests": "1", "arms-TOTAL_FORMS": "1", "arms-INITIAL_FORMS": "0", "arms-0-method": "ngram",
    "arms-0-num_speculative_tokens": "3", "arms-0-prompt_lookup_min": "2", "arms-0-prompt_lookup_max": "4",
}  # fmt: skip


def redis_down_at_submission(stack: Stack, owner) -> Row:
    from experiments.models import Experiment

    browser = Browser(stack.url)
    browser.post("/login/", {"username": owner.username, "password": PASSWORD})
    stack.stop("redis")
    status, page = browser.post("/experiments/new/", EXPERIMENT_FORM)
    experiment = Experiment.objects.latest("id")
    waiting = "waiting for the task queue" in page
    stack.redis_start()
    back = time.monotonic()
    # The beat asks every 10 s; a consumer that lost Redis reconnects with a backoff of up to 30 s.
    wait_for(lambda: Experiment.objects.get(id=experiment.id).dispatched_at, timeout_s=180, what="dispatched")
    return row(
        "Redis down at submission",
        f"Redis stopped, form posted (HTTP {status}), Redis started",
        experiment,
        back,
        time.monotonic(),
        f"saved{', page said it waits for the broker' if waiting else ''}, dispatched once Redis answered",
    )


def postgres_restart_at_ingestion(stack: Stack, owner) -> Row:
    # Half-way through a run of 24 requests of 48 tokens, one at a time: PostgreSQL stays down
    # until the run has ended and its store has failed.
    experiment = submit(owner, num_prompts=24, max_tokens=48, concurrency_levels=[1])
    running_run(experiment, done_at_least=12)
    stack.pg_stop()
    time.sleep(20)
    stack.pg_start()
    back = time.monotonic()
    from django.db import connection

    connection.close()
    from experiments.models import Run

    wait_for(lambda: experiment.runs.filter(status=Run.Status.SUCCEEDED).exists(), timeout_s=120, what="stored")
    stored = time.monotonic()
    spooled = "its results wait in" in (stack.folder / "worker-cpu.log").read_text()
    outcome = "store failed, results kept in the worker's spool, stored once PostgreSQL answered"
    return row(
        "PostgreSQL restarted during ingestion",
        "pg_ctl stop -m fast half-way through a run, started 20 s later",
        experiment,
        back,
        stored,
        outcome if spooled else "the run ended after PostgreSQL was back (no store failed)",
    )


def delivered_twice(stack: Stack, owner) -> Row:
    from workers.tasks import experiment_execute

    # The second worker starts once the first holds the experiment (its lease is taken), and
    # the task is sent again once the second worker is up: started before, it may take the
    # first delivery itself (the broker hands a message to either idle worker), and its log
    # would never say it found a holder. The holder still has its server start and both runs'
    # load ahead (24 prompts of 64 tokens each), so the second delivery reaches the idle
    # worker while the experiment is held even on a loaded host whose workers start slowly.
    experiment = submit(owner, num_prompts=24, max_tokens=64)
    wait_for(
        lambda: type(experiment).objects.filter(id=experiment.id).exclude(lease_owner="").exists(),
        timeout_s=120,
        what="the first worker holding the experiment",
        every_s=0.1,
    )
    mark = LogMark(stack, "worker-cpu2")
    stack.worker_start("cpu2")
    try:
        experiment_execute.apply_async(args=[experiment.id], queue="cpu")
        sent = time.monotonic()
        held, ended = "held by another live worker", f"experiment {experiment.id} is finished; nothing to do"

        def answered() -> str | None:
            said = mark.since()
            return said if held in said or ended in said else None

        said = wait_for(answered, timeout_s=120, what="the second delivery")
        seen = (
            "the second worker found the live holder and left it"
            if held in said
            else "NOT TESTED: the experiment had finished before the second delivery reached the idle worker"
        )
        return row(
            "same task delivered twice",
            "the experiment's task sent again to a second idle worker",
            experiment,
            sent,
            time.monotonic(),
            seen,
        )
    finally:
        stack.stop("worker-cpu2")


def cancel_mid_run(stack: Stack, owner) -> Row:
    from experiments.execution import services as execution
    from experiments.models import RequestRecord, Run

    # Cancelled during the second run, so that the first one's results are there to keep;
    # 24 prompts of 48 tokens, so that the second run lasts long enough to be caught.
    experiment = submit(owner, num_prompts=24, max_tokens=48)
    wait_for(
        lambda: experiment.runs.filter(status=Run.Status.SUCCEEDED).exists(),
        timeout_s=400,
        what="a run stored",
        every_s=0.1,
    )
    running_run(experiment)
    pgid = server_pgid(stack)
    execution.experiment_cancel(experiment=experiment, by=owner)
    cancelled = time.monotonic()
    group_gone(pgid, what="the server stopped")
    stopped = time.monotonic()
    finished(experiment)
    kept = RequestRecord.objects.filter(run__experiment=experiment, run__status=Run.Status.SUCCEEDED).count()
    return row(
        "cancellation mid-run",
        "experiment cancelled during its second run's load",
        experiment,
        cancelled,
        stopped,
        f"load and server stopped, the completed run kept ({kept} of its 24 request rows)",
    )


def cancel_during_start(stack: Stack, owner) -> Row:
    from experiments.execution import services as execution
    from experiments.models import Run

    experiment = submit(owner)
    server_dir = Path(stack.env["SPECDASH_DATA_DIR"]) / "server-pids"
    wait_for(lambda: list(server_dir.glob("*/*.pid")), timeout_s=120, what="a server starting", every_s=0.1)
    pgid = server_pgid(stack)
    time.sleep(10)  # into the start: Python imported, the engine loading (a start takes 25-60 s here)
    # Still loading: no run has begun its load.
    started_load = experiment.runs.filter(status=Run.Status.RUNNING, requests_done__gt=0).exists()
    execution.experiment_cancel(experiment=experiment, by=owner)
    cancelled = time.monotonic()
    group_gone(pgid, what="the starting server stopped")
    stopped = time.monotonic()
    finished(experiment)
    seen = (
        "NOT TESTED: the server was healthy and measuring before the cancel"
        if started_load
        else "the server that was still loading stopped, no run measured"
    )
    return row(
        "cancellation while the server starts",
        "experiment cancelled while its first vLLM server loads",
        experiment,
        cancelled,
        stopped,
        seen,
    )


def web_restart_while_polling(stack: Stack, owner) -> Row:
    experiment = submit(owner)
    browser = Browser(stack.url)
    browser.post("/login/", {"username": owner.username, "password": PASSWORD})
    answers: list[tuple[float, int]] = []
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            with contextlib.suppress(OSError):
                answers.append((time.monotonic(), browser.get(f"/experiments/{experiment.id}/progress/")[0]))
            time.sleep(0.5)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    time.sleep(3)
    stack.stop("web")
    restarted = time.monotonic()
    stack.web_start()
    wait_for(lambda: any(at > restarted and code == 200 for at, code in answers), timeout_s=60, what="polls answered")
    recovered = min(at for at, code in answers if at > restarted and code == 200)
    stop.set()
    poller.join()
    errors = sorted({code for _, code in answers if code != 200})
    return row(
        "web server restarted while a page polls",
        "gunicorn stopped and started during 0.5 s polls",
        experiment,
        restarted,
        recovered,
        f"polls answered again; error codes seen: {errors or 'none'}",
    )


SCENARIOS = {
    "kill-worker": kill_worker_child,
    "kill-whole-worker": kill_whole_worker,
    "kill-server": kill_server,
    "never-healthy": server_never_healthy,
    "out-of-memory": server_out_of_memory,
    "redis-down": redis_down_at_submission,
    "postgres-restart": postgres_restart_at_ingestion,
    "delivered-twice": delivered_twice,
    "cancel": cancel_mid_run,
    "cancel-during-start": cancel_during_start,
    "web-restart": web_restart_while_polling,
}


def table(rows: list[Row]) -> str:
    lines = [
        "| scenario | what was done | outcome | runs lost | rows duplicated | seconds to recover |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        seconds = "–" if r.recover_s is None else f"{r.recover_s:.1f}"
        lines.append(f"| {r.scenario} | {r.done} | {r.outcome} | {r.lost} | {r.duplicated} | {seconds} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(SCENARIOS), help="scenarios to play (default: all)")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    parser.add_argument("--logs", type=Path, help="copy the stack's logs to this folder before it is removed")
    options = parser.parse_args()
    markdown = options.markdown.resolve() if options.markdown else None
    logs = options.logs.resolve() if options.logs else None
    if not (MODELS / "target" / "config.json").exists():
        sys.exit("the demo models are missing: ./dev manage build_demo_models")
    # `timeout` and CI stop it with SIGTERM: unwind, so that the stack is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rows = []
    with tempfile.TemporaryDirectory(prefix="specdash-faults-", dir="/var/tmp") as folder:
        os.chmod(folder, 0o755)
        stack = Stack(Path(folder))
        try:
            stack.export_source()
            stack.pg_init()
            stack.redis_start()
            stack.manage("migrate", "--noinput", "-v", "0")
            stack.manage("collectstatic", "--noinput", "-v", "0")
            django_setup(stack)
            from django.contrib.auth import get_user_model

            owner = get_user_model().objects.create_user("faults", password=PASSWORD)
            stack.worker_start()
            stack.control_start()
            stack.web_start()
            for name in options.only or SCENARIOS:
                started = time.monotonic()
                try:
                    rows.append(SCENARIOS[name](stack, owner))
                except Exception as error:  # a scenario that broke is a row of the table too
                    message = " ".join(str(error).split())[:200]
                    rows.append(Row(name, "see the error", f"did not complete: {message}", -1, -1, None))
                print(f"{name}: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
        finally:
            stack.shutdown()
            if logs:
                stack.logs_copy(logs)
    print(table(rows))
    if markdown:
        markdown.write_text(table(rows) + "\n")
    return 0 if all(r.lost == 0 and r.duplicated == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
