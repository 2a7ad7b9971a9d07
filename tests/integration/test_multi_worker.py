"""Several workers on several queues, as on a fleet of GPU hosts, through the real parts: three
Celery worker processes, each with its own node name, and real vLLM CPU servers running the
demo target.

- `hostA` is one host's own queue, with one worker (a) whose CPU servers get a KV cache of a
  few hundred tokens (SPECDASH_CPU_KVCACHE_GIB);
- `pool` is a queue two workers listen on: b, which also serves its own `hostB`, and c.

Five small experiments are submitted at once: two on `hostA`, two on `pool`, one on `hostB`.
Each vLLM server start costs most of a minute on a CPU host, so these are also the experiments
that need a run of their own: on `hostA` the capacity experiment (more concurrent long outputs
than its KV cache holds), then one that is cancelled in the middle of a run; on `pool` an
uploaded set of chat messages with categories, on the chat endpoint (one experiment for both:
the uploaded set's breakdown and the chat stream), submitted through the API, and a synthetic
workload of two input lengths, submitted by the command-line client over HTTP (a live server
thread), which `--wait`s for its verdict table and exit status and asks for profiled
intervals; on `hostB` one whose server cannot start. Beside them, on a stack of its own,
scripts/fault_injection.py plays its fast scenarios. Side by side on a small host they slow
one another, which none of the assertions here depends on (the experiments whose figures are
judged, the A/A replicate and the calibration, run alone: tests/integration/test_execution.py).
One test checks how the fleet ran its experiments, the others what each experiment stored or,
for the cancelled one, what the worker did, what the command line printed, and what the faults
left:

- every run of the finished experiments was executed exactly once: succeeded at its first
  attempt, one summary, one environment snapshot, each measured prompt stored once, and each
  experiment received by one worker only;
- by a worker of the experiment's queue: the `hostA` ones by a, the `pool` ones by b and c;
- an experiment's arms never split across workers: all runs of one experiment name one
  worker (the worker that takes an experiment holds it and runs every arm itself);
- progress is fair: the first two experiments on a queue two idle workers listen on run at
  the same time, one on each worker. Neither waits for the other to finish: each one's first
  run starts before the other's last run ends.

The page names the worker that executed the experiment. Every worker and vLLM server the
test started is gone at the end.
"""

import contextlib
import json
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from html import unescape
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.test import Client
from django.urls import reverse
from pytest_django.live_server_helper import LiveServer
from rest_framework.authtoken.models import Token

from experiments.analysis.breakdowns import length_bucket
from experiments.api import client as specdash_client
from experiments.definition import services as definition
from experiments.definition.services import ArmSpec
from experiments.execution import services as execution
from experiments.measurement.encoding.token_ids import unpack_token_ids
from experiments.measurement.engine import trace_shares
from experiments.models import (
    Arm,
    EnvironmentSnapshot,
    Experiment,
    ExperimentAnalysis,
    ProfiledInterval,
    RequestRecord,
    Run,
    RunSummary,
)
from experiments.prompt_sets.services import prompt_set_upload
from experiments.prompts.catalog import get_prompt_set, prompt_set_hash
from experiments.prompts.input_lengths import parse_length_distribution
from experiments.prompts.uploads import prompt_file_read
from tests.api_helpers import submit_through_api, token_client
from tests.factories import UserFactory, experiment_fields
from tests.worker_fixtures import celery_workers, server_pid_records, shared_rows, wait_for_experiment
from workers.server.chat_template import PLAIN_TEMPLATE
from workers.server.profiling import MIN_REQUESTS

ROOT = Path(__file__).resolve().parents[2]
TARGET = settings.SPECDASH_MODELS_DIR / "target"
DRAFT = settings.SPECDASH_MODELS_DIR / "draft"
pytestmark = [
    pytest.mark.worker,
    pytest.mark.vllm,
    pytest.mark.shared_rows,
    pytest.mark.django_db,
    pytest.mark.skipif(not (TARGET / "config.json").exists(), reason="demo models not built (./dev test builds them)"),
]

# 6,000,000 bytes: vLLM 0.32 on CPU fits 640 tokens of the demo target (4 layers, 256 wide, float32)
# and the n-gram arm the same; eight requests of 200 output tokens need about three times that.
SMALL_KV_GIB = 6_000_000 / 2**30
WORKERS = [
    ("hostA", "host-a", {"SPECDASH_CPU_KVCACHE_GIB": repr(SMALL_KV_GIB)}),
    ("hostB,pool", "host-b", None),
    ("pool", "pool-c", None),
]
QUEUES = ["hostA", "hostB", "pool"]
NGRAM_PARAMS = {"prompt_lookup_min": 2, "prompt_lookup_max": 4}
TWO_LENGTHS = "6:1, 200:1"
# The two-length workload, as a CI pipeline's spec file for the command-line client. Every output
# runs to its 24 tokens (ignore_eos), so that every request has a decode phase whatever the tiny
# model's numerics; the expectation reads the engine-timed TPOT (the default metric), which has a
# ratio whatever the stream did. One block gives estimates but no verdict: it cannot hold.
CLI_SPEC = {
    "name": "two lengths on vllm", "workload_kind": "synthetic", "prompt_set": "", "input_lengths": TWO_LENGTHS,
    "num_prompts": 6, "seed": 4, "worker_queue": "pool", "dtype": "float32", "max_tokens": 24, "ignore_eos": True,
    "concurrency_levels": [1], "repetitions": 1, "warmup_requests": 1, "temperature": 0, "profile_intervals": True,
    "arms": [{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 2, "prompt_lookup_max": 3}],
    "expect": ["n-gram lookup k=2 faster at concurrency <= 1"],
}  # fmt: skip
MISSING_MODEL = settings.SPECDASH_MODELS_DIR / "no-such-model"
STOP_WITHIN_S = 30
# Redis down at submission, the web server restarted while a page polls, the same task delivered twice.
FAST_FAULTS = ["redis-down", "web-restart", "delivered-twice"]


@dataclass
class Cancelled:
    """The cancelled experiment, its runs in execution order, what ran when it was cancelled,
    and the error that interrupted the cancelling, if one did (its test raises it)."""

    experiment: Experiment
    runs: list[Run] = field(default_factory=list)
    command: str = ""
    command_was_running: bool = False
    stopped_after_s: float | None = None
    error: BaseException | None = None


@dataclass
class CommandLine:
    """What the command-line client printed and how it exited, and its token."""

    returncode: int
    stdout: str
    stderr: str
    token: str


@dataclass
class Unstartable:
    """The experiment whose server cannot start, and what ran once it had failed: the process
    table, and the worker's server-pid records naming its model."""

    experiment: Experiment
    processes: str
    pid_records: list[str]


@dataclass
class Faults:
    """What scripts/fault_injection.py printed and how it exited."""

    returncode: int
    stdout: str
    stderr: str


@dataclass
class Fleet:
    owner: object
    nodes: tuple[str, str, str]
    capacity: Experiment
    chat: Experiment
    lengths: Experiment
    cancelled: Cancelled
    unstartable: Unstartable
    cli: CommandLine
    chat_set: object
    faults: Faults
    logs: dict[str, str]
    commands: list[str]
    running_after: str
    wall_s: float

    @property
    def finished(self) -> list[Experiment]:
        return [self.capacity, self.chat, self.lengths]


def _uploaded_set(owner, name: str, lines: list[dict]):
    data = "\n".join(json.dumps(line) for line in lines).encode()
    parsed = prompt_file_read("e", data)
    return prompt_set_upload(owner=owner, name=name, file_name=f"{name}.jsonl", size_bytes=len(data), parsed=parsed)


def _chat_set(owner):
    lines = [
        {
            "messages": [{"role": "system", "content": "Edit the code."}, {"role": "user", "content": prompt}],
            # The item's text is its messages' text: the system message's 3 words and the prompt's.
            "category": f"{3 + len(prompt.split())} words",
        }
        # 24, 26, 22, 25, 22, 29, 26, 17, 18, 34, 27 and 27 words.
        for prompt in get_prompt_set("code_edit").prompts[:12]
    ]
    return _uploaded_set(owner, "chat-edits", lines)


def _submit_capacity(owner) -> int:
    """More concurrent long outputs than worker a's KV cache holds, so that vLLM preempts."""
    return definition.experiment_create(
        owner=owner,
        arms=[ArmSpec(method=Arm.Method.NGRAM, num_speculative_tokens=2, params={"prompt_lookup_min": 2})],
        **experiment_fields(
            name="small KV cache", prompt_set="code_edit", prompt_set_hash=prompt_set_hash("code_edit"),
            num_prompts=8, max_tokens=200, ignore_eos=True, temperature=0.0, concurrency_levels=[8],
            repetitions=1, warmup_requests=1, worker_queue="hostA", aa_replicate=False,
        ),
    ).id  # fmt: skip


def _submit_to_cancel(owner) -> Experiment:
    return definition.experiment_create(
        owner=owner,
        arms=[ArmSpec(method=Arm.Method.NGRAM, num_speculative_tokens=3, params=NGRAM_PARAMS)],
        name="cancel me", target_model=str(TARGET), dtype="float32", max_model_len=512, prompt_set="code_edit",
        prompt_set_hash=prompt_set_hash("code_edit"), num_prompts=24, max_tokens=48, concurrency_levels=[1, 2],
        repetitions=1, warmup_requests=1, worker_queue="hostA",
        # Paced arrivals keep each run about 12 s long however fast the host decodes, so the
        # cancel lands while the second run is under way (unpaced, a fast host finished it
        # between the poll and the cancel).
        request_rate=2.0,
    )  # fmt: skip


def _submit_unstartable(owner) -> int:
    """The baseline alone, on a model that is not there: one server that cannot start fails the
    runs it was to serve."""
    return definition.experiment_create(
        owner=owner, arms=[],
        **experiment_fields(
            name="cannot start", target_model=str(MISSING_MODEL), prompt_set="code_edit",
            prompt_set_hash=prompt_set_hash("code_edit"), num_prompts=6, max_tokens=32, concurrency_levels=[1, 4],
            repetitions=1, warmup_requests=1, worker_queue="hostB",
        ),
    ).id  # fmt: skip


@contextlib.contextmanager
def _live_server():
    """A live HTTP server thread on the test database (pytest-django's, without its fixture,
    which would make every test of the module a transactional one and flush the fleet's rows)."""
    server = LiveServer("localhost")
    try:
        yield server.url
    finally:
        server.stop()


@contextlib.contextmanager
def _command_line(url: str, token: str, folder: Path):
    """The command-line client, as a CI pipeline runs it: submits CLI_SPEC over HTTP and waits;
    yields a callable that waits for its exit. Its experiment exists once this returns."""
    spec = folder / "spec.json"
    spec.write_text(json.dumps(CLI_SPEC))
    args = [sys.executable, "-m", "experiments.api.client", str(spec), "--wait", "--poll", "1", "--timeout", "1500"]
    process = subprocess.Popen(
        [*args, "--url", url, "--token", token], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )

    def result() -> CommandLine:
        stdout, stderr = process.communicate(timeout=1600)
        return CommandLine(process.returncode, stdout, stderr, token)

    try:
        _poll(
            lambda: process.poll() is not None or Experiment.objects.filter(name=CLI_SPEC["name"]).exists(),
            timeout_s=120,
            what="the command line's experiment submitted",
        )
        yield result
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(timeout=60)


def _unstartable(experiment_id: int) -> Unstartable:
    experiment = wait_for_experiment(experiment_id, timeout_s=900)
    worker_names = set(experiment.runs.values_list("worker_name", flat=True))
    records = [text for name in worker_names for text in server_pid_records(name) if str(MISSING_MODEL) in text]
    return Unstartable(experiment, _processes(), records)


def _poll(condition, *, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise TimeoutError(f"{what}: not within {timeout_s} s")


def _cancel_mid_run(cancelled: Cancelled) -> None:
    """Once the first run is stored and the second, on the same server, is under way: cancel,
    and time how soon the server is gone; then leave a worker that ignored the cancel time
    enough to claim the next run and start its server."""
    experiment = cancelled.experiment
    cancelled.runs = list(experiment.runs.in_execution_order(server_per_block=True))
    first, second = cancelled.runs[:2]
    _poll(
        lambda: Run.objects.filter(id=second.id, status=Run.Status.RUNNING, requests_done__gte=1).exists(),
        timeout_s=1200,
        what="the second run under way",
    )
    cancelled.command = " ".join(EnvironmentSnapshot.objects.get(run=first).server_command)
    cancelled.command_was_running = cancelled.command in _processes()
    started = time.monotonic()
    execution.experiment_cancel(experiment=experiment, by=experiment.owner)
    _poll(lambda: cancelled.command not in _processes(), timeout_s=STOP_WITHIN_S, what="the vLLM server stopped")
    cancelled.stopped_after_s = time.monotonic() - started
    time.sleep(10)


def _processes() -> str:
    return subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True, check=True).stdout


@contextlib.contextmanager
def _faults_played():
    """scripts/fault_injection.py's fast scenarios on a stack of its own (its own PostgreSQL,
    Redis, workers, gunicorn and vLLM servers), played while the body runs; yields a callable
    that waits for the script's end. Stopped with SIGTERM (it then stops its stack) if the body
    fails."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(
            [sys.executable, "scripts/fault_injection.py", "--only", *FAST_FAULTS], cwd=ROOT, stdout=out, stderr=err
        )

        def result() -> Faults:
            process.wait(timeout=1200)
            out.seek(0)
            err.seek(0)
            return Faults(process.returncode, out.read(), err.read())

        try:
            yield result
        finally:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=120)


def _run_fleet() -> Fleet:
    # Tasks an interrupted earlier session left on these queues name experiments of its database.
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(*QUEUES)
    owner = UserFactory(username="fleet")
    token = Token.objects.create(user=owner).key
    chat_set = _chat_set(owner)
    with _faults_played() as faults, _live_server() as url, tempfile.TemporaryDirectory() as folder:
        with celery_workers(WORKERS) as workers:
            started = time.monotonic()
            ids = [
                _submit_capacity(owner),
                # A draft model proposes at every step, so every category has acceptance to pool
                # (an n-gram lookup can find nothing in a short prompt's output); every output
                # runs to max_tokens, so every request has a decode phase whatever the host's
                # numerics. The breakdown's TPOT is the engine's, which a stream that reached the
                # client merged cannot zero.
                submit_through_api(
                    owner, name="chat on vllm", workload_kind="uploaded", endpoint="chat",
                    uploaded_prompt_set=chat_set.pk, num_prompts=4, input_lengths="23-27", worker_queue="pool",
                    ignore_eos=True, max_tokens=32,
                    arms=[{"method": "draft_model", "num_speculative_tokens": 2, "model": str(DRAFT)}],
                ),
            ]  # fmt: skip
            # The second experiment on `pool`, submitted and followed by the command line.
            with _command_line(url, token, Path(folder)) as command_line:
                ids.append(Experiment.objects.get(name=CLI_SPEC["name"]).id)
                unstartable_id = _submit_unstartable(owner)
                cancelled = Cancelled(_submit_to_cancel(owner))
                try:
                    _cancel_mid_run(cancelled)
                except Exception as error:  # the cancel test fails with it; the others still run
                    cancelled.error = error
                unstartable = _unstartable(unstartable_id)
                done = [wait_for_experiment(experiment_id, timeout_s=1500) for experiment_id in ids]
                cli = command_line()
            wall_s = time.monotonic() - started
            logs = {worker.node: worker.log_path.read_text() for worker in workers}
            snapshots = EnvironmentSnapshot.objects.filter(run__experiment__in=[*ids, cancelled.experiment.id])
            commands = [" ".join(snapshot.server_command) for snapshot in snapshots]
        running_after = _processes()
        played = faults()
    nodes = tuple(worker.node for worker in workers)
    return Fleet(
        owner, nodes, *done, cancelled, unstartable, cli, chat_set, played, logs, commands, running_after, wall_s
    )


@pytest.fixture(scope="module")
def fleet(django_db_setup, django_db_blocker):
    with shared_rows(django_db_blocker):
        with django_db_blocker.unblock():
            fleet = _run_fleet()
        yield fleet


# ---------------------------------------------------------------- the fleet


def _assert_executed_once(experiment: Experiment) -> None:
    for run in experiment.runs.all():
        assert (run.status, run.attempts) == (Run.Status.SUCCEEDED, 1), run
        assert RunSummary.objects.filter(run=run).count() == 1
        assert EnvironmentSnapshot.objects.filter(run=run).count() == 1
        indexes = list(run.requests.values_list("prompt_index", flat=True))
        assert len(indexes) == len(set(indexes)) == experiment.num_prompts, run


def _received(logs: dict[str, str], experiment: Experiment) -> list[str]:
    """The workers whose log says they received the experiment's task, once per delivery."""
    pattern = re.compile(rf"received experiment {experiment.id}\b")
    return [node for node, text in logs.items() for _ in pattern.finditer(text)]


def _span(experiment: Experiment) -> tuple:
    runs = list(experiment.runs.all())
    return min(run.started_at for run in runs), max(run.finished_at for run in runs)


def test_workers_take_their_queues_run_each_experiment_whole_and_share_a_queue_fairly(fleet, client):
    a, b, c = fleet.nodes
    done = fleet.finished
    assert [e.status for e in done] == [Experiment.Status.FINISHED] * 3, [e.runs.first().error for e in done]

    for experiment in done:
        _assert_executed_once(experiment)
    for experiment in [*done, fleet.cancelled.experiment, fleet.unstartable.experiment]:
        assert len(_received(fleet.logs, experiment)) == 1
    workers_of = {e.id: set(e.runs.values_list("worker_name", flat=True)) for e in done}
    assert all(len(names) == 1 for names in workers_of.values()), workers_of  # never split
    assert workers_of[fleet.capacity.id] == {a}
    assert set(fleet.cancelled.experiment.runs.exclude(worker_name="").values_list("worker_name", flat=True)) == {a}
    assert set(fleet.unstartable.experiment.runs.values_list("worker_name", flat=True)) == {b}
    pooled = [fleet.chat, fleet.lengths]
    assert workers_of[pooled[0].id] | workers_of[pooled[1].id] == {b, c}  # one each

    (first_start, first_end), (second_start, second_end) = (_span(e) for e in pooled)
    # Neither waited for the other to finish.
    assert second_start < first_end
    assert first_start < second_end

    client.force_login(fleet.owner)
    page = client.get(reverse("experiments:detail", args=[fleet.capacity.pk])).text
    assert f'id="executed-by">Executed by worker <span class="mono">{a}</span>' in page

    assert not [node for node in (a, b, c) if f"-n {node}" in fleet.running_after]
    assert not [command for command in fleet.commands if command in fleet.running_after]
    overlap_s = min(first_end, second_end) - max(first_start, second_start)
    print(f"4 experiments on 3 workers: {fleet.wall_s:.0f} s from submission to the last one finished")
    print(f"the two first pooled experiments overlapped for {overlap_s.total_seconds():.0f} s")


# ---------------------------------------------------------------- what each workload's experiment stored


def test_a_run_with_a_small_kv_cache_preempts_and_records_it(fleet, client):
    """The capacity figures: worker a's servers preempted, and the figures land in the run
    summaries, on the page and in the API."""
    experiment = fleet.capacity
    assert experiment.status == Experiment.Status.FINISHED, list(experiment.runs.values_list("error", flat=True))
    summaries = list(RunSummary.objects.filter(run__experiment=experiment).select_related("run__arm"))
    assert len(summaries) == 2
    for summary in summaries:
        label = summary.run.arm.label
        assert summary.capacity_samples > 0, label
        assert summary.preemptions > 0, label
        assert summary.kv_cache_usage_peak >= 0.9, label
        assert 0 < summary.kv_cache_usage_mean <= summary.kv_cache_usage_peak, label
        # The cache holds about two of the eight requests at once: the others wait.
        assert 1 <= summary.requests_running_max < 8, label
        assert summary.requests_waiting_max > 0, label

    client.force_login(fleet.owner)
    html = client.get(reverse("experiments:detail", args=[experiment.pk])).text
    assert 'id="table-capacity"' in html
    assert "not recorded" not in html
    body = client.get(reverse("api:experiment-results", args=[experiment.pk])).json()
    [row] = body["capacity"]
    assert row["arm"]["preemptions"] > 0
    assert row["baseline"]["preemptions"] > 0
    assert body["capacity_warnings"] == []  # both preempted: nothing the arm did alone


def test_an_uploaded_set_runs_and_is_broken_down_by_category(fleet):
    """An uploaded prompt set with categories: the runs send its prompts, and the analysis
    breaks speedup and acceptance down by category."""
    experiment = fleet.chat
    assert experiment.status == Experiment.Status.FINISHED
    assert experiment.prompt_set_hash == fleet.chat_set.sha256
    rows = RequestRecord.objects.filter(run__experiment=experiment)
    assert sorted(set(rows.values_list("prompt_index", flat=True))) == list(range(1, 5))
    groups = experiment.analysis.series["by_category"]
    assert all(group["acceptance"] for group in groups), groups
    assert [cell["outcome"] for group in groups for cell in group["cells"]] == ["too few blocks"] * 3, groups
    results = token_client(fleet.owner).get(reverse("api:experiment-results", args=[experiment.pk])).json()
    assert results["series"]["by_category"] == groups


def test_a_chat_set_runs_through_the_chat_endpoint(fleet):
    """A JSONL set of chat messages, run through /v1/chat/completions on the demo target (which
    gets specdash's plain chat template), measured like completions, with per-request
    speculative metrics; only the set's prompts in the experiment's input-length range are sent."""
    experiment = fleet.chat
    assert experiment.status == Experiment.Status.FINISHED
    for command in EnvironmentSnapshot.objects.filter(run__experiment=experiment).values_list(
        "server_command", flat=True
    ):
        assert command[command.index("--chat-template") + 1] == str(PLAIN_TEMPLATE)
    rows = list(RequestRecord.objects.filter(run__experiment=experiment).select_related("run__arm"))
    assert len(rows) == 2 * 4
    for row in rows:
        assert row.error == ""
        assert row.output_tokens > 0
        assert row.input_tokens > 0
        assert len(unpack_token_ids(row.output_token_ids)) == row.output_tokens == sum(row.chunk_tokens)
    speculative = [row for row in rows if row.run.arm.is_speculative]
    # Per-request speculative metrics arrive on the chat stream's last event, as on completions
    # (a draft model proposes at every step).
    assert speculative
    assert all(row.spec_proposed_per_step for row in speculative)
    groups = experiment.analysis.series["by_category"]
    # Items 2, 4, 7 and 11 of the file (the first, 24 words, warms up); unfiltered, the
    # measured items would have been of 26, 22, 25 and 22 words.
    assert [(group["group"], group["prompts"]) for group in groups] == [
        ("25 words", 1),
        ("26 words", 2),
        ("27 words", 1),
    ]


def test_a_two_length_workload_is_broken_down_by_input_length(fleet):
    """A synthetic workload with two input lengths: the prompts sent have the drawn lengths,
    and the analysis breaks speedup down by input-length bucket."""
    experiment = fleet.lengths
    assert experiment.status == Experiment.Status.FINISHED
    assert experiment.synthetic_input_len == 200
    drawn = parse_length_distribution(TWO_LENGTHS).draw(experiment.warmup_requests + 6, seed=4)
    tokens = dict(RequestRecord.objects.filter(run__experiment=experiment).values_list("prompt_index", "input_tokens"))
    assert sorted(tokens) == list(range(1, 7))
    # prompt_index is the prompt's position among all sent, warm-up first.
    # Each word is at least one token: the server counted at least the words sent.
    assert all(tokens[index] >= drawn[index] for index in tokens)
    short = {index for index in tokens if drawn[index] == 6}
    assert 0 < len(short) < 6, "seed 4 should draw both lengths among the measured prompts"
    groups = experiment.analysis.series["by_input_length"]
    expected = {length_bucket(tokens[index]) for index in tokens}
    assert {group["group"] for group in groups} == expected
    assert sum(group["prompts"] for group in groups) == 6


def test_cancel_stops_the_load_and_the_server_and_keeps_the_completed_run(fleet):
    """Cancelled in the middle of a run's load, the worker stops the load and the server
    within seconds, keeps the run that completed, and starts nothing more."""
    cancelled = fleet.cancelled
    if cancelled.error is not None:
        raise cancelled.error
    first, second, *later = cancelled.runs
    assert first.arm_id == second.arm_id  # the first two runs share the first server
    assert cancelled.command_was_running

    experiment = Experiment.objects.get(id=cancelled.experiment.id)
    assert experiment.status == Experiment.Status.CANCELLED
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == Run.Status.SUCCEEDED
    assert first.requests.count() == experiment.num_prompts
    assert second.status == Run.Status.CANCELLED
    assert 1 <= second.requests_done < experiment.num_prompts
    assert not second.requests.exists()
    never_started = Run.objects.filter(id__in=[run.id for run in later])
    assert {(run.status, run.started_at) for run in never_started} == {(Run.Status.CANCELLED, None)}
    assert EnvironmentSnapshot.objects.filter(run__experiment=experiment).count() == 1
    print(f"vLLM server stopped {cancelled.stopped_after_s:.1f} s after the cancel")


def test_a_server_that_cannot_start_fails_its_runs_with_the_log_tail(fleet):
    experiment = fleet.unstartable.experiment
    assert experiment.status == Experiment.Status.FAILED
    runs = list(experiment.runs.all())
    assert len(runs) == 2  # levels 1 and 4
    for run in runs:
        assert run.status == Run.Status.FAILED
        assert "did not start" in run.error
        assert "exited with code" in run.error
        # The end of vLLM's own log, which names the model it could not load.
        assert "no-such-model" in run.error.partition("Last lines of its log")[2]
    assert str(MISSING_MODEL) not in fleet.unstartable.processes
    # The worker drops a server's pid record once every process of its group has ended.
    assert fleet.unstartable.pid_records == []


# ---------------------------------------------------------------- the command line, the API and the page


def test_wait_follows_a_real_experiment_to_its_verdicts(fleet):
    """The command line submitted the two-length experiment over HTTP, `--wait` followed it to
    the verdict table and the exit status, and the API's numbers are the experiment page's. The
    spec asks for profiled intervals, so each arm's server also profiled one interval, stored
    apart from the statistics."""
    cli = fleet.cli
    experiment = fleet.lengths
    assert experiment.status == Experiment.Status.FINISHED, cli.stdout + cli.stderr[-3000:]
    # One block gives estimates but no verdict, so the expectation cannot hold.
    assert cli.returncode == specdash_client.NOT_HELD, cli.stdout + cli.stderr[-3000:]
    out = cli.stdout
    assert re.search(r"running: \d/2 runs done", out), out
    assert "finished: 2/2 runs done (2 succeeded, 0 failed)" in out
    assert re.search(r"n-gram lookup k=2 +too few blocks \d", out), out
    assert "NOT HELD: n-gram lookup k=2 faster at concurrency <= 1 (at 1: too few blocks" in out
    _check_api_numbers_equal_the_pages(experiment, fleet.owner, cli.token)


def _check_api_numbers_equal_the_pages(experiment, user, token):
    page = Client()
    page.force_login(user)
    html = page.get(reverse("experiments:detail", args=[experiment.pk])).content.decode()
    chart = json.loads(re.search(r'<script id="results-data" type="application/json">(.*?)</script>', html, re.S)[1])
    api = Client(headers={"Authorization": f"Token {token}"})
    body = api.get(reverse("api:experiment-results", args=[experiment.pk])).json()
    cells = {(c["arm_id"], c["level"]): c["metrics"] for c in body["summaries"]}
    assert len(cells) == len(chart["cells"]) == 2
    for page_cell in chart["cells"]:
        metrics = cells[(page_cell["arm"], page_cell["level"])]
        assert all([s["mean"], s["min"], s["max"]] == page_cell[column] for column, s in metrics.items())
    speedups = {(s["arm_id"], s["level"], s["metric"]): s for s in body["speedups"]}
    for point in chart["speedups"]:
        mine = speedups[(point["arm"], point["level"], point["metric"])]
        assert (mine["point"], mine["ci_low"], mine["ci_high"], mine["outcome"]) == (
            point["point"], point["lo"], point["hi"], point["outcome"]
        )  # fmt: skip
    requests = api.get(reverse("api:experiment-requests", args=[experiment.pk])).json()
    assert requests["count"] == 2 * CLI_SPEC["num_prompts"]
    _check_step_accounting(experiment, body, html)
    _check_profiled_intervals(experiment, html)


def _check_step_accounting(experiment, body, html):
    """The n-gram arm's steps were counted and timed against the baseline's, and the page and
    the API show the stored figures."""
    accounting = ExperimentAnalysis.objects.get(experiment=experiment).series["step_accounting"]
    arm = experiment.arms.get(method=Arm.Method.NGRAM)
    row = next(row for row in accounting["rows"] if row["arm_id"] == arm.id)
    assert row["steps"] > 0
    assert row["tokens_per_step"] >= 1
    assert row["step_ms"] > 0
    assert row["baseline_step_ms"] > 0
    assert row["relative_cost"]["point"] == pytest.approx(row["step_ms"] / row["baseline_step_ms"])
    assert row["margin"]["point"] == pytest.approx(row["tokens_per_step"] / row["relative_cost"]["point"])
    assert body["series"]["step_accounting"] == accounting
    assert unescape(accounting["sentences"][0]["text"]) in unescape(html)


def _check_profiled_intervals(experiment, html):
    """Each arm profiled one interval after its measured run: its trace is on disk, its shares
    sum to one, and it is not among the requests counted above (2 × num_prompts)."""
    intervals = {i.arm.method: i for i in ProfiledInterval.objects.filter(experiment=experiment).select_related("arm")}
    assert sorted(intervals) == ["baseline", "ngram"]
    for interval in intervals.values():
        assert interval.error == ""
        # The first measured prompts, a full batch at level 1 and at least MIN_REQUESTS.
        assert (interval.concurrency, interval.requests, interval.completed) == (1, MIN_REQUESTS, MIN_REQUESTS)
        assert interval.steps > 0
        assert (settings.DATA_DIR / interval.trace_path).stat().st_size == interval.trace_bytes
        shares = [getattr(interval, f"share_{phase}") for phase in trace_shares.PHASES]
        assert all(share >= 0 for share in shares)
        assert sum(shares) == pytest.approx(1.0, abs=1e-6)
        assert interval.share_verifying > 0
    assert intervals["baseline"].share_proposing == 0.0
    assert intervals["ngram"].share_proposing > 0
    assert 'id="table-profile"' in html
    assert 'id="chart-step-time"' in html


# ---------------------------------------------------------------- the faults


def _fault_rows(table: str) -> list[list[str]]:

    lines = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| scenario")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_the_fast_faults_recover_with_nothing_lost_or_duplicated(fleet):
    """Redis down at submission, the web server restarted while a page polls, and the same
    task delivered twice each recover with no run lost and no row duplicated."""
    faults = fleet.faults
    rows = _fault_rows(faults.stdout)
    assert len(rows) == len(FAST_FAULTS), faults.stdout + faults.stderr[-3000:]
    for scenario, _, outcome, lost, duplicated, seconds in rows:
        assert (lost, duplicated) == ("0", "0"), (scenario, outcome)
        assert "NOT TESTED" not in outcome, (scenario, outcome)
        assert float(seconds) < 60, (scenario, seconds)
    assert faults.returncode == 0
    print(faults.stderr[-500:])  # each scenario's time, with pytest -s
