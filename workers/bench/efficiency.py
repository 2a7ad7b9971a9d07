"""Where an experiment's wall time went: under measured load, starting vLLM, warming up,
and what specdash adds around them, from what the experiment recorded (its runs' times and
summaries, and the session's vLLM logs the worker wrote).
"""

import math
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from experiments.models import Experiment, Run
from workers.sessions import Session, sessions_group

DEFINITIONS = """\
Definitions (from what the experiment recorded; times in seconds):
  wall time        experiment finished_at - started_at.
  measured load    per run, its summary's duration_s: first measured request sent to the
                   last one answered. Under load: the sum over runs; share: of the wall time.
  session          one (block, arm) server: from the end of the previous session's last
                   run (the experiment's start for the first) to the end of its own last run.
  before 1st run   session start to its first run's started_at: stopping the previous
                   server, starting this one, waiting for /health, the environment snapshot.
  vLLM start-up    not stored in the database. Read from the session's vLLM log: first to
                   last timestamped line before "Application startup complete." (1 s
                   resolution; the Python imports before vLLM's first line are not in it,
                   so they count as specdash's). '-' when the log is missing or not this
                   session's (written outside the session's time).
  to vLLM log      session start to vLLM's first log line: stopping the previous server,
                   starting the process, importing vLLM and torch (inside 'before 1st run').
  warm-up          not recorded apart. Estimated per run: ceil(warm-up requests /
                   concurrency) x the run's median measured E2E latency.
  gaps             between the session's runs: a run's finished_at to the next's started_at.
  specdash adds    session - vLLM start-up - measured load - warm-up: stopping servers,
                   polling /health, snapshots, the load generator's set-up and /metrics
                   reads, storing the requests, and the gaps.
"""

LOG_TIME = re.compile(r"\b(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\b")
READY_LINE = "Application startup complete."


@dataclass(frozen=True)
class LogStart:
    """vLLM's start-up as its log shows it (the worker's local time, whole seconds)."""

    first: datetime
    ready: datetime

    @property
    def seconds(self) -> float:
        return (self.ready - self.first).total_seconds()


@dataclass(frozen=True)
class RunTimes:
    started: datetime
    finished: datetime
    measured_s: float
    warmup_s: float


@dataclass(frozen=True)
class SessionTimes:
    block: int
    arm: str
    opened: datetime
    runs: list[RunTimes]
    server: LogStart | None

    @property
    def server_start_s(self) -> float | None:
        return self.server.seconds if self.server else None

    @property
    def to_first_log_s(self) -> float | None:
        return (self.server.first - self.opened).total_seconds() if self.server else None

    @property
    def total_s(self) -> float:
        return (self.runs[-1].finished - self.opened).total_seconds()

    @property
    def before_first_s(self) -> float:
        return (self.runs[0].started - self.opened).total_seconds()

    @property
    def measured_s(self) -> float:
        return sum(run.measured_s for run in self.runs)

    @property
    def warmup_s(self) -> float:
        return sum(run.warmup_s for run in self.runs)

    @property
    def gaps_s(self) -> float:
        pairs = zip(self.runs, self.runs[1:], strict=False)
        return sum((after.started - before.finished).total_seconds() for before, after in pairs)

    @property
    def added_s(self) -> float | None:
        if self.server_start_s is None:
            return None
        return self.total_s - self.server_start_s - self.measured_s - self.warmup_s


def warmup_estimate_s(warmup: int, concurrency: int, e2e_p50_ms: float | None) -> float:
    return math.ceil(warmup / concurrency) * (e2e_p50_ms or 0.0) / 1000


def log_start(text: str, year: int) -> LogStart | None:
    """First and last timestamped lines before "Application startup complete."."""
    stamps: list[datetime] = []
    for line in text.splitlines():
        if READY_LINE in line:
            return LogStart(stamps[0], stamps[-1]) if stamps else None
        found = LOG_TIME.search(line)
        if found:
            month, day, hour, minute, second = map(int, found.groups())
            stamps.append(datetime(year, month, day, hour, minute, second).astimezone())
    return None


def session_log_start(path: Path, opened: datetime, closed: datetime) -> LogStart | None:
    """None without a log, or when the log was last written outside the session (another
    experiment with the same id on this data directory overwrote it)."""
    if not path.is_file():
        return None
    written = path.stat().st_mtime
    if not opened.timestamp() <= written <= closed.timestamp() + 60:
        return None
    return log_start(path.read_text(errors="replace"), opened.year)


def run_times(experiment: Experiment, run: Run) -> RunTimes:
    summary = run.summary
    warmup = warmup_estimate_s(experiment.warmup_requests, run.concurrency, summary.e2e_p50_ms)
    assert run.started_at is not None, "a succeeded run started"
    assert run.finished_at is not None, "a succeeded run finished"
    return RunTimes(run.started_at, run.finished_at, summary.duration_s, warmup)


def experiment_sessions_times(experiment: Experiment, log_dir: Path) -> list[SessionTimes]:
    runs = (
        experiment.runs.succeeded()
        .select_related("arm", "summary")
        .in_execution_order(server_per_block=experiment.server_per_block)
    )
    opened, _ = _span(experiment)
    sessions = []
    for session in sessions_group(runs, experiment.server_per_block):
        times = [run_times(experiment, run) for run in session.runs]
        path = log_dir / f"experiment-{experiment.id}" / f"{session.name}.log"
        server = session_log_start(path, opened, times[-1].finished)
        sessions.append(SessionTimes(_block(experiment, session), session.arm.label, opened, times, server))
        opened = times[-1].finished
    return sessions


def _span(experiment: Experiment) -> tuple[datetime, datetime]:
    """When the experiment started and finished (it has finished)."""
    assert experiment.started_at is not None, "a finished experiment started"
    assert experiment.finished_at is not None, "a finished experiment finished"
    return experiment.started_at, experiment.finished_at


def _block(experiment: Experiment, session: Session) -> int:
    return session.runs[0].repetition if experiment.server_per_block else 0


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def report(experiment: Experiment, sessions: list[SessionTimes]) -> list[str]:
    started, finished = _span(experiment)
    wall = (finished - started).total_seconds()
    measured = sum(s.measured_s for s in sessions)
    lines = [DEFINITIONS, f"experiment {experiment.id}: {experiment.name}"]
    lines.append(f"wall time {wall:.1f} s; under measured load {measured:.1f} s ({measured / wall:.1%})")
    lines.append("")
    lines.append(
        f"{'block':>5} {'arm':<28} {'session':>8} {'before 1st':>10} {'to vLLM log':>11} {'vLLM start':>10} "
        f"{'warm-up':>8} {'measured':>8} {'gaps':>6} {'specdash':>8}"
    )
    for s in sessions:
        lines.append(
            f"{s.block or '-':>5} {s.arm[:28]:<28} {s.total_s:8.1f} {s.before_first_s:10.1f} "
            f"{_figure(s.to_first_log_s):>11} {_figure(s.server_start_s):>10} {s.warmup_s:8.1f} "
            f"{s.measured_s:8.1f} {s.gaps_s:6.1f} "
            f"{_figure(s.added_s):>8}"
        )
    lines += ["", *arm_lines(sessions)]
    if sessions:
        tail = (finished - sessions[-1].runs[-1].finished).total_seconds()
        lines.append(f"after the last run (last server stopped, analysis): {tail:.1f} s")
    return lines


def arm_lines(sessions: list[SessionTimes]) -> list[str]:
    """Per arm, the mean over its sessions whose vLLM start-up could be read."""
    lines = ["specdash adds per arm (mean over its sessions, beyond vLLM's own start-up):"]
    for arm in dict.fromkeys(s.arm for s in sessions):
        known = [s for s in sessions if s.arm == arm and s.added_s is not None]
        if not known:
            lines.append(f"  {arm:<28} -  (no readable vLLM log)")
            continue
        added = sum(s.added_s or 0.0 for s in known) / len(known)
        start = sum(s.server_start_s or 0.0 for s in known) / len(known)
        lines.append(f"  {arm:<28} {added:6.1f} s  (vLLM start-up {start:.1f} s; {len(known)} sessions)")
    return lines


def latest_finished() -> Experiment | None:
    return Experiment.objects.filter(status=Experiment.Status.FINISHED).order_by("-finished_at").first()


def report_experiment(experiment_id: int | None, log_dir: Path) -> list[str]:
    """The report of the experiment (the latest finished one without an id); SystemExit when there is none."""
    experiment = Experiment.objects.get(id=experiment_id) if experiment_id else latest_finished()
    if experiment is None or experiment.finished_at is None:
        raise SystemExit("no finished experiment")
    return report(experiment, experiment_sessions_times(experiment, log_dir))
