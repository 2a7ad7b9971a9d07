"""`check_guardrails` against canned /metrics pages served over HTTP: the table it prints, exit 1
when a rule fires, and one line with exit 2 for every bad input (the check through a real vLLM
server is in tests/integration/test_guardrails_live.py)."""

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from experiments.measurement.deploy import alert_rules
from tests.measurement.deploy.test_alert_rules import AFTER, BEFORE, RULES
from workers.server.command import free_port


class Pages:
    """A local server that answers GETs with the given pages in turn, the last one from then on."""

    def __init__(self, *pages: str, content_type: str = "text/plain; version=0.0.4"):
        served = list(pages)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = (served.pop(0) if len(served) > 1 else served[0]).encode()
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def __enter__(self) -> "Pages":
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def rules_file(tmp_path) -> Path:
    path = tmp_path / "guardrails.yaml"
    path.write_text(alert_rules.rules_yaml("g", RULES, "test rules"))
    return path


def _check(rules: Path | str, url: str, capsys, window: float = 0.01) -> tuple[int, str, str]:
    try:
        call_command("check_guardrails", rules=str(rules), metrics_url=url, window=window)
    except CommandError as error:
        return error.returncode, capsys.readouterr().out, str(error)
    return 0, capsys.readouterr().out, ""


def test_each_rule_prints_its_live_value_threshold_and_state_and_a_firing_one_exits_1(rules_file, capsys):
    with Pages(BEFORE, AFTER) as pages:
        code, out, error = _check(rules_file, pages.url, capsys)

    lines = out.splitlines()
    assert code == 1
    assert error == "2 of 4 rules firing: Acceptance, RunningAboveOne"
    assert lines[1].split() == ["Acceptance", "0.35", "<", "0.4", "FIRING"]
    assert lines[2].split() == ["Position0", "0.6", "<", "0.6", "OK"]
    assert lines[3].split() == ["Running", "2", ">", "4", "OK"]
    assert lines[4].split() == ["RunningAboveOne", "2", ">", "1", "FIRING"]


def test_no_drafts_in_the_window_is_no_data_not_a_firing_rule(tmp_path, capsys):
    path = tmp_path / "acceptance.yaml"
    path.write_text(alert_rules.rules_yaml("g", RULES[:2], "acceptance only"))

    with Pages(AFTER) as pages:
        code, out, _ = _check(path, pages.url, capsys)

    assert code == 0
    assert [line.split()[-2:] for line in out.splitlines()[1:3]] == [["NO", "DATA"], ["NO", "DATA"]]


def _closed_url() -> str:
    return f"http://127.0.0.1:{free_port()}/metrics"


BAD_RULES = {
    "a missing file": (None, "cannot read the rules file"),
    "malformed YAML": ("groups: [", "not YAML"),
    "an unknown rule shape": ("groups:\n- name: g\n  rules:\n  - alert: A\n    expr: up == 0\n", "none of the shapes"),
    "no rules": ("groups:\n- name: g\n  rules: []\n", "has no alerting rules"),
}


@pytest.mark.parametrize(("content", "message"), BAD_RULES.values(), ids=BAD_RULES.keys())
def test_a_bad_rules_file_is_one_line_and_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "rules.yaml"
    if content is not None:
        path.write_text(content)

    code, _, error = _check(path, _closed_url(), capsys)

    assert code == 2
    assert message in error
    assert "\n" not in error


@pytest.mark.parametrize("page", ["<html><body>Welcome</body></html>", "# TYPE up gauge\nup 1\n"])
def test_a_page_that_is_not_vllms_metrics_is_one_line_and_exit_2(rules_file, capsys, page):
    with Pages(page) as pages:
        code, _, error = _check(rules_file, pages.url, capsys)

    assert code == 2
    assert error.startswith(f"{pages.url} is not a vLLM /metrics page: /metrics has no vllm:kv_cache_usage_perc")
    assert "\n" not in error


def test_a_restart_during_the_window_is_exit_2(rules_file, capsys):
    with Pages(AFTER, BEFORE) as pages:
        code, _, error = _check(rules_file, pages.url, capsys)

    assert (code, error) == (2, f"the counters at {pages.url} went down during the window: the server restarted")


@pytest.mark.parametrize(("url", "message"), [(None, "Connection refused"), ("metrics", "unknown url type")])
def test_an_unreachable_url_is_one_line_and_exit_2(rules_file, capsys, url, message):
    url = url or _closed_url()

    code, _, error = _check(rules_file, url, capsys)

    assert code == 2
    assert error.startswith(f"cannot read {url}: ")
    assert message in error


def test_a_window_that_is_not_positive_is_exit_2(rules_file, capsys):
    assert _check(rules_file, _closed_url(), capsys, window=0)[::2] == (
        2,
        "--window must be a positive number of seconds, not 0",
    )


def test_from_the_shell_bad_input_prints_one_line_without_a_traceback(tmp_path):
    command = [sys.executable, "manage.py", "check_guardrails", "--rules", str(tmp_path / "none.yaml")]
    done = subprocess.run(
        [*command, "--metrics-url", _closed_url()], cwd=settings.BASE_DIR, capture_output=True, text=True
    )

    assert done.returncode == 2
    assert done.stderr.startswith("CommandError: cannot read the rules file")
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
