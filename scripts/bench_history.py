"""Server time and query count of the history page over 10,000 experiments.

Creates a database of its own (specdash_bench_history, next to the dev database), migrates
it, and seeds it with COPY: 10,000 experiments over 18 months from 24 owners, on four worker
queues with their hardware and vLLM versions, each with a baseline, one to three speculative
arms and (half of them) an A/A replicate, two to six concurrency levels, one to five blocks,
every run with its summary and environment snapshot, and the stored speedups of every
compared arm, level and metric with their verdict words; and 20 services' decisions (final,
superseded and proposed) citing some of them. Per-request rows are left out: the
history never reads them. Then it times GETs of the list (Django's test client, in process:
middleware, queries and template) for a few typical URLs and prints the median server time
and the query count of each, the latter for 20 and for 100 rows a page.

    eval "$(./dev env)" && .venv/bin/python scripts/bench_history.py

--request-rows N adds N per-request rows over the succeeded runs, 200 a run
(scripts/bench_request_rows.py): the history never reads them, but they make the database
as large as years of use do. --keep leaves the database for the next run (which then skips
the seeding); without it the database is dropped at the end.
"""

import argparse
import math
import os
import random
import re
import statistics
import sys
import time
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path

import django

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
django.setup()
warnings.filterwarnings("ignore", message="No directory at")

from django.contrib.auth import get_user_model  # noqa: E402
from django.contrib.auth.hashers import make_password  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client, override_settings  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.urls import reverse  # noqa: E402

from experiments import teams  # noqa: E402
from experiments.measurement.stats import verdicts  # noqa: E402
from experiments.models import (  # noqa: E402
    Arm,
    Decision,
    DecisionEvidence,
    EnvironmentSnapshot,
    Experiment,
    Run,
    RunSummary,
    SpeedupEstimate,
)
from scripts import bench_request_rows  # noqa: E402

DATABASE = "specdash_bench_history"
EXPERIMENTS = 10_000
GETS = 25
OWNERS = 24
MODELS = [
    "/models/llama-3.1-8b-instruct", "/models/llama-3.1-70b-instruct", "/models/qwen2.5-7b-instruct",
    "/models/qwen2.5-32b-instruct", "/models/mistral-7b-instruct-v0.3", "/models/gemma-2-9b-it",
]  # fmt: skip
# queue: (gpu name, gpu count, cpu model, vLLM versions seen on it over the months)
QUEUES = {
    "h100": ("NVIDIA H100 80GB HBM3", 1, "Intel Xeon Platinum 8480+", ["0.30.2", "0.31.1", "0.32.0", "0.33.0"]),
    "a100": ("NVIDIA A100-SXM4-80GB", 1, "AMD EPYC 7763", ["0.30.2", "0.31.1", "0.32.0"]),
    "l4": ("NVIDIA L4", 1, "Intel Xeon @ 2.20GHz", ["0.31.1", "0.32.0", "0.33.0"]),
    "cpu": ("", 0, "AMD EPYC 7B13", ["0.32.0"]),
}
LEVEL_SETS = [[1, 4, 16], [1, 2, 4, 8, 16, 32], [1, 8, 32, 64], [1, 4], [1, 4, 8], [2, 8, 32, 128]]
# method, k, params, mean TPOT speedup at concurrency 1
ARM_CHOICES = [
    (Arm.Method.NGRAM, 4, {"prompt_lookup_min": 2, "prompt_lookup_max": 4}, 1.25),
    (Arm.Method.NGRAM, 2, {"prompt_lookup_min": 2, "prompt_lookup_max": 4}, 1.15),
    (Arm.Method.DRAFT_MODEL, 4, {"model": "/models/draft-1b"}, 1.6),
    (Arm.Method.EAGLE, 4, {"model": "/models/eagle-head"}, 1.8),
    (Arm.Method.EAGLE3, 3, {"model": "/models/eagle3-head"}, 2.0),
    (Arm.Method.MTP, 1, {}, 1.4),
    (Arm.Method.SUFFIX, 8, {}, 1.3),
]
METRICS = [m.value for m in SpeedupEstimate.Metric]
PROMPT_SETS = ["chat", "code_edit", "summarise"]
SERVICES = [f"service-{i:02d}" for i in range(20)]
STATUSES = [Experiment.Status.FINISHED] * 90 + [Experiment.Status.FAILED] * 5 + [Experiment.Status.CANCELLED] * 3
STATUSES += [Experiment.Status.RUNNING, Experiment.Status.QUEUED]


# ---------------------------------------------------------------- seeding with COPY


class Table:
    """Rows for one model's table, written with COPY in the order of its concrete fields;
    a field a row leaves out gets the field's default."""

    def __init__(self, model):
        self.model = model
        self.fields = list(model._meta.concrete_fields)
        self.rows = []

    def add(self, **values) -> None:
        self.rows.append(values)

    def _value(self, field, row):
        value = row[field.attname] if field.attname in row else field.get_default()
        return field.get_db_prep_save(value, connection) if field.get_internal_type() == "JSONField" else value

    def copy(self, cursor) -> int:
        columns = ", ".join(connection.ops.quote_name(f.column) for f in self.fields)
        with cursor.copy(f"COPY {self.model._meta.db_table} ({columns}) FROM STDIN") as copy:
            for row in self.rows:
                copy.write_row([self._value(field, row) for field in self.fields])
        return len(self.rows)


def _speedup_rows(rng, table, *, ids, experiment_id, arm_id, levels, blocks, base_gain, margin):
    """One arm's stored speedups: the gain falls with concurrency, the interval narrows with blocks."""
    for level in levels:
        for metric in METRICS:
            gain = 1 + (base_gain - 1) * max(-0.3, 1 - math.log2(level) / 5)
            if metric in ("ttft",):
                gain = 1 / rng.uniform(1.0, 1.1)
            point = gain * rng.uniform(0.95, 1.05)
            half = 0.4 / math.sqrt(blocks) * rng.uniform(0.05, 0.3)
            lo, hi = point * (1 - half), point * (1 + half)
            outcome = _outcome(lo, hi, blocks, margin)
            table.add(
                id=next(ids), experiment_id=experiment_id, arm_id=arm_id, concurrency=level, metric=metric,
                point=point, ci_low=lo if blocks > 1 else None, ci_high=hi if blocks > 1 else None, n_pairs=blocks * 40,
                n_repetitions=blocks, outcome=outcome, block_ratios=[point * rng.uniform(0.97, 1.03)] * blocks,
            )  # fmt: skip


def _outcome(lo: float, hi: float, blocks: int, margin: float) -> str:
    if blocks < verdicts.MIN_BLOCKS:
        return verdicts.TOO_FEW_BLOCKS
    if lo > 1:
        return verdicts.FASTER
    if hi < 1:
        return verdicts.SLOWER
    if 1 - margin <= lo and hi <= 1 + margin:
        return verdicts.EQUIVALENT
    return verdicts.INCONCLUSIVE


def _summary(rng, *, run_id, level, speed):
    """A run's summary: latencies grow with the batch; `speed` is the arm's gain."""
    tpot = 12 * (1 + math.log2(level) * 0.4) / speed * rng.uniform(0.95, 1.05)
    ttft = 40 * (1 + level / 16) * rng.uniform(0.9, 1.1)
    e2e = ttft + tpot * 255
    duration = 200 * e2e / 1000 / level
    row = {"id": run_id, "run_id": run_id, "duration_s": duration, "completed": 200, "failed": 0}
    row |= {"total_input_tokens": 200 * 300, "total_output_tokens": 200 * 256}
    row |= {"request_throughput": 200 / duration, "output_throughput": 200 * 256 / duration}
    row |= {"achieved_concurrency": level * 0.97, "tokens_per_chunk_mean": speed}
    for name, value in (("ttft", ttft), ("tpot", tpot), ("itl", tpot * speed), ("e2e", e2e)):
        row |= {f"{name}_mean_ms": value, f"{name}_p50_ms": value * 0.97, f"{name}_p90_ms": value * 1.2}
        row[f"{name}_p99_ms"] = value * 1.5
    return row


def seed(n_experiments: int) -> None:
    rng = random.Random(0)
    password = make_password("bench")
    users = [get_user_model().objects.create(username=f"engineer{i:02d}", password=password) for i in range(OWNERS)]
    models = (Experiment, Arm, Run, RunSummary, EnvironmentSnapshot, SpeedupEstimate, Decision, DecisionEvidence)
    tables = {model: Table(model) for model in models}
    counters = {model: iter(range(1, 10**9)) for model in tables}
    now = datetime.now(UTC)
    decidable = []
    for index in range(n_experiments):
        decidable += _seed_experiment(rng, tables, counters, users, now, index / n_experiments)
    _seed_decisions(rng, tables, counters, users, decidable, now)
    # One team, as an install without teams has: the users joined it when created.
    team_id = teams.default_team().id
    for model in (Experiment, Decision):
        for row in tables[model].rows:
            row["team_id"] = team_id
    with connection.cursor() as cursor:
        raw = cursor.cursor
        for model, table in tables.items():
            start = time.perf_counter()
            count = table.copy(raw)
            print(f"  {model.__name__}: {count:,} rows in {time.perf_counter() - start:.0f} s", flush=True)
            cursor.execute(
                "SELECT setval(pg_get_serial_sequence(%s, 'id'), (SELECT max(id) FROM " + model._meta.db_table + "))",
                [model._meta.db_table],
            )
        # As autovacuum would soon: statistics, and the visibility map index-only scans need.
        cursor.execute("VACUUM ANALYZE")


def _seed_experiment(rng, tables, counters, users, now, age) -> list[tuple]:
    """One experiment, `age` of the way from 18 months ago to now, with its arms and runs;
    returns (experiment id, speculative arm id, config, highest level) when it can be cited."""
    index = next(counters[Experiment])
    experiment_id = index
    queue = rng.choice(list(QUEUES))
    gpu_name, gpu_count, cpu_model, versions = QUEUES[queue]
    created = now - timedelta(days=540 * (1 - age), minutes=rng.randint(0, 600))
    status = rng.choice(STATUSES)
    levels = rng.choice(LEVEL_SETS)
    blocks = rng.choice([3, 3, 3, 3, 5, 2, 1])
    replicate = rng.random() < 0.5
    model = rng.choice(MODELS)
    version = versions[min(len(versions) - 1, int(len(versions) * age))]
    ran = status != Experiment.Status.QUEUED
    hardware = f"{gpu_count} × {gpu_name}" if gpu_count else f"CPU: {cpu_model}"
    tables[Experiment].add(
        id=experiment_id, name=f"{model.rsplit('/', 1)[1]} on {queue} #{index}", description="",
        owner_id=rng.choice(users).id, created_at=created, started_at=created if ran else None,
        finished_at=created + timedelta(hours=1) if status not in Experiment.ACTIVE_STATUSES else None,
        status=status, target_model=model, worker_queue=queue, dtype="bfloat16", max_model_len=4096,
        workload_kind=Experiment.WorkloadKind.BUILTIN, prompt_set=rng.choice(PROMPT_SETS),
        prompt_set_hash=f"{index % 7:064x}", num_prompts=max(200, 4 * max(levels)), max_tokens=256,
        temperature=0.0, top_p=1.0, seed=0, concurrency_levels=levels, repetitions=blocks, server_per_block=True,
        aa_replicate=replicate, equivalence_margin=0.02, warmup_requests=2,
        vllm_versions=[version] if ran else [], hardware=[hardware] if ran else [],
    )  # fmt: skip
    arms = [("baseline", Arm.Method.BASELINE, None, {}, 1.0, False)]
    if replicate:
        arms.append(("baseline replicate (A/A)", Arm.Method.BASELINE, None, {}, 1.0, True))
    for method, k, params, gain in rng.sample(ARM_CHOICES, rng.randint(1, 3)):
        arms.append((f"{Arm.Method(method).label} k={k}", method, k, params, gain, False))
    decidable = []
    for position, (label, method, k, params, gain, is_replicate) in enumerate(arms):
        arm_id = next(counters[Arm])
        tables[Arm].add(
            id=arm_id, experiment_id=experiment_id, position=position, label=label, method=method,
            num_speculative_tokens=k, params=params, is_replicate=is_replicate,
        )  # fmt: skip
        _seed_runs(rng, tables, counters, experiment_id, arm_id, levels, blocks, position, gain, status, queue, version)
        if position and status == Experiment.Status.FINISHED:
            _speedup_rows(
                rng, tables[SpeedupEstimate], ids=counters[SpeedupEstimate], experiment_id=experiment_id,
                arm_id=arm_id, levels=levels, blocks=blocks, base_gain=gain, margin=0.02,
            )  # fmt: skip
            if k:
                config = {"method": method, "num_speculative_tokens": k} | params
                decidable.append((experiment_id, arm_id, config, max(levels)))
    return decidable


def _seed_decisions(rng, tables, counters, users, decidable, now):
    """Per service, four superseded decisions, the final one and (every other service) a
    proposal, each deploying an arm of the first of the two experiments it cites."""
    states = ("superseded",) * 4 + ("final", "proposed")
    for service_index, service in enumerate(SERVICES):
        for version in range(6 if service_index % 2 else 5):
            decision_id = next(counters[Decision])
            (experiment_id, arm_id, config, top), other = rng.sample(decidable, 2)
            proposed = now - timedelta(days=400 - 60 * version)
            tables[Decision].add(
                id=decision_id, service=service, kind=Decision.Kind.DEPLOY, arm_id=arm_id, speculative_config=config,
                max_concurrency=min(top, 16), metric="tpot", rationale="Faster up to 16 in the cited experiments.",
                state=states[version], proposed_by_id=rng.choice(users).id, proposed_at=proposed,
                decided_by_id=None if version == 5 else rng.choice(users).id,
                decided_at=None if version == 5 else proposed + timedelta(days=1),
            )  # fmt: skip
            for cited in {experiment_id, other[0]}:
                tables[DecisionEvidence].add(
                    id=next(counters[DecisionEvidence]), decision_id=decision_id, experiment_id=cited
                )


def _seed_runs(rng, tables, counters, experiment_id, arm_id, levels, blocks, position, gain, status, queue, version):
    gpu_name, gpu_count, cpu_model, _ = QUEUES[queue]
    run_status = {
        Experiment.Status.FINISHED: Run.Status.SUCCEEDED,
        Experiment.Status.FAILED: Run.Status.FAILED,
        Experiment.Status.CANCELLED: Run.Status.CANCELLED,
    }.get(status, Run.Status.QUEUED)
    for block in range(1, blocks + 1):
        for level_position, level in enumerate(levels, start=1):
            run_id, host = next(counters[Run]), f"{queue}-worker-{experiment_id % 4}"
            tables[Run].add(
                id=run_id, experiment_id=experiment_id, arm_id=arm_id, concurrency=level, repetition=block,
                block_position=position + 1, level_position=level_position, status=run_status,
                created_at=datetime.now(UTC), worker_host=host,
                requests_done=200, requests_total=200,
            )  # fmt: skip
            if run_status != Run.Status.SUCCEEDED:
                continue
            tables[RunSummary].add(**_summary(rng, run_id=run_id, level=level, speed=gain))
            tables[EnvironmentSnapshot].add(
                id=run_id, run_id=run_id, captured_at=datetime.now(UTC), host_name=host,
                cpu_model=cpu_model, cpu_count=64, gpu_name=gpu_name, gpu_count=gpu_count, vllm_version=version,
                torch_version="2.13.0", python_version="3.11.2",
                server_command=["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "…"],
            )  # fmt: skip


# ---------------------------------------------------------------- timing


def _urls(user, total: int) -> dict[str, dict]:
    last_month = (datetime.now(UTC) - timedelta(days=30)).date()
    middle = max(1, total // 40)
    return {
        "newest first, page 1": {},
        f"by name, page {middle} (the middle)": {"sort": "name", "page": middle},
        "finished EAGLE-3 on h100": {"status": "finished", "method": "eagle3", "queue": "h100"},
        "vLLM 0.33.0, last month, E2E headline": {"vllm": "0.33.0", "since": last_month, "metric": "e2e"},
        "one owner, search 'qwen'": {"owner": user.username, "q": "qwen"},
        "cited by a final deploy decision": {"decision": "final", "decision_kind": "deploy"},
    }


def _queries(client, url, params) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, params)
    assert response.status_code == 200, re.findall(r"<li><strong>.*?</li>", response.content.decode())
    return len(captured)


# The dev settings serve static files from a collectstatic manifest that may not exist yet;
# plain static URLs cost the same.
@override_settings(STORAGES={"staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}})
def time_list(gets: int = GETS) -> list[tuple[str, float, float, int, str]]:
    """Per URL: median wall-clock and CPU (this process) milliseconds, queries, matches.

    The CPU time leaves out PostgreSQL's share but also the wait for a core, which on a
    shared machine can be most of the wall-clock time."""
    user = get_user_model().objects.get(username="engineer03")
    client = Client(SERVER_NAME="localhost")
    client.force_login(user)
    url = reverse("experiments:list")
    client.get(url)  # the first view of all also records the user's visit (two more queries)
    results = []
    for name, params in _urls(user, Experiment.objects.count()).items():
        first_page = {key: value for key, value in params.items() if key != "page"}
        counts = {size: _queries(client, url, first_page | {"per_page": size}) for size in (20, 100)}
        assert counts[20] == counts[100], counts
        times, cpu = [], []
        for _ in range(gets):
            start, start_cpu = time.perf_counter(), time.process_time()
            response = client.get(url, params)
            times.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - start_cpu) * 1000)
        content = response.content.decode()
        assert response.status_code == 200, re.findall(r"<li><strong>.*?</li>", content)
        found = re.search(r"([\d,]+) experiments?\.", content)
        matches = found.group(1) if found else "0"  # a small seed may have none
        results.append((name, statistics.median(times), statistics.median(cpu), counts[20], matches))
    return results


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the database (and reuse it next time)")
    parser.add_argument("--experiments", type=int, default=EXPERIMENTS)
    parser.add_argument(
        "--request-rows", type=int, default=0, help="per-request rows to add (scripts/bench_request_rows.py)"
    )
    parser.add_argument("--database", default=DATABASE)
    parser.add_argument("--gets", type=int, default=GETS, help="timed GETs of each URL")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    connection.settings_dict["TEST"]["NAME"] = args.database
    original = connection.settings_dict["NAME"]
    # serialize=False: the test runner's copy of every row would read all the request rows.
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=args.keep, serialize=False)
    try:
        run(args)
    finally:
        if not args.keep:
            connection.creation.destroy_test_db(original, verbosity=0)


def run(args) -> None:
    """Seed what the current database lacks, then time the list and print the figures."""
    if not Experiment.objects.exists():
        print(f"seeding {args.experiments:,} experiments into {connection.settings_dict['NAME']} …", flush=True)
        start = time.perf_counter()
        seed(args.experiments)
        print(f"seeded in {time.perf_counter() - start:.0f} s", flush=True)
    missing = args.request_rows - bench_request_rows.rows_in_table()
    if missing > 0:
        bench_request_rows.report(bench_request_rows.seed_request_rows(missing))
    total, rows = Experiment.objects.count(), bench_request_rows.rows_in_table()
    print(f"history page over {total:,} experiments and {rows:,} request rows, median of {args.gets} GETs each:")
    results = time_list(args.gets)
    for name, wall, cpu, queries, matches in results:
        print(f"  {name:40} {wall:6.1f} ms (CPU {cpu:5.1f})  {queries} queries, 20 or 100 a page  {matches} match")
    print(f"median of the medians: {statistics.median(r[1] for r in results):.1f} ms (target 100 ms)")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
