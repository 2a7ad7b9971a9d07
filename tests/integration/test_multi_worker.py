"""Several workers on several queues, as on a fleet of GPU hosts, through the real parts: three
Celery worker processes, each with its own node name, and real vLLM CPU servers running the
demo target.

- `hostA` is one host's own queue, with one worker (a) whose CPU servers get a KV cache of a
  few hundred tokens (SPECDASH_CPU_KVCACHE_GIB);
- `pool` is a queue two workers listen on: b, which also serves its own `hostB`, and c.

Four small experiments are submitted at once: two on `hostA`, two on `pool` through the API.
Each vLLM server start costs most of a minute on a CPU host, so these are also the experiments
that need a run of their own: on `hostA` the capacity experiment (more concurrent long outputs
than its KV cache holds), then one that is cancelled in the middle of a run; on `pool` an
uploaded set of chat messages with categories, on the chat endpoint (one experiment for both:
the uploaded set's breakdown and the chat stream), and a synthetic workload of two input
lengths. Beside them, on a stack of its own, scripts/fault_injection.py plays its
fast scenarios. Side by side on a small host they slow one another, which none of the
assertions here depends on (the experiments whose figures are judged, the A/A replicate and
the calibration, run alone: tests/integration/test_execution.py). One test checks how the
fleet ran its experiments, the others what each experiment stored or, for the cancelled one,
what the worker did, and what the faults left:

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
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.urls import reverse

from experiments.analysis.breakdowns import length_bucket
from experiments.definition import services as definition
from experiments.definition.services import ArmSpec
from experiments.execution import services as execution
from experiments.measurement.encoding.token_ids import unpack_token_ids
from experiments.models import Arm, EnvironmentSnapshot, Experiment, RequestRecord, Run, RunSummary
from experiments.prompt_sets.services import prompt_set_upload
from experiments.prompts.catalog import get_prompt_set, prompt_set_hash
from experiments.prompts.input_lengths import parse_length_distribution
from experiments.prompts.uploads import prompt_file_read
from tests.api_helpers import submit_through_api, token_client
from tests.factories import UserFactory, experiment_fields
from tests.worker_fixtures import celery_workers, shared_rows, wait_for_experiment
from workers.server.chat_template import PLAIN_TEMPLATE

ROOT = Path(__file__).resolve().parents[2]
TARGET = settings.SPECDASH_MODELS_DIR / "target"
DRAFT = settings.SPECDASH_MODELS_DIR / "draft"
pytestmark = [
    pytest.mark.integration,
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
    chat_set = _chat_set(owner)
    with _faults_played() as faults:
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
                submit_through_api(
                    owner, name="two lengths on vllm", workload_kind="synthetic", prompt_set="",
                    input_lengths=TWO_LENGTHS, num_prompts=6, seed=4, worker_queue="pool",
                ),
            ]  # fmt: skip
            cancelled = Cancelled(_submit_to_cancel(owner))
            try:
                _cancel_mid_run(cancelled)
            except Exception as error:  # the cancel test fails with it; the others still run
                cancelled.error = error
            done = [wait_for_experiment(experiment_id, timeout_s=1500) for experiment_id in ids]
            wall_s = time.monotonic() - started
            logs = {worker.node: worker.log_path.read_text() for worker in workers}
            snapshots = EnvironmentSnapshot.objects.filter(run__experiment__in=[*ids, cancelled.experiment.id])
            commands = [" ".join(snapshot.server_command) for snapshot in snapshots]
        running_after = _processes()
        played = faults()
    nodes = tuple(worker.node for worker in workers)
    return Fleet(owner, nodes, *done, cancelled, chat_set, played, logs, commands, running_after, wall_s)


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
    for experiment in [*done, fleet.cancelled.experiment]:
        assert len(_received(fleet.logs, experiment)) == 1
    workers_of = {e.id: set(e.runs.values_list("worker_name", flat=True)) for e in done}
    assert all(len(names) == 1 for names in workers_of.values()), workers_of  # never split
    assert workers_of[fleet.capacity.id] == {a}
    assert set(fleet.cancelled.experiment.runs.exclude(worker_name="").values_list("worker_name", flat=True)) == {a}
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
