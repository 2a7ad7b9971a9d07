"""A stand-in vLLM server for the process tests: a Python process that answers /health and
starts a child of its own, as vLLM's API server starts its engine; and a stand-in worker
process that starts one and can be killed."""

import subprocess
import sys
import textwrap
from pathlib import Path

from workers.server.command import free_port

REPO = Path(__file__).resolve().parents[3]

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


def fake_args(*extra, script=FAKE_SERVER) -> list[str]:
    return [sys.executable, "-c", script, "--port", str(free_port()), *extra]


def group_gone(pgid: int) -> bool:
    """No process of the group runs: every member, read from /proc, not only the leader (a
    zombie has ended; it waits for init to reap it)."""
    return running_members(pgid) == []


def sleeper(*marker: str) -> subprocess.Popen:
    """A process group of its own, with `marker` on its command line."""
    code = "import time; time.sleep(60)"
    return subprocess.Popen([sys.executable, "-c", code, *marker], start_new_session=True)


def running_members(pgid: int) -> list[int]:
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


def owner_process(tmp_path, args: list[str], pid_dir: Path | None = None) -> subprocess.Popen:
    """Another process that starts a server on `args` as a worker does, prints its process
    group once it is healthy, then sleeps."""
    code = textwrap.dedent(
        f"""
        import sys, time
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from workers.server.command import ServerLaunch
        from workers.server.vllm_server import VllmServer
        log_path = Path({str(tmp_path / "server.log")!r})
        pid_dir = {pid_dir and str(pid_dir)!r}
        launch = ServerLaunch({args!r}, log_path=log_path, start_timeout_s=30, pid_dir=pid_dir and Path(pid_dir))
        server = VllmServer(launch)
        server.__enter__()
        print(server.pid, flush=True)
        time.sleep(600)
        """
    )
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
