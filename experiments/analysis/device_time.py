"""Device-minutes from the records (definitions in experiments/measurement/planning/device_cost.py): what
an experiment has used, and what a worker queue's servers and runs have cost lately, which the
experiment form's estimate rests on.

The continuation's budget (experiments/analysis/continuation.py) and the pages count an
experiment's device-minutes with `device_minutes`.
"""

from django.db.models import Count, DurationField, ExpressionWrapper, F, Sum
from django.db.models.functions import Coalesce, Now
from django.utils import timezone

from experiments.execution import worker_queues
from experiments.measurement.planning import device_cost
from experiments.measurement.planning.limits import Size
from experiments.models import Experiment, Run

# How far back a queue's medians look: its last 40 server starts, and about as many sessions'
# runs at three levels each. Recent enough to follow a change of hardware or vLLM version.
RECENT_STARTS = 40
RECENT_RUNS = 120


def spent(experiment: Experiment) -> device_cost.Spent:
    """The start-ups its servers recorded and its runs' time from claim to stored (a run under
    way: to now), summed in SQL; by wall clock when it was recorded before start-ups were."""
    held = ExpressionWrapper(Coalesce("finished_at", Now()) - F("started_at"), output_field=DurationField())
    totals = experiment.runs.filter(started_at__isnull=False).aggregate(
        start_s=Sum("server_start_s"), starts=Count("server_start_s"), load=Sum(held), runs=Count("id")
    )
    load_s = totals["load"].total_seconds() if totals["load"] else 0.0
    recorded = device_cost.DeviceTime(
        totals["start_s"] or 0.0, load_s, experiment.tensor_parallel_size, totals["starts"], totals["runs"]
    )
    if totals["starts"] or not experiment.runs.succeeded().exists():
        return device_cost.Spent(recorded)
    return device_cost.Spent(recorded, wall_clock_minutes=_wall_clock_minutes(experiment))


def _wall_clock_minutes(experiment: Experiment) -> float:
    """Wall minutes since it started (to its end, once it ended) × GPUs per server."""
    if experiment.started_at is None:
        return 0.0
    end = experiment.finished_at or timezone.now()
    return (end - experiment.started_at).total_seconds() / 60 * experiment.tensor_parallel_size


def device_minutes(experiment: Experiment) -> float:
    return spent(experiment).minutes


def queue_costs(queue: str) -> device_cost.QueueCosts:
    """The queue's median start-up and seconds per token step; where it has no records, the
    bounds its time limits use: its server start timeout and seconds per token (worker_queues)."""
    return device_cost.QueueCosts(
        start=device_cost.median_or(recent_starts(queue), worker_queues.server_start_timeout_s(queue)),
        step=device_cost.median_or(recent_step_seconds(queue), worker_queues.seconds_per_token(queue)),
    )


def recent_starts(queue: str) -> list[float]:
    """The start-ups of the queue's last RECENT_STARTS server sessions."""
    runs = Run.objects.filter(experiment__worker_queue=queue, server_start_s__isnull=False)
    latest = runs.order_by(F("started_at").desc(nulls_last=True)).values_list("server_start_s", flat=True)
    return [start for start in latest[:RECENT_STARTS] if start is not None]


def recent_step_seconds(queue: str) -> list[float]:
    """Seconds per token step of the queue's last RECENT_RUNS succeeded runs. Runs under a request
    rate are left out: their arrivals, not their steps, set how long they took."""
    runs = Run.objects.succeeded().filter(
        experiment__worker_queue=queue,
        experiment__source=Experiment.Source.MEASURED,
        experiment__request_rate__isnull=True,
    )
    rows = runs.order_by("-finished_at").values_list(
        "started_at", "finished_at", "concurrency", "experiment__warmup_requests", "experiment__num_prompts",
        "experiment__max_tokens",
    )[:RECENT_RUNS]  # fmt: skip
    return [
        (finished - started).total_seconds() / device_cost.token_steps(Size(warmup, prompts, max_tokens, None), level)
        for started, finished, level, warmup, prompts, max_tokens in rows
        if started is not None and finished is not None
    ]
