"""Rows per second of storing a finished run's requests, as a worker stores them.

Builds realistic RequestResult rows (128 output tokens each with their chunk arrival
times, tokens per chunk and output token ids; the speculative runs with vLLM's per-step
accepted and proposed lists, drawn by tests/factories.py's simulator), then times
`workers.storage.ingest.ingest_run`, the function the worker calls, run by run: deleting an
earlier copy of the run, COPY of the request rows, the environment snapshot and the
summary computed from the requests. Building the rows is not timed: the load generator
has them in memory already. It prints the rows per second of the whole call and of the
COPY step alone (`_copy_requests`, timed the same way on a second set of runs), and the
CPU time of encoding the COPY stream (workers/storage/request_copy.py), which a busy host does not
inflate as much as the wall-clock figures. The
experiment it writes to, and the user made for it, are deleted at the end.

    eval "$(./dev env)" && .venv/bin/python scripts/bench_ingest.py [--runs 40] [--requests 500]
"""

import argparse
import os
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import django

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import transaction  # noqa: E402

from experiments import teams  # noqa: E402
from experiments.measurement.encoding.packed import FLOAT64, UINT32  # noqa: E402
from experiments.models import Arm, Experiment, Run  # noqa: E402
from tests.factories import recorded, simulated_decoding, spec_counters  # noqa: E402
from workers.measure.loadgen import LoadResult, RequestResult  # noqa: E402
from workers.storage.ingest import _copy_requests, ingest_run  # noqa: E402
from workers.storage.request_copy import copy_buffer  # noqa: E402

NAME = "bench: ingestion (deleted by scripts/bench_ingest.py)"
BENCH_USER = "bench-ingest"
OUTPUT_TOKENS = 128
TARGET_ROWS_PER_S = 100_000
ENVIRONMENT = {"host_name": "bench-host", "vllm_version": "0.32.0", "server_command": ["python", "-m", "vllm"]}
# (label, method, k, chance a draft token is accepted)
ARMS = [("baseline", Arm.Method.BASELINE, None, 0.0), ("draft k=4", Arm.Method.DRAFT_MODEL, 4, 0.7)]


def request_result(
    rng: random.Random, prompt_index: int, k: int | None, accept: float, output_tokens: int = OUTPUT_TOKENS
) -> RequestResult:
    """One successful streamed request, as the load generator records it."""
    decoding = simulated_decoding(rng, k=k, accept=accept, output_tokens=output_tokens)
    ttft = rng.uniform(30, 60)
    times = [ttft]
    for _ in decoding["chunk_tokens"][1:]:
        times.append(times[-1] + rng.uniform(8, 12))
    return RequestResult(
        prompt_index=prompt_index, input_tokens=rng.randint(80, 400), output_tokens=output_tokens,
        sent_at_s=prompt_index * 0.01, ttft_ms=ttft, e2e_ms=times[-1], tpot_ms=(times[-1] - ttft) / (output_tokens - 1),
        chunk_times_ms=FLOAT64.new(times), finish_reason="length", **recorded(decoding),
        output_token_ids=UINT32.new(rng.randrange(32000) for _ in range(output_tokens)),
    )  # fmt: skip


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


def _time_ingest(experiment, runs, loads) -> float:
    """Seconds in ingest_run over the runs, one call (and transaction) per run as a worker makes it."""
    total = 0.0
    for run, (load, counters) in zip(runs, loads, strict=True):
        start = time.perf_counter()
        ingest_run(run_id=run.id, load=load, counters=counters, environment=ENVIRONMENT, experiment=experiment)
        total += time.perf_counter() - start
    return total


def _time_copy(runs, loads) -> float:
    total = 0.0
    for run, (load, _) in zip(runs, loads, strict=True):
        start = time.perf_counter()
        with transaction.atomic():
            _copy_requests(run.id, load.requests)
        total += time.perf_counter() - start
    return total


def _time_encoding(runs, loads) -> float:
    """CPU seconds of this process turning the rows into the COPY stream, the share of the
    COPY that does not depend on PostgreSQL or on waiting for a core."""
    start = time.process_time()
    for run, (load, _) in zip(runs, loads, strict=True):
        copy_buffer(run.id, load.requests)
    return time.process_time() - start


def measure(owner, *, runs: int, requests: int) -> dict:
    """Build the rows, time both steps and return rows, seconds and rows per second of each."""
    rng = random.Random(0)
    experiment = Experiment.objects.create(
        name=NAME, owner=owner, team=teams.default_team(), status=Experiment.Status.FINISHED,
        target_model="/models/bench-target", worker_queue="h100", num_prompts=requests, max_tokens=OUTPUT_TOKENS,
        concurrency_levels=[8], repetitions=2 * runs, slo_tpot_ms=25.0,
    )  # fmt: skip
    arms = [
        Arm.objects.create(experiment=experiment, position=i, label=label, method=method, num_speculative_tokens=k)
        for i, (label, method, k, _) in enumerate(ARMS)
    ]
    loads = []
    now = datetime.now(UTC)
    for i in range(runs):
        _, _, k, accept = ARMS[i % len(ARMS)]
        rows = [request_result(rng, p, k, accept) for p in range(requests)]
        load = LoadResult(requests=rows, duration_s=10.0, started_at=now, finished_at=now)
        loads.append((load, spec_counters(rows, k)))
    ingest_s = _time_ingest(experiment, _runs(experiment, arms, runs, 1), loads)
    copy_runs = _runs(experiment, arms, runs, runs + 1)
    copy_s = _time_copy(copy_runs, loads)
    encode_s = _time_encoding(copy_runs, loads)
    rows = runs * requests
    return {
        "rows": rows,
        "ingest_s": ingest_s,
        "copy_s": copy_s,
        "ingest_rate": rows / ingest_s,
        "copy_rate": rows / copy_s,
        "encode_s": encode_s,
        "encode_rate": rows / max(encode_s, 1e-9),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="runs to store (half baseline, half speculative)")
    parser.add_argument("--requests", type=int, default=500, help="requests per run")
    args = parser.parse_args(argv)
    user, made_user = get_user_model().objects.get_or_create(username=BENCH_USER)
    Experiment.objects.filter(name=NAME).delete()  # left over from an interrupted run
    try:
        figures = measure(user, runs=args.runs, requests=args.requests)
    finally:
        Experiment.objects.filter(name=NAME).delete()
        if made_user:
            user.delete()
    print(f"{figures['rows']:,} request rows of {OUTPUT_TOKENS} output tokens in {args.runs} runs of {args.requests}:")
    print(
        f"  ingest_run (the worker's call)  {figures['ingest_s']:6.2f} s  {figures['ingest_rate']:9,.0f} rows/s"
        f"  (target {TARGET_ROWS_PER_S:,})"
    )
    print(f"  COPY of the request rows alone  {figures['copy_s']:6.2f} s  {figures['copy_rate']:9,.0f} rows/s")
    print(
        f"  encoding the COPY stream        {figures['encode_s']:6.2f} s  {figures['encode_rate']:9,.0f} rows/s"
        "  (CPU of this process)"
    )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
