"""Server time of the experiment page at a realistic size.

Seeds one finished experiment — a baseline and 4 speculative arms x 8 concurrency levels x
5 repetitions x 500 requests, their speculative steps drawn by workers/bench/requests.py and
ingested with COPY through workers.storage.ingest as a worker would — times the analysis
(experiments.analysis.services.experiment_analyse, what the worker runs when an experiment
ends), then times GETs of its page with Django's test client and prints the median. The
experiment (and the user made for it, if any) is deleted at the end, also when something fails.
"""

import math
import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client, override_settings
from django.urls import reverse

from experiments import teams
from experiments.analysis.services import experiment_analyse
from experiments.measurement.encoding.packed import FLOAT64
from experiments.models import Arm, Experiment, Run
from workers.bench.requests import recorded, simulated_decoding, spec_counters
from workers.bench.storage import request_rows
from workers.measure.loadgen import LoadResult, RequestResult
from workers.storage.ingest import ingest_run

NAME = "bench: experiment page (deleted by scripts/bench_experiment_page.py)"
BENCH_USER = "bench-experiment-page"
LEVELS = [1, 2, 4, 8, 16, 32, 64, 128]
REPETITIONS, REQUESTS, OUTPUT_TOKENS, GETS = 5, 500, 128, 10
# (label, method, k, chance a draft token is accepted, draft cost ratio)
ARMS = [
    ("baseline", Arm.Method.BASELINE, None, 0.0, 0.0),
    ("n-gram k=4", Arm.Method.NGRAM, 4, 0.55, 0.02),
    ("n-gram k=2", Arm.Method.NGRAM, 2, 0.6, 0.02),
    ("draft k=4", Arm.Method.DRAFT_MODEL, 4, 0.7, 0.15),
    ("EAGLE-3 k=3", Arm.Method.EAGLE3, 3, 0.75, 0.08),
]
ENVIRONMENT = {
    "host_name": "bench-host", "cpu_model": "bench CPU", "cpu_count": 64, "gpu_name": "NVIDIA H100 80GB HBM3",
    "gpu_count": 1, "gpu_memory_mb": 81559, "gpu_driver": "550.54.15", "cuda_version": "12.4",
    "vllm_version": "0.32.0", "torch_version": "2.13.0", "python_version": "3.11.2",
}  # fmt: skip


@dataclass(frozen=True)
class PageTimes:
    """Wall-clock and this process's CPU milliseconds per GET, the queries of one GET and its size.

    The CPU time leaves out PostgreSQL's share but also the wait for a core, which on a
    shared machine can be most of the difference between runs."""

    wall_ms: list[float]
    cpu_ms: list[float]
    queries: int
    size: int


def _request(rng: random.Random, prompt_index: int, level: int, k: int | None, accept: float,
             cost: float) -> RequestResult:  # fmt: skip
    """One streamed request: a target step gets dearer with the batch, a verify step more so."""
    step_ms = 10.0 * (1 + math.log2(level) * 0.35)
    ttft = rng.uniform(30, 60) * (1 + level / 16)
    decoding = simulated_decoding(rng, k=k, accept=accept, output_tokens=OUTPUT_TOKENS)
    verify_ms = step_ms * (1 + k * cost) * (1 + math.log2(level) * 0.12) if k else step_ms
    gaps = [verify_ms * rng.uniform(0.8, 1.2) for _ in decoding["chunk_tokens"][1:]]
    times = [ttft]
    for gap in gaps:
        times.append(times[-1] + gap)
    return RequestResult(
        prompt_index=prompt_index, input_tokens=rng.randint(80, 400), output_tokens=OUTPUT_TOKENS, sent_at_s=0.0,
        ttft_ms=ttft, e2e_ms=times[-1], tpot_ms=(times[-1] - ttft) / (OUTPUT_TOKENS - 1),
        chunk_times_ms=FLOAT64.new(times), finish_reason="length", **recorded(decoding),
    )  # fmt: skip


def _arm(experiment: Experiment, position: int, label: str, method: str, k: int | None) -> Arm:
    params = {"model": "/models/bench-draft"} if method in (Arm.Method.DRAFT_MODEL, Arm.Method.EAGLE3) else {}
    return Arm.objects.create(
        experiment=experiment, position=position, label=label, method=method, num_speculative_tokens=k, params=params
    )


def seed(owner: User, *, repetitions: int = REPETITIONS, requests: int = REQUESTS) -> Experiment:
    """The finished experiment, every run's requests ingested as a worker would."""
    rng = random.Random(0)
    experiment = Experiment.objects.create(
        name=NAME, owner=owner, team=teams.default_team(), status=Experiment.Status.FINISHED,
        target_model="/models/bench-target", worker_queue="h100", prompt_set="chat", prompt_set_hash="b" * 64,
        num_prompts=requests, max_tokens=OUTPUT_TOKENS, concurrency_levels=LEVELS, repetitions=repetitions,
        slo_tpot_ms=25.0,
    )  # fmt: skip
    now = datetime.now(UTC)
    for position, (label, method, k, accept, cost) in enumerate(ARMS):
        arm = _arm(experiment, position, label, method, k)
        command = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", experiment.target_model]
        environment = ENVIRONMENT | {"server_command": command + ([] if k is None else ["--speculative-config", "…"])}
        for repetition in range(1, repetitions + 1):
            for level in LEVELS:
                run = Run.objects.create(
                    experiment=experiment, arm=arm, concurrency=level, repetition=repetition,
                    status=Run.Status.SUCCEEDED, worker_host="bench-host", requests_done=requests,
                    requests_total=requests,
                )  # fmt: skip
                results = [_request(rng, i, level, k, accept, cost) for i in range(requests)]
                duration = sum(r.e2e_ms or 0.0 for r in results) / 1000 / level
                load = LoadResult(requests=results, duration_s=duration, started_at=now, finished_at=now)
                ingest_run(
                    run_id=run.id, load=load, counters=spec_counters(results, k), environment=environment,
                    experiment=experiment,
                )  # fmt: skip
        print(f"  seeded {label}", flush=True)
    return experiment


# The dev settings serve static files from a collectstatic manifest that may not exist yet;
# plain static URLs cost the same.
@override_settings(STORAGES={"staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}})
def time_page(experiment: Experiment, user: User, gets: int = GETS) -> PageTimes:
    """The page's GET `gets` times, after one that counts its queries."""
    client = Client(SERVER_NAME="localhost")
    client.force_login(user)
    url = reverse("experiments:detail", args=[experiment.pk])
    queries: list[str] = []

    def count(execute: Callable[..., object], sql: str, params: Sequence[object], many: bool,
              context: dict[str, object]) -> object:  # fmt: skip
        queries.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        response = client.get(url)
    assert response.status_code == 200, response.status_code
    wall, cpu = [], []
    for _ in range(gets):
        start, start_cpu = time.perf_counter(), time.process_time()
        client.get(url)
        wall.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    return PageTimes(wall, cpu, len(queries), len(response.content))


def _seed_and_time(user: User, *, repetitions: int, requests: int, gets: int) -> Experiment:
    print(
        f"seeding: baseline + {len(ARMS) - 1} arms x {len(LEVELS)} levels x {repetitions} reps x "
        f"{requests} requests; {request_rows.rows_in_table():,} request rows in the database before"
    )
    start = time.perf_counter()
    experiment = seed(user, repetitions=repetitions, requests=requests)
    print(f"seeded in {time.perf_counter() - start:.0f} s; analysing …", flush=True)
    start, start_cpu = time.perf_counter(), time.process_time()
    experiment_analyse(experiment=experiment)
    print(
        f"analysis stored in {time.perf_counter() - start:.1f} s (CPU of this process "
        f"{time.process_time() - start_cpu:.1f} s; target 30 s)"
    )
    times = time_page(experiment, user, gets)
    print(
        f"experiment page: median {statistics.median(times.wall_ms):.0f} ms over {gets} GETs "
        f"(min {min(times.wall_ms):.0f}, max {max(times.wall_ms):.0f}; CPU of this process "
        f"{statistics.median(times.cpu_ms):.0f} ms); {times.queries} queries; {times.size / 1024:.0f} KiB of HTML; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    return experiment


def report(*, repetitions: int = REPETITIONS, requests: int = REQUESTS, gets: int = GETS) -> None:
    """Seed, analyse and time the page, printing each step's figures; delete what it made."""
    user, made_user = get_user_model().objects.get_or_create(username=BENCH_USER)
    Experiment.objects.filter(name=NAME).delete()  # left over from an interrupted run
    try:
        _seed_and_time(user, repetitions=repetitions, requests=requests, gets=gets)
    finally:
        Experiment.objects.filter(name=NAME).delete()
        if made_user:
            user.delete()
