"""Where an experiment's wall time went (workers/bench/efficiency.py) on a seeded experiment
whose times are set by hand: the shares and the time specdash adds against figures computed
by hand."""

import os
from datetime import UTC, datetime, timedelta

import pytest

from experiments.models import RunSummary
from tests.factories import seed_finished_experiment
from workers.bench import efficiency

T0 = datetime(2026, 1, 1, 10, 0, tzinfo=UTC)
# Each session: 30 s to its first run, a run of 10 s, a gap of 1 s, a run of 8 s.
SESSION_S = 49


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _log_line(moment: datetime, text: str) -> str:
    return f"(APIServer pid=1) INFO {moment.astimezone().strftime('%m-%d %H:%M:%S')} [api.py:1] {text}\n"


def _write_log(path, opened: float, *, written: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "Triton is installed, but doesn't include CPU backend.\n"
    text += _log_line(_at(opened + 5), "vLLM version 0.32.0") + _log_line(_at(opened + 25), "Route: /health")
    path.write_text(text + "INFO:     Application startup complete.\n")
    os.utime(path, (_at(written).timestamp(), _at(written).timestamp()))


@pytest.fixture
def timed(db, tmp_path):
    """One block, three arms in position order, levels 1 then 4; the first arm's log is
    this session's, the second's was written long after it, the third has none."""
    experiment = seed_finished_experiment(requests=4, repetitions=1, warmup_requests=2, server_per_block=True)
    experiment.started_at, experiment.finished_at = T0, _at(3 * SESSION_S + 3)
    experiment.save()
    for arm in experiment.arms.order_by("position"):
        opened = arm.position * SESSION_S
        for level, (start, end, duration, e2e_ms) in {1: (30, 40, 6.0, 500.0), 4: (41, 49, 5.0, 1000.0)}.items():
            run = experiment.runs.get(arm=arm, concurrency=level)
            run.block_position, run.level_position = arm.position + 1, 1 if level == 1 else 2
            run.started_at, run.finished_at = _at(opened + start), _at(opened + end)
            run.save()
            RunSummary.objects.filter(run=run).update(duration_s=duration, e2e_p50_ms=e2e_ms)
        log = tmp_path / f"experiment-{experiment.id}" / f"arm-{arm.position}-{arm.id}-block-1-level-1.log"
        if arm.position < 2:
            _write_log(log, opened, written=opened + 40 + (3600 if arm.position else 0))
    experiment.refresh_from_db()
    return experiment, efficiency.experiment_sessions_times(experiment, tmp_path)


def test_sessions_split_the_time_as_computed_by_hand(timed):
    _, sessions = timed
    assert [s.arm for s in sessions] == ["baseline", "n-gram k=4", "draft k=3"]
    first = sessions[0]
    assert first.total_s == SESSION_S
    assert first.before_first_s == 30
    assert first.to_first_log_s == 5
    assert first.server_start_s == 20
    # warm-up: 2 requests at level 1, 2 × 0.5 s; at level 4 one round of 1 s
    assert first.warmup_s == pytest.approx(2.0)
    assert first.measured_s == pytest.approx(11.0)
    assert first.gaps_s == 1
    assert first.added_s == pytest.approx(49 - 20 - 11 - 2)
    assert [s.server_start_s for s in sessions[1:]] == [None, None]  # a stale log, no log
    assert sessions[1].added_s is None


def test_report_prints_the_share_and_the_time_added_per_arm(timed):
    experiment, sessions = timed
    lines = efficiency.report(experiment, sessions)
    text = "\n".join(lines)
    assert lines[0].startswith("Definitions")
    assert "wall time 150.0 s; under measured load 33.0 s (22.0%)" in text
    assert any(line.split()[:3] == ["baseline", "16.0", "s"] for line in lines)
    assert any(line.split()[:3] == ["n-gram", "k=4", "-"] for line in lines)
    assert "after the last run (last server stopped, analysis): 3.0 s" in text


def test_a_log_without_the_ready_line_gives_no_start_up():
    text = _log_line(T0, "vLLM version 0.32.0") + _log_line(_at(9), "Loading weights")
    assert efficiency.log_start(text, 2026) is None
    assert efficiency.log_start(text + "INFO:     Application startup complete.\n", 2026).seconds == 9


def test_warm_up_rounds_follow_the_concurrency():
    assert efficiency.warmup_estimate_s(2, 1, 500.0) == 1.0
    assert efficiency.warmup_estimate_s(5, 4, 500.0) == 1.0
    assert efficiency.warmup_estimate_s(2, 4, None) == 0.0
