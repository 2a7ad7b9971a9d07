"""Several workers on several queues, as on a fleet of GPU hosts, through the real parts: three
Celery worker processes, each with its own node name, and real vLLM CPU servers running the
demo target.

- `hostA` is one host's own queue, with one worker (a);
- `pool` is a queue two workers listen on: b, which also serves its own `hostB`, and c.

Three tiny experiments are submitted through the service at once, one on `hostA` and two on
`pool`. From what PostgreSQL recorded (each run's status, attempts, worker node name, its
requests and environment) and what the workers logged, the test checks that:

- every run was executed exactly once: succeeded at its first attempt, one summary, one
  environment snapshot, each measured prompt stored once, and each experiment received by
  one worker only;
- by a worker of the experiment's queue: the `hostA` one by a, the `pool` ones by b and c;
- an experiment's arms never split across workers: all runs of one experiment name one
  worker (the worker that takes an experiment holds it and runs every arm itself);
- progress is fair: two experiments on a queue two idle workers listen on run at the same
  time, one on each worker. Neither waits for the other to finish: each one's first run
  starts before the other's last run ends.

The page names the worker that executed the experiment. Every worker and vLLM server the
test started is gone at the end.
"""

import re
import subprocess
import time

import pytest
import redis
from django.conf import settings
from django.urls import reverse

from experiments import services
from experiments.models import Arm, EnvironmentSnapshot, Experiment, Run, RunSummary
from experiments.services import ArmSpec
from experiments.workloads import prompt_set_hash
from tests.factories import UserFactory
from tests.worker_fixtures import celery_workers, wait_for_experiment

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

TARGET = settings.SPECDASH_MODELS_DIR / "target"
NGRAM = ArmSpec(
    method=Arm.Method.NGRAM, num_speculative_tokens=3, params={"prompt_lookup_min": 2, "prompt_lookup_max": 4}
)
WORKERS = [("hostA", "host-a"), ("hostB,pool", "host-b"), ("pool", "pool-c")]
QUEUES = ["hostA", "hostB", "pool"]
NUM_PROMPTS = 3


def _submit(owner, queue: str, name: str) -> Experiment:
    return services.experiment_create(
        owner=owner, arms=[NGRAM], name=name, target_model=str(TARGET), dtype="float32", max_model_len=512,
        prompt_set="code_edit", prompt_set_hash=prompt_set_hash("code_edit"), num_prompts=NUM_PROMPTS,
        max_tokens=16, concurrency_levels=[1], repetitions=1, warmup_requests=1, worker_queue=queue,
    )  # fmt: skip


def _processes() -> str:
    return subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True, check=True).stdout


def _assert_executed_once(experiment: Experiment) -> None:
    for run in experiment.runs.all():
        assert (run.status, run.attempts) == (Run.Status.SUCCEEDED, 1), run
        assert RunSummary.objects.filter(run=run).count() == 1
        assert EnvironmentSnapshot.objects.filter(run=run).count() == 1
        indexes = list(run.requests.values_list("prompt_index", flat=True))
        assert len(indexes) == len(set(indexes)) == NUM_PROMPTS, run


def _received(logs: dict[str, str], experiment: Experiment) -> list[str]:
    """The workers whose log says they received the experiment's task, once per delivery."""
    pattern = re.compile(rf"received experiment {experiment.id}\b")
    return [node for node, text in logs.items() for _ in pattern.finditer(text)]


def _span(experiment: Experiment) -> tuple:
    runs = list(experiment.runs.all())
    return min(run.started_at for run in runs), max(run.finished_at for run in runs)


@pytest.mark.skipif(not (TARGET / "config.json").exists(), reason="demo models not built (./dev test builds them)")
def test_workers_take_their_queues_run_each_experiment_whole_and_share_a_queue_fairly(client):
    # Tasks an interrupted earlier session left on these queues name experiments of its database.
    redis.Redis.from_url(settings.CELERY_BROKER_URL).delete(*QUEUES)
    owner = UserFactory(username="fleet")
    with celery_workers(WORKERS) as workers:
        a, b, c = (worker.node for worker in workers)
        started = time.monotonic()
        on_a = _submit(owner, "hostA", "on host A")
        pooled = [_submit(owner, "pool", f"pooled {i}") for i in (1, 2)]
        done = [wait_for_experiment(e.id, timeout_s=900) for e in (on_a, *pooled)]
        wall_s = time.monotonic() - started
        logs = {worker.node: worker.log_path.read_text() for worker in workers}
        commands = [" ".join(s.server_command) for s in EnvironmentSnapshot.objects.all()]
    assert [e.status for e in done] == [Experiment.Status.FINISHED] * 3

    for experiment in done:
        _assert_executed_once(experiment)
        assert len(_received(logs, experiment)) == 1
    workers_of = {e.id: set(e.runs.values_list("worker_name", flat=True)) for e in done}
    assert all(len(names) == 1 for names in workers_of.values()), workers_of  # never split
    assert workers_of[on_a.id] == {a}
    assert workers_of[pooled[0].id] | workers_of[pooled[1].id] == {b, c}  # one each

    (first_start, first_end), (second_start, second_end) = (_span(e) for e in pooled)
    # Neither waited for the other to finish.
    assert second_start < first_end
    assert first_start < second_end

    client.force_login(owner)
    page = client.get(reverse("experiments:detail", args=[on_a.pk])).text
    assert f'id="executed-by">Executed by worker <span class="mono">{a}</span>' in page

    running = _processes()
    assert not [node for node in (a, b, c) if f"-n {node}" in running]
    assert not [command for command in commands if command in running]
    overlap_s = min(first_end, second_end) - max(first_start, second_start)
    print(f"3 experiments on 3 workers: {wall_s:.0f} s from submission to the last one finished")
    print(f"the two pooled experiments overlapped for {overlap_s.total_seconds():.0f} s")
