"""Check a live vLLM server against a decision's guardrails file (downloaded from the decision
page): read its /metrics, wait a window, read it again, and evaluate each rule on what the
counters added in between, as Prometheus evaluates the same expressions over its own window
(experiments/measurement/deploy/alert_rules.py). Prints each rule's live value, threshold and state;
exits 1 when a rule fires and 2 on bad input, with one line saying what was wrong."""

import time
import urllib.error
import urllib.request
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from experiments.measurement.deploy import alert_rules
from experiments.measurement.engine import prom

BAD_INPUT = 2
FIRED = 1
READ_TIMEOUT_S = 10.0


def bad_input(message: str) -> CommandError:
    return CommandError(message, returncode=BAD_INPUT)


def read_rules(path: str) -> list[alert_rules.AlertRule]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise bad_input(f"cannot read the rules file {path}: {error}") from None
    try:
        rules = alert_rules.read_rules(text)
    except alert_rules.RuleFileError as error:
        raise bad_input(f"{path}: {error}") from None
    if not rules:
        raise bad_input(f"{path} has no alerting rules")
    return rules


def scrape(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=READ_TIMEOUT_S) as response:
            return response.read().decode("utf-8", errors="replace")
    except (OSError, ValueError) as error:
        # URLError and HTTPError are OSErrors; a URL without a scheme is a ValueError.
        raise bad_input(f"cannot read {url}: {error}") from None


def read_window(url: str, seconds: float) -> alert_rules.Window:
    """The server's window: two readings of /metrics `seconds` apart."""
    before = scrape(url)
    time.sleep(seconds)
    after = scrape(url)
    try:
        return alert_rules.window(before, after)
    except prom.CounterReset:
        raise bad_input(f"the counters at {url} went down during the window: the server restarted") from None
    except ValueError as error:
        raise bad_input(f"{url} is not a vLLM /metrics page: {' '.join(str(error).split())}") from None


def row(check: alert_rules.Check) -> str:
    condition = check.rule.condition
    live = "-" if check.value is None else f"{check.value:.4g}"
    threshold = f"{condition.OPERATOR} {alert_rules.number(condition.threshold)}"
    return f"{check.rule.alert:<40} {live:>10}  {threshold:<10} {check.state}"


class Command(BaseCommand):
    help = (
        "Check a live vLLM server's /metrics against a decision's guardrails (the rules file from the decision "
        "page): per rule the live value, its threshold and OK, FIRING or NO DATA. Exits 1 when a rule fires, "
        "2 on bad input."
    )

    def add_arguments(self, parser):
        parser.add_argument("--rules", required=True, help="the guardrails file (YAML) downloaded from a decision")
        parser.add_argument("--metrics-url", required=True, help="the server's /metrics, e.g. http://HOST:8000/metrics")
        parser.add_argument(
            "--window", type=float, default=60.0, help="seconds between the two readings of /metrics (default 60)"
        )

    def handle(self, *args, rules: str, metrics_url: str, window: float, **options):
        if not window > 0:
            raise bad_input(f"--window must be a positive number of seconds, not {window:g}")
        guardrails = read_rules(rules)
        measured = read_window(metrics_url, window)
        checks = [rule.check(measured) for rule in guardrails]
        self.stdout.write(f"{'rule':<40} {'live':>10}  {'threshold':<10} state")
        self.stdout.write("\n".join(row(check) for check in checks))
        self.stdout.write(
            f"Over {window:g} s at {metrics_url}. NO DATA: no drafts in the window (or no such series). "
            "Running requests: the lower of the two readings."
        )
        firing = [check.rule.alert for check in checks if check.state == alert_rules.FIRING]
        if firing:
            raise CommandError(f"{len(firing)} of {len(checks)} rules firing: {', '.join(firing)}", returncode=FIRED)
