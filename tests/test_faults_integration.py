"""The fast scenarios of scripts/fault_injection.py, through its own stack of real
processes (PostgreSQL, Redis, two Celery workers, gunicorn, vLLM on the demo target):
Redis down at submission, the web server restarted while a page polls, and the same task
delivered twice each recover with no run lost and no row duplicated."""

import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
FAST = ["redis-down", "web-restart", "delivered-twice"]


def _rows(table: str) -> list[list[str]]:
    lines = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| scenario")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


@pytest.mark.skipif(
    not (settings.SPECDASH_MODELS_DIR / "target" / "config.json").exists(),
    reason="demo models not built (./dev test builds them)",
)
def test_the_fast_faults_recover_with_nothing_lost_or_duplicated():
    result = subprocess.run(
        [sys.executable, "scripts/fault_injection.py", "--only", *FAST],
        cwd=ROOT, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip

    rows = _rows(result.stdout)
    assert len(rows) == len(FAST), result.stdout + result.stderr[-3000:]
    for scenario, _, outcome, lost, duplicated, seconds in rows:
        assert (lost, duplicated) == ("0", "0"), (scenario, outcome)
        assert float(seconds) < 60, (scenario, seconds)
    assert result.returncode == 0
