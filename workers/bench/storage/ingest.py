"""Rows per second of storing a finished run's requests, as a worker stores them.

Builds realistic RequestResult rows (128 output tokens each with their chunk arrival
times, tokens per chunk and output token ids; the speculative runs with vLLM's per-step
accepted and proposed lists, drawn by workers/bench/requests.py), then times
`workers.storage.ingest.ingest_run`, the function the worker calls, run by run: deleting an
earlier copy of the run, COPY of the request rows, the environment snapshot and the
summary computed from the requests. Building the rows is not timed: the load generator
has them in memory already. It prints the rows per second of the whole call and of the
COPY step alone (`_copy_requests`, timed the same way on a second set of runs), and the
CPU time of encoding the COPY stream (workers/storage/request_copy.py), which a busy host does not
inflate as much as the wall-clock figures. The experiment it writes to, and the user made
for it, are deleted at the end.
"""

import os
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction

from experiments import teams
from experiments.measurement.engine.prom import SpecCounters
from experiments.models import Arm, Experiment, Run
from workers.bench.requests import OUTPUT_TOKENS, spec_counters, streamed_request
from workers.measure.loadgen import LoadResult
from workers.storage.ingest import _copy_requests, ingest_run
from workers.storage.request_copy import copy_buffer

NAME = "bench: ingestion (deleted by scripts/bench_ingest.py)"
BENCH_USER = "bench-ingest"
TARGET_ROWS_PER_S = 100_000
ENVIRONMENT = {"host_name": "bench-host", "vllm_version": "0.32.0", "server_command": ["python", "-m", "vllm"]}
# (label, method, k, chance a draft token is accepted)
ARMS = [("baseline", Arm.Method.BASELINE, None, 0.0), ("draft k=4", Arm.Method.DRAFT_MODEL, 4, 0.7)]

Loads = list[tuple[LoadResult, SpecCounters]]


@dataclass(frozen=True)
class Figures:
    rows: int
    ingest_s: float
    copy_s: float
    encode_s: float

    @property
    def ingest_rate(self) -> float:
        return self.rows / self.ingest_s

    @property
    def copy_rate(self) -> float:
        return self.rows / self.copy_s

    @property
    def encode_rate(self) -> float:
        return self.rows / max(self.encode_s, 1e-9)


def _runs(experiment: Experiment, arms: list[Arm], count: int, first_repetition: int) -> list[Run]:
    return [
        Run.objects.create(
            experiment=experiment,
            arm=arms[i % len(arms)],
            concurrency=8,
            repetition=first_repetition + i,
            status=Run.Status.SUCCEEDED,
            worker_host="bench-host",
        )
        for i in range(count)
    ]


def _time_ingest(experiment: Experiment, runs: list[Run], loads: Loads) -> float:
    """Seconds in ingest_run over the runs, one call (and transaction) per run as a worker makes it."""
    total = 0.0
    for run, (load, counters) in zip(runs, loads, strict=True):
        start = time.perf_counter()
        ingest_run(run_id=run.id, load=load, counters=counters, environment=ENVIRONMENT, experiment=experiment)
        total += time.perf_counter() - start
    return total


def _time_copy(runs: list[Run], loads: Loads) -> float:
    total = 0.0
    for run, (load, _) in zip(runs, loads, strict=True):
        start = time.perf_counter()
        with transaction.atomic():
            _copy_requests(run.id, load.requests)
        total += time.perf_counter() - start
    return total


def _time_encoding(runs: list[Run], loads: Loads) -> float:
    """CPU seconds of this process turning the rows into the COPY stream, the share of the
    COPY that does not depend on PostgreSQL or on waiting for a core."""
    start = time.process_time()
    for run, (load, _) in zip(runs, loads, strict=True):
        copy_buffer(run.id, load.requests)
    return time.process_time() - start


def _loads(runs: int, requests: int) -> Loads:
    rng = random.Random(0)
    loads = []
    now = datetime.now(UTC)
    for i in range(runs):
        _, _, k, accept = ARMS[i % len(ARMS)]
        rows = [streamed_request(rng, p, k, accept) for p in range(requests)]
        load = LoadResult(requests=rows, duration_s=10.0, started_at=now, finished_at=now)
        loads.append((load, spec_counters(rows, k)))
    return loads


def measure(owner: User, *, runs: int, requests: int) -> Figures:
    """Build the rows, time both steps and return rows and seconds of each."""
    experiment = Experiment.objects.create(
        name=NAME, owner=owner, team=teams.default_team(), status=Experiment.Status.FINISHED,
        target_model="/models/bench-target", worker_queue="h100", num_prompts=requests, max_tokens=OUTPUT_TOKENS,
        concurrency_levels=[8], repetitions=2 * runs, slo_tpot_ms=25.0,
    )  # fmt: skip
    arms = [
        Arm.objects.create(experiment=experiment, position=i, label=label, method=method, num_speculative_tokens=k)
        for i, (label, method, k, _) in enumerate(ARMS)
    ]
    loads = _loads(runs, requests)
    ingest_s = _time_ingest(experiment, _runs(experiment, arms, runs, 1), loads)
    copy_runs = _runs(experiment, arms, runs, runs + 1)
    copy_s = _time_copy(copy_runs, loads)
    return Figures(runs * requests, ingest_s, copy_s, _time_encoding(copy_runs, loads))


def report(*, runs: int, requests: int) -> None:
    """Measure with a user of its own, delete what it wrote, print the figures."""
    user, made_user = get_user_model().objects.get_or_create(username=BENCH_USER)
    Experiment.objects.filter(name=NAME).delete()  # left over from an interrupted run
    try:
        figures = measure(user, runs=runs, requests=requests)
    finally:
        Experiment.objects.filter(name=NAME).delete()
        if made_user:
            user.delete()
    print(f"{figures.rows:,} request rows of {OUTPUT_TOKENS} output tokens in {runs} runs of {requests}:")
    print(
        f"  ingest_run (the worker's call)  {figures.ingest_s:6.2f} s  {figures.ingest_rate:9,.0f} rows/s"
        f"  (target {TARGET_ROWS_PER_S:,})"
    )
    print(f"  COPY of the request rows alone  {figures.copy_s:6.2f} s  {figures.copy_rate:9,.0f} rows/s")
    print(
        f"  encoding the COPY stream        {figures.encode_s:6.2f} s  {figures.encode_rate:9,.0f} rows/s"
        "  (CPU of this process)"
    )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
