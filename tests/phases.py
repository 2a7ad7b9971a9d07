"""The suite in phases by what a test needs (README "Tests", docs/architecture.md "Tests").

A test's tiers are the real parts it needs, as markers:

- `db`: the test database (pytest-django's `django_db`, or a fixture that needs the database);
- `live_http`: a live HTTP server thread (`live_server`);
- `worker`: a real Celery worker process (`celery_worker_process`, or `celery_workers`);
- `vllm`: the vLLM environment: a vLLM server, or vLLM, torch or transformers imported there;
- `browser`: headless Chromium.

`db`, `live_http` and `worker` are also derived from the fixtures a test uses, so a test cannot
land in a phase cheaper than what it needs; `vllm` and `browser` are marked. `--phase` runs one
phase: `unit` (no tier: no database), `db` (the database only, run in parallel by
`./dev test`), `browser` (a live HTTP server, with or without Chromium), `real` (a worker or
vLLM: serially, its servers shared per module). Without `--phase` every test runs.

Outside the real tier a test has a time budget (set-up, call and tear-down):
a test over `BUDGET_S` is reported at the end, one over `LIMIT_S` fails the session unless it
carries `@pytest.mark.slow(reason=...)`, which says why it may take longer (it is still
reported, with its reason). The limit is generous on purpose: a timed assertion near the budget
would fail on a busy shared host, while a test that takes a minute in the cheap phases is a
design mistake on any host.

The vLLM servers started by this session (its own process tree: two sessions on one machine do
not count each other's) are counted per test module, by watching the process table, and
written beside the phase's other figures for `./dev test`'s closing summary. A server started
outside the real tier fails the session: its test lacks the `vllm` mark.
"""

import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

TIERS = ("db", "live_http", "worker", "vllm", "browser")
PHASES = ("unit", "db", "browser", "real")
REAL = frozenset({"worker", "vllm"})
BROWSER = frozenset({"live_http", "browser"})
# The fixtures that imply a tier (pytest-django's, and tests/worker_fixtures.py's worker).
TIER_FIXTURES = {
    "db": {
        "db",
        "transactional_db",
        "django_db_setup",
        "django_db_reset_sequences",
        "django_db_serialized_rollback",
        "live_server",
    },
    "live_http": {"live_server"},
    "worker": {"celery_worker_process"},
    "browser": {"browser"},
}
BUDGET_S = 5.0
LIMIT_S = 60.0
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
POLL_S = 0.5
ROOT = Path(__file__).resolve().parent.parent
FIGURES = Path(os.environ.get("SPECDASH_TEST_FIGURES", ROOT / "test-artifacts" / "phases"))


def tiers_of(item: pytest.Item) -> set[str]:
    """The tiers a test needs: its markers, and those its fixtures imply."""
    tiers = {tier for tier in TIERS if item.get_closest_marker(tier)}
    if item.get_closest_marker("django_db"):
        tiers.add("db")
    names = set(getattr(item, "fixturenames", ()))
    tiers |= {tier for tier, fixtures in TIER_FIXTURES.items() if names & fixtures}
    return tiers


def phase_of(tiers: set[str]) -> str:
    if tiers & REAL:
        return "real"
    if tiers & BROWSER:
        return "browser"
    return "db" if tiers else "unit"


def examples(full: int) -> int:
    """A generated test's example count: `full` (CI's, and `./dev test`'s), or a tenth of it
    with SPECDASH_TEST_QUICK=1 for a quick local run."""
    return max(5, full // 10) if os.environ.get("SPECDASH_TEST_QUICK") == "1" else full


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--phase", choices=PHASES, help="run only the tests of one phase (tests/phases.py)")


# The phase this process runs (None: every test), for the fixtures that start real parts.
running: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    global running
    running = config.getoption("phase")
    config.pluginmanager.register(Phases(config), "specdash-phases")


class Phases:
    def __init__(self, config: pytest.Config):
        self.phase = config.getoption("phase")
        self.durations: dict[str, float] = {}
        self.real: set[str] = set()
        self.slow: dict[str, str] = {}
        self.shared_setup_s = 0.0
        self.starts = ServerStarts()

    # ------------------------------------------------------------ tiers and phases

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        kept: list[pytest.Item] = []
        left: list[pytest.Item] = []
        for item in items:
            tiers = tiers_of(item)
            for tier in tiers:
                item.add_marker(tier)
            marker = item.get_closest_marker("slow")
            if marker:
                item.user_properties.append(("slow", _slow_reason(item, marker)))
            (kept if self.phase in (None, phase_of(tiers)) else left).append(item)
        if left:
            config.hook.pytest_deselected(items=left)
            items[:] = kept

    # ------------------------------------------------------------ time budget (read where the reports arrive)

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.starts.module = nodeid.split("::")[0]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest):
        started = time.perf_counter()
        yield
        if fixturedef.scope == "session":
            self.shared_setup_s += time.perf_counter() - started

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        """A session's fixtures (the test database, a worker, the live server) are set up by
        whichever test comes first: their time is the session's, not that test's."""
        self.shared_setup_s = 0.0
        yield
        item.user_properties.append(("shared_setup_s", self.shared_setup_s))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        shared = sum(v for name, v in report.user_properties if name == "shared_setup_s" and isinstance(v, float))
        spent = report.duration - shared if report.when == "setup" else report.duration
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + max(spent, 0.0)
        if REAL & set(report.keywords):
            self.real.add(report.nodeid)
        self.slow.update((report.nodeid, str(v)) for name, v in report.user_properties if name == "slow")

    def over_budget(self) -> tuple[list[tuple[str, float]], list[str]]:
        over = [(node, s) for node, s in self.durations.items() if s > BUDGET_S and node not in self.real]
        over.sort(key=lambda row: -row[1])
        return over, [node for node, s in over if s > LIMIT_S and node not in self.slow]

    # ------------------------------------------------------------ vLLM server starts (an xdist controller
    # watches its workers' process trees too)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if not _is_xdist_worker(session.config):
            self.starts.start()

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if _is_xdist_worker(session.config):
            return
        self.starts.stop()
        FIGURES.mkdir(parents=True, exist_ok=True)
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        stats = reporter.stats if reporter else {}
        counts = {key: len(stats.get(key, [])) for key in ("passed", "failed", "error", "skipped")}
        stem = f"{self.phase or 'all'}-{os.getpid()}"
        (FIGURES / f"counts-{stem}.json").write_text(json.dumps(counts))
        (FIGURES / f"starts-{stem}.json").write_text(json.dumps(self.starts.by_module))
        _, failing = self.over_budget()
        stray = self.phase not in (None, "real") and self.starts.by_module
        if (failing or stray) and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        if _is_xdist_worker(config):
            return
        write = terminalreporter.write_line
        over, failing = self.over_budget()
        if over:
            terminalreporter.section(f"over the {BUDGET_S:.0f} s budget outside the real tier (tests/phases.py)")
            for node, seconds in over:
                if node in self.slow:
                    note = f"slow: {self.slow[node]}"
                else:
                    note = f"FAILS: over {LIMIT_S:.0f} s and not marked slow" if node in failing else ""
                write(f"{seconds:7.1f} s  {node}  {note}".rstrip())
        starts = self.starts.by_module
        if starts:
            terminalreporter.section("vLLM server starts by module")
            for module, count in sorted(starts.items()):
                write(f"{count:4d}  {module}")
            write(f"{sum(starts.values()):4d}  in all")
            if self.phase not in (None, "real"):
                write("FAILS: a vLLM server started outside the real tier: mark its test `vllm`")


def _slow_reason(item: pytest.Item, marker: pytest.Mark) -> str:
    reason = str(marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")).strip()
    if not reason:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.slow needs a reason (reason=...)")
    return reason


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


class ServerStarts:
    """Counts the vLLM servers this process's tree starts, by the test module running when each
    appeared: the leaders of `python -m vllm.entrypoints.openai.api_server` (a server's own
    children are not counted again) under this process, polled every half second (a start
    takes tens of seconds on CPU, a failing one several)."""

    def __init__(self) -> None:
        self.module = "(session set-up)"
        self.by_module: Counter[str] = Counter()
        self._seen: set[tuple[int, str]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="vllm-server-starts", daemon=True)

    def start(self) -> None:
        if sys.platform.startswith("linux"):
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
            self._poll()

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            self._poll()

    def _poll(self) -> None:
        table = _process_table()
        me = os.getpid()
        for pid, (parent, started, is_server) in table.items():
            if not is_server or table.get(parent, (0, "", False))[2] or (pid, started) in self._seen:
                continue
            if _descends_from(pid, me, table):
                self._seen.add((pid, started))
                self.by_module[self.module] += 1


def _process_table() -> dict[int, tuple[int, str, bool]]:
    """pid → (parent pid, start time in clock ticks, runs vLLM's API server)."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        table[int(entry.name)] = (int(fields[1]), fields[19], SERVER_MODULE.encode() in cmdline)
    return table


def _descends_from(pid: int, ancestor: int, table: dict[int, tuple[int, str, bool]]) -> bool:
    for _ in range(64):
        if pid == ancestor:
            return True
        if pid not in table or pid <= 1:
            return False
        pid = table[pid][0]
    return False


def summary(figures: Path = FIGURES) -> str:
    """`./dev test`'s closing lines: each phase's time and exit status (phase-times.tsv, which
    ./dev writes), and the vLLM server starts per module (the sessions' starts-*.json)."""
    lines = ["phase      seconds  result"]
    times = figures / "phase-times.tsv"
    total = 0
    for row in times.read_text().splitlines() if times.exists() else []:
        phase, seconds, status = row.split("\t")
        total += int(seconds)
        result = {"0": "passed", "5": "no tests selected"}.get(status, f"FAILED (exit {status})")
        lines.append(f"{phase:<10} {int(seconds):7d}  {result}")
    lines.append(f"{'all':<10} {total:7d}")
    starts: Counter[str] = Counter()
    for path in sorted(figures.glob("starts-*.json")):
        starts.update(json.loads(path.read_text()))
    lines.append("vLLM server starts by module:")
    lines += [f"{count:4d}  {module}" for module, count in sorted(starts.items())]
    lines.append(f"{sum(starts.values()):4d}  in all")
    counts: Counter[str] = Counter()
    for path in figures.glob("counts-*.json"):
        counts.update(json.loads(path.read_text()))
    # The closing line a CI reads: every phase's tests together.
    closing = f"{counts['passed']} passed, {counts['failed'] + counts['error']} failed"
    lines.append(closing + (f", {counts['skipped']} skipped" if counts["skipped"] else ""))
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1]) if len(sys.argv) > 1 else FIGURES))
