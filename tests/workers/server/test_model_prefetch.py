"""The model prefetch's child process, with a stand-in for the vLLM environment's Python
(tests/workers/server/test_model_prefetch_hub.py fetches for real from a local hub)."""

import os
import stat
import sys
import time

import pytest

from workers.server.model_prefetch import ModelPrefetch, model_ids


def test_only_model_ids_are_fetched_each_once_in_order():
    models = ["/srv/specdash/models/target", "org/draft", "", "org/head", "org/draft", "/srv/specdash/models/d"]

    assert model_ids(models) == ["org/draft", "org/head"]


@pytest.fixture
def stand_in(tmp_path):
    """An executable that behaves as the test says (exit code, seconds to sleep) and
    records its arguments: it stands where the vLLM environment's Python would."""
    script = tmp_path / "python"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys, time\n"
        "here = os.path.dirname(sys.argv[0])\n"
        "json.dump(sys.argv[1:], open(os.path.join(here, 'argv.json'), 'w'))\n"
        "open(os.path.join(here, 'pid'), 'w').write(str(os.getpid()))\n"
        "time.sleep(float(open(os.path.join(here, 'sleep')).read()))\n"
        "sys.exit(int(open(os.path.join(here, 'code')).read()))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)

    def make(*, code=0, sleep=0.0):
        (tmp_path / "code").write_text(str(code))
        (tmp_path / "sleep").write_text(str(sleep))
        return ModelPrefetch(["/srv/models/target", "org/draft"], python=str(script), log_path=tmp_path / "log")

    return make


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_fetch_that_succeeds_says_so(stand_in, tmp_path):
    with stand_in(code=0) as prefetch:
        assert prefetch.wait(30) == "fetched"

    argv = __import__("json").loads((tmp_path / "argv.json").read_text())
    assert argv[0] == "-c"
    assert argv[-1] == "org/draft"
    assert "/srv/models/target" not in argv


def test_a_fetch_that_fails_is_reported_and_left_to_vllm(stand_in):
    with stand_in(code=3) as prefetch:
        assert prefetch.wait(30) == "failed (exit 3)"


def _started(tmp_path) -> int:
    """The stand-in's pid, once it has written it (a loaded host can take over a second)."""
    deadline = time.monotonic() + 30
    while not (tmp_path / "pid").exists():
        assert time.monotonic() < deadline, "the stand-in did not start within 30 s"
        time.sleep(0.05)
    return int((tmp_path / "pid").read_text())


def test_a_fetch_that_takes_too_long_is_stopped(stand_in, tmp_path):
    with stand_in(sleep=60) as prefetch:
        pid = _started(tmp_path)
        started = time.monotonic()
        assert prefetch.wait(1) == "stopped after 1 s"
        assert time.monotonic() - started < 10
        assert not _alive(pid)


def test_a_cancel_while_waiting_stops_the_fetch_with_its_context(stand_in, tmp_path):
    class Cancelled(Exception):
        pass

    def cancel():
        raise Cancelled

    prefetch = stand_in(sleep=60)
    with prefetch:
        pid = _started(tmp_path)
        with pytest.raises(Cancelled):
            prefetch.wait(30, cancel)
    assert not _alive(pid)


def test_nothing_starts_without_model_ids_or_when_the_host_is_offline(stand_in, tmp_path, monkeypatch):
    only_paths = ModelPrefetch(["/srv/models/target"], python="/nonexistent/python", log_path=tmp_path / "log")
    with only_paths:
        assert only_paths.wait(1) == "nothing to fetch"

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with stand_in() as offline:
        assert offline.wait(1) == "nothing to fetch"
    assert not (tmp_path / "argv.json").exists()
