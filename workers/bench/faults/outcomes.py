"""What the scenarios share: a small experiment on the demo target, and what came of it read
from the stack's database (runs lost, request rows duplicated, seconds to recover). Imported
once the harness's ORM is on the stack's database (play.py)."""

import subprocess
from pathlib import Path

from django.contrib.auth.models import User
from django.db.models import Count

from experiments.definition import services as definition
from experiments.models import Experiment, RequestRecord, Run
from experiments.prompts.catalog import prompt_set_hash
from workers.bench.faults.rows import Row
from workers.bench.faults.stack import Stack, wait_for

PASSWORD = "fault-injection-password"


def submit(stack: Stack, owner: User, **overrides: object) -> Experiment:
    """A small experiment on the demo target: the baseline at levels 1 and 2, one block."""
    fields: dict[str, object] = {
        "name": "fault", "target_model": str(stack.models / "target"), "dtype": "float32", "max_model_len": 512,
        "prompt_set": "code_edit", "prompt_set_hash": prompt_set_hash("code_edit"), "num_prompts": 12,
        "max_tokens": 32, "concurrency_levels": [1, 2], "repetitions": 1, "warmup_requests": 1,
    }  # fmt: skip
    return definition.experiment_create(owner=owner, arms=[], **fields | overrides)


def counts(experiment: Experiment) -> tuple[int, int]:
    """Runs lost (open or failed after the experiment ended) and request rows beyond one per run and prompt."""
    lost = experiment.runs.exclude(status__in=[Run.Status.SUCCEEDED, Run.Status.CANCELLED]).count()
    rows = RequestRecord.objects.filter(run__experiment=experiment)
    per_prompt = rows.values("run_id", "prompt_index").annotate(n=Count("id")).filter(n__gt=1)
    return lost, sum(row["n"] - 1 for row in per_prompt)


def running_run(experiment: Experiment, *, done_at_least: int = 1, timeout_s: float = 400) -> Run:
    def under_way() -> Run | None:
        return experiment.runs.filter(status=Run.Status.RUNNING, requests_done__gte=done_at_least).first()

    return wait_for(under_way, timeout_s=timeout_s, what="a run under way", every_s=0.1)


def finished(experiment: Experiment, timeout_s: float = 600) -> Experiment:
    done = (Experiment.Status.FINISHED, Experiment.Status.FAILED, Experiment.Status.CANCELLED)

    def ended() -> Experiment | None:
        again = Experiment.objects.get(id=experiment.id)
        return again if again.status in done else None

    return wait_for(ended, timeout_s=timeout_s, what="the end")


def first_error(experiment: Experiment) -> str:
    """The error of the experiment's first run ("" without runs)."""
    run = experiment.runs.first()
    return run.error if run else ""


def taken_back(run: Run) -> bool:
    """The run is queued again, or already claimed again by a live process."""
    again = Run.objects.get(id=run.id)
    return again.status == Run.Status.QUEUED or again.attempts >= 2


def pool_child(stack: Stack, name: str = "worker-cpu") -> int:
    children = subprocess.run(["pgrep", "-P", str(stack.processes[name].pid)], capture_output=True, text=True)
    return int(children.stdout.split()[0])


def group_gone(pgid: int, *, what: str) -> None:
    """Wait until no process of the group `pgid` is left (a stopped vLLM server: all of it)."""
    wait_for(
        lambda: subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True).returncode != 0,
        timeout_s=60,
        what=what,
        every_s=0.1,
    )


def server_pgid(stack: Stack) -> int:
    pids = list((stack.data_dir / "server-pids").glob("*/*.pid"))
    return int(pids[0].stem)


def server_logs(stack: Stack, experiment: Experiment) -> list[Path]:
    return list((stack.data_dir / "server-logs" / f"experiment-{experiment.id}").glob("*.log"))


def host_memory_gib() -> float:
    with open("/proc/meminfo") as meminfo:
        return next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal:")) / 2**20


def row(name: str, done: str, experiment: Experiment, started: float | None, recovered: float | None,
        expect: str) -> Row:  # fmt: skip
    """The scenario's row once its experiment has ended: `started` to `recovered`, in monotonic seconds."""
    experiment = finished(experiment)
    lost, duplicated = counts(experiment)
    statuses = sorted(experiment.runs.values_list("status", flat=True))
    outcome = f"{expect}; experiment {experiment.status}, runs {', '.join(statuses)}"
    seconds = None if started is None or recovered is None else round(recovered - started, 1)
    return Row(name, done, outcome, lost, duplicated, seconds)
