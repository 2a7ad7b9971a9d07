"""Write one run's measured requests and summary to PostgreSQL, in one transaction.

Request rows go in with binary COPY, encoded by workers/storage/request_copy.py. Writing the same
run again replaces its rows, so a run that is retried is never recorded twice.
"""

from array import array

import numpy as np
from django.db import connection, transaction

from experiments.measurement.encoding.packed import FLOAT64, UINT32, Packing, pack, unpack_many
from experiments.measurement.engine import capacity, stream_fidelity
from experiments.measurement.engine.host_load import HostState
from experiments.measurement.engine.prom import SpecCounters
from experiments.measurement.stats import latency
from experiments.models import EnvironmentSnapshot, Experiment, RequestRecord, RunSummary
from workers.measure.loadgen import LoadResult, RequestResult
from workers.storage.request_copy import copy_buffer

REQUEST_COLUMNS = (
    "run_id",
    "prompt_index",
    "input_tokens",
    "output_tokens",
    "sent_at_s",
    "ttft_ms",
    "e2e_ms",
    "tpot_ms",
    "chunk_times_ms",
    "chunk_tokens",
    "finish_reason",
    "error",
    "spec_acceptance_length",
    "spec_accepted_per_step",
    "spec_proposed_per_step",
    "output_token_ids",
    "queue_ms",
    "server_decode_ms",
    "server_ttft_ms",
    "server_queue_ms",
    "server_tpot_ms",
    "stream_span_ratio",
    "stream_longest_wait_steps",
)


def _copy_requests(run_id: int, requests: list[RequestResult]) -> None:
    table = RequestRecord._meta.db_table
    sql = f"COPY {table} ({', '.join(REQUEST_COLUMNS)}) FROM STDIN WITH (FORMAT BINARY)"
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        copy.write(copy_buffer(run_id, requests))


def meets_slos(r: RequestResult, experiment: Experiment) -> bool:
    """A request counts toward goodput when it succeeded and met every SLO that is set.

    A one-token output has no TPOT; like vLLM's benchmark, it counts as 0 there (it
    cannot have been slow between tokens it did not produce)."""
    if r.error:
        return False
    limits = (
        (experiment.slo_ttft_ms, r.ttft_ms),
        (experiment.slo_tpot_ms, 0.0 if r.tpot_ms is None else r.tpot_ms),
        (experiment.slo_e2e_ms, r.e2e_ms),
    )
    return all(value is not None and value <= limit for limit, value in limits if limit is not None)


def _latency_fields(prefix: str, values: list[float]) -> dict:
    summary = latency.summarise(values) or {"mean": None, "p50": None, "p90": None, "p99": None}
    return {f"{prefix}_{key}_ms": summary[key] for key in ("mean", "p50", "p90", "p99")}


def summary_fields(load: LoadResult, counters: SpecCounters, experiment: Experiment) -> dict:
    """The RunSummary columns, computed from the measured requests and counter differences."""
    ok = [r for r in load.requests if not r.error]
    duration = load.duration_s
    busy_s = sum(r.e2e_ms for r in ok if r.e2e_ms is not None) / 1000.0
    times, tokens = _chunks(ok)
    fields = {
        "duration_s": duration,
        "completed": len(ok),
        "failed": len(load.requests) - len(ok),
        "total_input_tokens": sum(r.input_tokens for r in ok),
        "total_output_tokens": sum(r.output_tokens for r in ok),
        "request_throughput": len(ok) / duration if duration > 0 else 0.0,
        "output_throughput": sum(r.output_tokens for r in ok) / duration if duration > 0 else 0.0,
        "goodput": None,
        "achieved_concurrency": busy_s / duration if duration > 0 else None,
        "tokens_per_chunk_mean": latency.decode_tokens_per_chunk(*tokens),
        "spec_num_drafts": counters.num_drafts,
        "spec_num_draft_tokens": counters.num_draft_tokens,
        "spec_num_accepted_tokens": counters.num_accepted_tokens,
        "spec_accepted_per_pos": list(counters.accepted_per_pos),
    } | capacity.stored_columns(load.capacity)
    if experiment.has_slos and duration > 0:
        fields["goodput"] = sum(meets_slos(r, experiment) for r in load.requests) / duration
    fields |= _latency_fields("ttft", [r.ttft_ms for r in ok if r.ttft_ms is not None])
    fields |= _latency_fields("tpot", [r.tpot_ms for r in ok if r.tpot_ms is not None])
    fields |= {f"itl_{key}_ms": value for key, value in latency.summarise_array(latency.itl_ms(*times)).items()}
    fields |= _latency_fields("e2e", [r.e2e_ms for r in ok if r.e2e_ms is not None])
    fields |= _latency_fields("server_tpot", [r.server_tpot_ms for r in ok if r.server_tpot_ms is not None])
    return fields | stream_fields([r.stream for r in ok]) | host_fields(load.host)


def host_fields(state: HostState | None) -> dict:
    """The RunSummary's host columns (null where the host was not read)."""
    if state is None:
        return {}
    return {
        "host_foreign_cpu": state.foreign_cpu, "host_steal": state.steal, "host_load": state.load,
        "host_cores": state.cores, "host_memory_stall": state.memory_stall, "host_gpu_foreign": state.gpu_foreign,
    }  # fmt: skip


def stream_fields(checks: list[stream_fidelity.StreamCheck]) -> dict:
    """The stream columns: how many requests could be checked and how many were distorted."""
    summary = stream_fidelity.run_stream(checks)
    return {
        "stream_checked": summary.checked,
        "stream_distorted": summary.distorted,
        "stream_stalled": summary.stalled,
        "stream_bursts": summary.bursts,
        "stream_late_first_tokens": summary.late_first_tokens,
        "stream_span_ratio_p50": summary.span_ratio_p50,
        "stream_span_ratio_p05": summary.span_ratio_p05,
    }


def _chunks(ok: list[RequestResult]) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The requests' chunk times and chunk tokens, each as (all values, where each request's begin)."""
    times = unpack_many((_packed(r.chunk_times_ms, FLOAT64) for r in ok), FLOAT64)
    tokens = unpack_many((_packed(r.chunk_tokens, UINT32) for r in ok), UINT32)
    return times, tokens


def _packed(values: "array[float] | array[int]", packing: Packing) -> bytes:
    packed = pack(values, packing)
    assert packed is not None  # pack returns None only for None
    return packed


@transaction.atomic
def ingest_run(
    *, run_id: int, load: LoadResult, counters: SpecCounters, environment: dict, experiment: Experiment
) -> RunSummary:
    RequestRecord.objects.filter(run_id=run_id).delete()
    RunSummary.objects.filter(run_id=run_id).delete()
    EnvironmentSnapshot.objects.filter(run_id=run_id).delete()
    _copy_requests(run_id, load.requests)
    EnvironmentSnapshot.objects.create(run_id=run_id, **environment)
    return RunSummary.objects.create(run_id=run_id, **summary_fields(load, counters, experiment))
