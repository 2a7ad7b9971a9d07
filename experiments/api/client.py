#!/usr/bin/env python3
"""specdash from a CI pipeline: submit an experiment from a spec file, follow it, print the
verdict table, and exit with a status that says whether the stated expectations held.

Standard library only (PyYAML, if installed, also reads .yaml specs), so it can be copied to
any machine that reaches the specdash API:

    export SPECDASH_URL=https://specdash.example.com SPECDASH_TOKEN=...   # token: /api/token/
    python3 client.py spec.json --wait --expect "n-gram lookup k=4 faster at concurrency <= 8"

A spec is the experiment form as JSON (docs/openapi.yaml, ExperimentSpec); it may also list
its expectations under "expect". An expectation reads

    ARM [is] [not] OUTCOME [or OUTCOME ...] [on METRIC] [at [concurrency] [OP] LEVEL]

with OUTCOME faster, slower, equivalent, not worth it or inconclusive, METRIC server_tpot (TPOT as vLLM's
engine timed it; the default), tpot (timed at the client), e2e, ttft, output_throughput or
request_throughput, OP one of <= < >= > = (≤ ≥ too). It holds when
the arm's verdict at every measured level that matches is one of the outcomes named.

Exit status: 0 every expectation held (or none was stated), 1 one did not, 2 the spec or the
request was refused, 3 the experiment failed, was cancelled or did not end in time.
"""

import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

HELD, NOT_HELD, REFUSED, DID_NOT_FINISH = 0, 1, 2, 3
OUTCOMES = ("faster", "slower", "equivalent", "not worth it", "inconclusive")
# The words for the service (the experiment's objective: its primary metric faster and every guard
# shown no worse), read from the question's cells; the words above are one metric's.
JOINT_WORDS = ("pays", "costs")
JOINT_WORD_CHOICES = ("pays", "costs", "not worth it", "inconclusive")
JOINT = "the service"  # what a joint-word expectation is judged on, in place of a metric
# The first is the default of an expectation that names no metric, as it is the metric the page's
# verdict grid opens on: TPOT as vLLM's engine timed it.
METRICS = ("server_tpot", "tpot", "e2e", "ttft", "output_throughput", "request_throughput")
TABLE_METRICS = ("server_tpot", "tpot", "e2e", "output_throughput")
ENDED = ("finished", "failed", "cancelled")
OPERATORS = {
    "<=": lambda a, b: a <= b, "≤": lambda a, b: a <= b, "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b, "≥": lambda a, b: a >= b, ">": lambda a, b: a > b, "=": lambda a, b: a == b,
}  # fmt: skip
_WORD = "|".join((*JOINT_WORDS, *OUTCOMES))
EXPECTATION = re.compile(
    rf"^(?P<arm>.+?)\s+(?:is\s+)?(?P<negated>not\s+)?(?P<outcomes>(?:{_WORD})(?:\s+or\s+(?:{_WORD}))*)"
    rf"(?:\s+on\s+(?P<metric>{'|'.join(METRICS)}))?"
    r"(?:\s+at\s+(?:concurrency\s*)?(?P<op><=|>=|≤|≥|<|>|=)?\s*(?P<level>\d+))?\s*$",
    re.IGNORECASE,
)


Answer = dict[str, Any]  # a JSON object the API answered


class Api(Protocol):
    """The API's calls the client makes: over HTTP (HttpApi), or in the server's own process
    (the submit_spec management command)."""

    def submit(self, spec: dict[str, Any]) -> Answer: ...
    def experiment(self, experiment_id: int) -> Answer: ...
    def progress(self, experiment_id: int) -> Answer: ...
    def results(self, experiment_id: int) -> Answer: ...


class Out(Protocol):
    """Where the client prints: a text stream, or a management command's stdout."""

    def write(self, text: str, /) -> object: ...
    def flush(self) -> object: ...


class Refused(Exception):
    """The API said no: the spec broke the experiment form's rules, or the request was bad."""

    def __init__(self, messages: list[str]):
        super().__init__("\n".join(messages))
        self.messages = messages


@dataclass(frozen=True)
class Expectation:
    text: str
    arm: str
    allowed: frozenset[str]
    metric: str
    op: str | None
    level: int | None

    def applies_to(self, level: int) -> bool:
        return self.level is None or OPERATORS[self.op or "="](level, self.level)


def parse_expectation(text: str) -> Expectation:
    match = EXPECTATION.match(text.strip())
    if not match:
        raise ValueError(
            f"Cannot read the expectation {text!r}; write e.g. 'n-gram lookup k=4 faster at concurrency <= 8'."
        )
    named = {word.lower() for word in re.split(r"\s+or\s+", match["outcomes"], flags=re.IGNORECASE)}
    joint = bool(named & set(JOINT_WORDS))
    if joint and match["metric"]:
        raise ValueError(f"{text!r}: pays and costs are the service's words, of no single metric; drop 'on …'.")
    words = JOINT_WORD_CHOICES if joint else OUTCOMES
    allowed = set(words) - named if match["negated"] else named
    level = int(match["level"]) if match["level"] else None
    metric = JOINT if joint else (match["metric"] or METRICS[0]).lower()
    return Expectation(text.strip(), match["arm"].strip(), frozenset(allowed), metric, match["op"], level)


def joint_cells(results: Answer) -> list[Answer]:
    """The question's cells as the service's words: {"arm_id", "level", "outcome": the joint
    word, "point", "ci_low", "ci_high", "sentence"} (an analysis from before objectives: none)."""
    cells = (results.get("question") or {}).get("cells") or []
    return [
        {"arm_id": c["arm_id"], "level": c["level"], "outcome": c["joint"]["word"], "point": None,
         "ci_low": None, "ci_high": None, "sentence": c["joint"]["sentence"]}
        for c in cells if c.get("joint")
    ]  # fmt: skip


def judge(expectation: Expectation, results: Answer) -> tuple[bool, str]:
    """Whether the expectation held, and a line that says why."""
    arms = {arm["label"]: arm["id"] for arm in results["arms"]}
    if expectation.arm not in arms:
        return False, f"no arm is labelled {expectation.arm!r} (the arms: {', '.join(arms)})"
    rows = joint_cells(results) if expectation.metric == JOINT else results["speedups"]
    cells = [
        s
        for s in rows
        if s["arm_id"] == arms[expectation.arm] and s.get("metric", JOINT) == expectation.metric
        and expectation.applies_to(s["level"])
    ]  # fmt: skip
    if not cells:
        return False, "no measured level matches"
    misses = [f"at {c['level']}: {cell_text(c)}" for c in cells if c["outcome"] not in expectation.allowed]
    if misses:
        return False, "; ".join(misses)
    return True, "; ".join(f"at {c['level']}: {cell_text(c)}" for c in sorted(cells, key=lambda c: c["level"]))


def cell_text(cell: Answer) -> str:
    if "sentence" in cell:
        return str(cell["sentence"])
    if cell["point"] is None:
        return str(cell["outcome"])
    interval = f" [{cell['ci_low']:.3g}, {cell['ci_high']:.3g}]" if cell["ci_low"] is not None else ""
    return f"{cell['outcome']} {cell['point']:.3g}{interval}"


def verdict_table(results: Answer) -> str:
    """Per verdict metric, the compared arms × levels: outcome and speedup [95 % interval]."""
    levels, lines = results["levels"], []
    by_cell = {(s["arm_id"], s["level"], s["metric"]): s for s in results["speedups"]}
    compared = [arm for arm in results["arms"] if not arm["is_baseline"]]
    width = max([len(arm["label"]) for arm in compared] + [12])
    words = {(c["arm_id"], c["level"]): c["outcome"] for c in joint_cells(results)}
    if words:
        lines.append("for the service (the objective: the primary metric faster, every guard no worse)")
        lines.append(f"  {'arm':<{width}}  " + "  ".join(f"{'c=' + str(level):<32}" for level in levels))
        for arm in compared:
            if any((arm["id"], level) in words for level in levels):
                texts = [words.get((arm["id"], level), "not asked") for level in levels]
                lines.append(f"  {arm['label']:<{width}}  " + "  ".join(f"{text:<32}" for text in texts))
    for metric in TABLE_METRICS:
        lines.append(f"{metric} speedup over the baseline (above 1: the arm is better)")
        lines.append(f"  {'arm':<{width}}  " + "  ".join(f"{'c=' + str(level):<32}" for level in levels))
        for arm in compared:
            cells = [by_cell.get((arm["id"], level, metric)) for level in levels]
            texts = [cell_text(cell) if cell else "no data" for cell in cells]
            lines.append(f"  {arm['label']:<{width}}  " + "  ".join(f"{text:<32}" for text in texts))
    return "\n".join(lines)


def progress_line(progress: Answer) -> str:
    running = [run for run in progress["runs"] if run["status"] == "running"]
    now = "; ".join(
        f"{run['arm']} at {run['concurrency']}, block {run['repetition']}: "
        f"{run['requests_done']}/{run['requests_total']} requests"
        for run in running
    )
    return (
        f"{time.strftime('%H:%M:%S')} {progress['status']}: {progress['done']}/{progress['total']} runs done "
        f"({progress['succeeded']} succeeded, {progress['failed']} failed)" + (f"; {now}" if now else "")
    )


class HttpApi:
    """The specdash REST API over HTTP with a token."""

    def __init__(self, url: str, token: str, timeout_s: float = 60):
        self.url, self.token, self.timeout_s = url.rstrip("/"), token, timeout_s

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Answer:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Authorization", f"Token {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                answer: Answer = json.load(response)
                return answer
        except urllib.error.HTTPError as error:
            raise Refused(_error_messages(error)) from None

    def submit(self, spec: dict[str, Any]) -> Answer:
        return self._call("POST", "/api/v1/experiments/", spec)

    def experiment(self, experiment_id: int) -> Answer:
        return self._call("GET", f"/api/v1/experiments/{experiment_id}/")

    def progress(self, experiment_id: int) -> Answer:
        return self._call("GET", f"/api/v1/experiments/{experiment_id}/progress/")

    def results(self, experiment_id: int) -> Answer:
        return self._call("GET", f"/api/v1/experiments/{experiment_id}/results/")


def _error_messages(error: urllib.error.HTTPError) -> list[str]:
    text = error.read().decode("utf-8", "replace")
    try:
        body = json.loads(text)
    except ValueError:
        return [f"HTTP {error.code}: {text[:500]}"]
    if isinstance(body, dict) and "messages" in body:
        return list(body["messages"])
    return [f"HTTP {error.code}: {body.get('detail', body) if isinstance(body, dict) else body}"]


def load_spec(path: str) -> dict[str, Any]:
    """The spec file as an object; Refused, naming the file, when it cannot be read as one."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
        spec = _parse(path, text)
    except Refused:
        raise
    except Exception as error:  # OSError, a JSON or a YAML error: all mean this file cannot be used
        raise Refused([f"{path}: {error}"]) from None
    if not isinstance(spec, dict):
        raise Refused([f"{path}: the spec must be an object of experiment fields, not {type(spec).__name__}."])
    return spec


def _parse(path: str, text: str) -> object:
    if not path.endswith((".yaml", ".yml")):
        return json.loads(text)
    try:
        import yaml
    except ImportError:
        raise Refused([f"{path}: reading YAML needs PyYAML (pip install pyyaml); or write the spec as JSON."]) from None
    return yaml.safe_load(text)


def wait_for_end(api: Api, experiment_id: int, *, timeout_s: float, poll_s: float, out: Out) -> Answer | None:
    """Print progress whenever it changes, until the experiment ends; None on time-out."""
    deadline, last = time.monotonic() + timeout_s, None
    while True:
        progress = api.progress(experiment_id)
        line = progress_line(progress)
        if line.split(" ", 1)[1] != last:
            print(line, file=out, flush=True)
            last = line.split(" ", 1)[1]
        if progress["status"] in ENDED:
            return progress
        if time.monotonic() > deadline:
            return None
        time.sleep(poll_s)


def report(results: Answer, expectations: list[Expectation], out: Out) -> int:
    """Print the verdict table and each expectation's outcome; the exit status."""
    print(verdict_table(results), file=out)
    for warning in results["warnings"]:
        print(f"warning: {warning}", file=out)
    status = HELD
    for expectation in expectations:
        held, why = judge(expectation, results)
        print(f"{'HELD' if held else 'NOT HELD'}: {expectation.text} ({why})", file=out)
        status = status if held else NOT_HELD
    return status


def run(
    api: Api, *, spec: dict[str, Any] | None = None, experiment_id: int | None = None, wait: bool = False,
    expect: Iterable[str] = (), timeout_s: float = 6 * 3600, poll_s: float = 5, out: Out | None = None,
) -> int:  # fmt: skip
    """Submit the spec (or follow an existing experiment) and judge it; the exit status."""
    out = out or sys.stdout
    spec = dict(spec or {})
    try:
        expectations = [parse_expectation(text) for text in [*spec.pop("expect", []), *expect]]
    except ValueError as error:
        print(error, file=out)
        return REFUSED
    try:
        if experiment_id is None:
            submitted = api.submit(spec)
            experiment_id = submitted["id"]
            print(f"submitted experiment {experiment_id}", file=out, flush=True)
            if submitted.get("queue_notice"):
                print(f"warning: {submitted['queue_notice']}", file=out, flush=True)
        if not wait:
            return HELD
        progress = wait_for_end(api, experiment_id, timeout_s=timeout_s, poll_s=poll_s, out=out)
        if progress is None or progress["status"] != "finished":
            print(f"experiment {experiment_id} did not finish: {progress and progress['status']}", file=out)
            return DID_NOT_FINISH
        return report(api.results(experiment_id), expectations, out)
    except Refused as refused:
        print("refused:\n  " + "\n  ".join(refused.messages), file=out)
        return REFUSED


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options this script and the management command share."""
    parser.add_argument("spec", nargs="?", help="the experiment spec, JSON (or YAML with PyYAML)")
    parser.add_argument("--experiment", type=int, help="follow this experiment instead of submitting one")
    parser.add_argument("--wait", action="store_true", help="follow progress, then print the verdict table")
    parser.add_argument("--expect", action="append", default=[], help="an expectation (repeatable)")
    parser.add_argument("--timeout", type=float, default=6 * 3600, help="seconds to wait at most")
    parser.add_argument("--poll", type=float, default=5, help="seconds between progress reads")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--url", default=os.environ.get("SPECDASH_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--token", default=os.environ.get("SPECDASH_TOKEN"), help="or SPECDASH_TOKEN")
    args = parser.parse_args(argv)
    if not args.token:
        parser.error("give --token or set SPECDASH_TOKEN (your token is on the API token page, /api/token/)")
    return run_from_arguments(parser, args, HttpApi(args.url, args.token))


def run_from_arguments(
    parser: argparse.ArgumentParser, args: argparse.Namespace, api: Api, out: Out | None = None
) -> int:
    """`run` with the shared options, for this script and the management command."""
    out = out or sys.stdout
    if (args.spec is None) == (args.experiment is None):
        parser.error("give a spec file or --experiment, not both")
    try:
        spec = load_spec(args.spec) if args.spec else None
    except Refused as refused:
        print("refused:\n  " + "\n  ".join(refused.messages), file=out)
        return REFUSED
    return run(
        api,
        spec=spec,
        experiment_id=args.experiment,
        wait=args.wait or args.experiment is not None,
        expect=args.expect,
        timeout_s=args.timeout,
        poll_s=args.poll,
        out=out,
    )


if __name__ == "__main__":
    sys.exit(main())
