"""A database of 10,000 experiments over 18 months, seeded with COPY, for the history page's
benchmark (history.py): 24 owners, four worker queues with their hardware and vLLM versions,
each experiment with a baseline, one to three speculative arms and (half of them) an A/A
replicate, two to six concurrency levels, one to five blocks, every run with its summary and
environment snapshot, and the stored speedups of every compared arm, level and metric with
their verdict words; and 20 services' decisions (final, superseded and proposed) citing some
of them. Per-request rows are left out: the history never reads them.
"""

import math
import random
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User
from django.db import connection, models
from django.db.models import Field

from experiments import teams
from experiments.measurement.stats import verdicts
from experiments.models import (
    Arm,
    Decision,
    DecisionEvidence,
    EnvironmentSnapshot,
    Experiment,
    Run,
    RunSummary,
    SpeedupEstimate,
)

Row = dict[str, object]

EXPERIMENTS = 10_000
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
ARM_CHOICES: list[tuple[str, int, dict[str, object], float]] = [
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


class Table:
    """Rows for one model's table, written with COPY in the order of its concrete fields;
    a field a row leaves out gets the field's default."""

    def __init__(self, model: type[models.Model]) -> None:
        self.model = model
        self.fields = list(model._meta.concrete_fields)
        self.rows: list[Row] = []

    def add(self, **values: object) -> None:
        self.rows.append(values)

    def _value(self, field: "Field[Any, Any]", row: Row) -> object:
        value = row[field.attname] if field.attname in row else field.get_default()
        return field.get_db_prep_save(value, connection) if field.get_internal_type() == "JSONField" else value

    def copy(self, cursor: psycopg.Cursor[Any]) -> int:
        columns = ", ".join(connection.ops.quote_name(f.attname if f.column is None else f.column) for f in self.fields)
        with cursor.copy(f"COPY {self.model._meta.db_table} ({columns}) FROM STDIN") as copy:
            for row in self.rows:
                copy.write_row([self._value(field, row) for field in self.fields])
        return len(self.rows)


Tables = dict[type[models.Model], Table]
Counters = dict[type[models.Model], Iterator[int]]
Citable = tuple[int, int, dict[str, object], int]  # experiment id, speculative arm id, its config, highest level


def _speedup_rows(rng: random.Random, table: Table, *, ids: Iterator[int], experiment_id: int, arm_id: int,
                  levels: list[int], blocks: int, base_gain: float, margin: float) -> None:  # fmt: skip
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


def _summary(rng: random.Random, *, run_id: int, level: int, speed: float) -> Row:
    """A run's summary: latencies grow with the batch; `speed` is the arm's gain."""
    tpot = 12 * (1 + math.log2(level) * 0.4) / speed * rng.uniform(0.95, 1.05)
    ttft = 40 * (1 + level / 16) * rng.uniform(0.9, 1.1)
    e2e = ttft + tpot * 255
    duration = 200 * e2e / 1000 / level
    row: Row = {"id": run_id, "run_id": run_id, "duration_s": duration, "completed": 200, "failed": 0}
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
    tables: Tables = {model: Table(model) for model in models}
    counters: Counters = {model: iter(range(1, 10**9)) for model in tables}
    now = datetime.now(UTC)
    decidable: list[Citable] = []
    for index in range(n_experiments):
        decidable += _seed_experiment(rng, tables, counters, users, now, index / n_experiments)
    _seed_decisions(rng, tables, counters, users, decidable, now)
    # One team, as an install without teams has: the users joined it when created.
    team_id = teams.default_team().id
    for owned in (Experiment, Decision):
        for row in tables[owned].rows:
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


def _seed_experiment(rng: random.Random, tables: Tables, counters: Counters, users: list[User], now: datetime,
                     age: float) -> list[Citable]:  # fmt: skip
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
    arms: list[tuple[str, str, int | None, dict[str, object], float, bool]] = [
        ("baseline", Arm.Method.BASELINE, None, {}, 1.0, False)
    ]
    if replicate:
        arms.append(("baseline replicate (A/A)", Arm.Method.BASELINE, None, {}, 1.0, True))
    for choice, draft_tokens, choice_params, choice_gain in rng.sample(ARM_CHOICES, rng.randint(1, 3)):
        arms.append(
            (f"{Arm.Method(choice).label} k={draft_tokens}", choice, draft_tokens, choice_params, choice_gain, False)
        )
    decidable: list[Citable] = []
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


def _seed_decisions(rng: random.Random, tables: Tables, counters: Counters, users: list[User],
                    decidable: list[Citable], now: datetime) -> None:  # fmt: skip
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


def _seed_runs(rng: random.Random, tables: Tables, counters: Counters, experiment_id: int, arm_id: int,
               levels: list[int], blocks: int, position: int, gain: float, status: str, queue: str,
               version: str) -> None:  # fmt: skip
    gpu_name, gpu_count, cpu_model, _ = QUEUES[queue]
    run_status: str = {
        Experiment.Status.FINISHED.value: Run.Status.SUCCEEDED,
        Experiment.Status.FAILED.value: Run.Status.FAILED,
        Experiment.Status.CANCELLED.value: Run.Status.CANCELLED,
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
