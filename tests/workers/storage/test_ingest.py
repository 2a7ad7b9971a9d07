from datetime import UTC, datetime

import pytest

from experiments.measurement.encoding.packed import FLOAT64, UINT32
from experiments.measurement.encoding.token_ids import pack_token_ids, unpack_token_ids
from experiments.measurement.engine.prom import SpecCounters
from experiments.models import EnvironmentSnapshot, RequestRecord, Run, RunSummary
from tests.factories import RunFactory
from workers.measure.loadgen import LoadResult, RequestResult, finalise
from workers.server.engine_report import EngineReport
from workers.storage import spool
from workers.storage.ingest import ingest_run, meets_slos, summary_fields

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ENVIRONMENT = {"host_name": "gpu-1", "vllm_version": "0.32.0", "server_command": ["python", "-m", "vllm"]}


def _request(index, ttft, e2e, tokens, chunks, error=""):
    return RequestResult(
        prompt_index=index,
        input_tokens=10,
        output_tokens=tokens,
        ttft_ms=ttft,
        e2e_ms=e2e,
        tpot_ms=(e2e - ttft) / (tokens - 1) if tokens > 1 else None,
        chunk_times_ms=[t for t, _ in chunks],
        chunk_tokens=[n for _, n in chunks],
        finish_reason="length" if not error else "",
        error=error,
        spec_accepted_per_step=[2, 1] if not error else None,
        spec_proposed_per_step=[3, 3] if not error else None,
        output_token_ids=list(range(100 + index, 100 + index + tokens)),
        queue_ms=5.0 * index,
        server_decode_ms=None if error else 0.75 * (e2e - ttft),
    )


def _load():
    # Request 0: 5 tokens in chunks at 100 (1 token), 150 (2), 300 (2) ms -> TPOT (300-100)/4 = 50.
    # Request 1: 3 tokens at 200 (1), 400 (2) ms -> TPOT (400-200)/2 = 100.
    # Request 2 failed.
    return LoadResult(
        requests=[
            _request(0, 100.0, 300.0, 5, [(100.0, 1), (150.0, 2), (300.0, 2)]),
            _request(1, 200.0, 400.0, 3, [(200.0, 1), (400.0, 2)]),
            RequestResult(prompt_index=2, error="HTTP 500"),
        ],
        duration_s=2.0,
        started_at=NOW,
        finished_at=NOW,
    )


COUNTERS = SpecCounters(num_drafts=10, num_draft_tokens=30, num_accepted_tokens=12, accepted_per_pos=[6, 4, 2])


def test_summary_figures_match_a_hand_computed_case():
    run = RunFactory()
    run.experiment.slo_tpot_ms = 60.0
    fields = summary_fields(_load(), COUNTERS, run.experiment)
    assert (fields["completed"], fields["failed"]) == (2, 1)
    assert fields["total_output_tokens"] == 8
    assert fields["request_throughput"] == 1.0  # 2 completed / 2 s
    assert fields["output_throughput"] == 4.0  # 8 tokens / 2 s
    assert fields["goodput"] == 0.5  # only request 0 meets TPOT <= 60 ms
    assert fields["tpot_mean_ms"] == 75.0
    assert fields["tpot_p50_ms"] == 75.0
    assert fields["ttft_p50_ms"] == 150.0
    # ITL gaps: 50, 150 (request 0) and 200 (request 1): median 150, mean 133.33
    assert fields["itl_p50_ms"] == 150.0
    assert fields["itl_mean_ms"] == pytest.approx(400 / 3)
    # Decode chunks only, each request's first (prefill) chunk left out: 2, 2 and 2 tokens.
    assert fields["tokens_per_chunk_mean"] == pytest.approx(6 / 3)
    # E2E of the completed requests, 0.3 s + 0.4 s, over the 2 s measured.
    assert fields["achieved_concurrency"] == pytest.approx(0.35)
    assert fields["spec_accepted_per_pos"] == [6, 4, 2]


def test_ingest_writes_rows_with_copy_and_a_second_write_replaces_them():
    run = RunFactory()
    ingest_run(run_id=run.id, load=_load(), counters=COUNTERS, environment=ENVIRONMENT, experiment=run.experiment)
    ingest_run(run_id=run.id, load=_load(), counters=COUNTERS, environment=ENVIRONMENT, experiment=run.experiment)

    rows = list(RequestRecord.objects.filter(run=run).order_by("prompt_index"))
    assert len(rows) == 3
    assert rows[0].chunk_times_ms == [100.0, 150.0, 300.0]
    assert rows[0].chunk_tokens == [1, 2, 2]
    assert rows[0].spec_accepted_per_step == [2, 1]
    assert rows[0].tpot_ms == 50.0
    assert rows[2].error == "HTTP 500"
    assert rows[2].spec_accepted_per_step is None
    assert RunSummary.objects.filter(run=run).count() == 1
    summary = RunSummary.objects.get(run=run)
    assert summary.acceptance_length == pytest.approx(1 + 12 / 10)
    assert summary.acceptance_rate == pytest.approx(12 / 30)
    assert EnvironmentSnapshot.objects.get(run=run).server_command == ["python", "-m", "vllm"]


def test_token_ids_pack_as_uint32_little_endian():
    assert pack_token_ids([1, 256, 2**32 - 1]) == b"\x01\x00\x00\x00\x00\x01\x00\x00\xff\xff\xff\xff"
    assert pack_token_ids([]) == b""
    ids = [0, 7, 50_000, 151_935]
    assert unpack_token_ids(pack_token_ids(ids)) == ids
    assert unpack_token_ids(memoryview(pack_token_ids(ids))) == ids


def test_ingest_stores_output_token_ids_queue_time_and_the_engines_decode_time():
    run = RunFactory()
    ingest_run(run_id=run.id, load=_load(), counters=COUNTERS, environment=ENVIRONMENT, experiment=run.experiment)

    rows = list(RequestRecord.objects.filter(run=run).order_by("prompt_index"))
    assert unpack_token_ids(rows[0].output_token_ids) == [100, 101, 102, 103, 104]
    assert unpack_token_ids(rows[1].output_token_ids) == [101, 102, 103]
    assert unpack_token_ids(rows[2].output_token_ids) == []
    assert [row.queue_ms for row in rows] == [0.0, 5.0, None]
    assert [row.server_decode_ms for row in rows] == [150.0, 150.0, None]  # 0.75 × (300 − 100), 0.75 × (400 − 200)


def test_a_one_token_output_meets_a_tpot_slo():
    run = RunFactory()
    run.experiment.slo_tpot_ms = 10.0
    one_token = _request(0, 100.0, 100.0, 1, [(100.0, 1)])
    assert one_token.tpot_ms is None
    assert meets_slos(one_token, run.experiment)
    run.experiment.slo_ttft_ms = 50.0
    assert not meets_slos(one_token, run.experiment)  # the other SLOs still apply


def test_the_engines_timings_and_the_stream_checks_are_stored_and_summarised():
    # Three requests as the load generator finalises them: two whose streams kept pace with the
    # engine, one whose 5 tokens all arrived at once at 300 ms though the engine decoded them in 80.
    def finalised(index, times, decode_ms):
        result = RequestResult(
            prompt_index=index, input_tokens=10, output_tokens=len(times), chunk_times_ms=FLOAT64.new(times),
            chunk_tokens=UINT32.new([1] * len(times)), server_decode_ms=decode_ms, server_ttft_ms=20.0,
            server_queue_ms=1.0,
        )  # fmt: skip
        finalise(result)
        return result

    load = LoadResult(
        [finalised(0, [25.0, 45.0, 65.0, 85.0, 105.0], 80.0), finalised(1, [24.0, 44.0, 64.0], 40.0),
         finalised(2, [300.0] * 5, 80.0)],
        duration_s=1.0, started_at=NOW, finished_at=NOW,
    )  # fmt: skip
    run = RunFactory()
    ingest_run(run_id=run.id, load=load, counters=SpecCounters(), environment=ENVIRONMENT, experiment=run.experiment)
    rows = list(RequestRecord.objects.filter(run=run).order_by("prompt_index"))
    assert [r.server_tpot_ms for r in rows] == [20.0, 20.0, 20.0]  # 80 / 4, 40 / 2, 80 / 4
    assert [(r.server_ttft_ms, r.server_queue_ms) for r in rows] == [(20.0, 1.0)] * 3
    assert [r.stream_span_ratio for r in rows] == [1.0, 1.0, 0.0]
    # Request 2 waited 300 - 21 = 279 ms for its first token beyond the engine's account: 279 / 20 steps.
    assert [r.stream_longest_wait_steps for r in rows] == pytest.approx([1.0, 1.0, 279 / 20])
    summary = RunSummary.objects.get(run=run)
    assert (summary.stream_checked, summary.stream_distorted, summary.stream_stalled, summary.stream_bursts) == (
        3, 1, 1, 1,
    )  # fmt: skip
    assert summary.stream_span_ratio_p50 == 1.0
    assert summary.stream_flagged  # 1 of 3 distorted is over 5 %
    assert summary.server_tpot_p50_ms == 20.0


def _spooled(run, environment: dict) -> spool.SpooledRun:
    return spool.SpooledRun(run.id, run.experiment_id, _load(), COUNTERS, environment)


def test_what_vllm_decided_is_stored_with_the_runs_environment(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    run = RunFactory(status=Run.Status.RUNNING)
    report = EngineReport(
        model_runner="V2", async_scheduling=None, cuda_graphs="FULL_AND_PIECEWISE", kv_cache_tokens=1_234_560,
        evidence={"model_runner": "Using V2 Model Runner"},
    )  # fmt: skip
    path = spool.spool_write(_spooled(run, ENVIRONMENT | report.record()), worker_name="w")
    assert spool.spool_store(path, wait_s=0)
    snapshot = EnvironmentSnapshot.objects.get(run=run)
    assert (snapshot.model_runner, snapshot.async_scheduling, snapshot.cuda_graphs, snapshot.kv_cache_tokens) == (
        "V2", None, "FULL_AND_PIECEWISE", 1_234_560,
    )  # fmt: skip
    assert snapshot.engine_log_lines == {"model_runner": "Using V2 Model Runner"}


def test_a_run_spooled_before_vllms_decisions_were_read_is_stored_with_them_unknown(settings, tmp_path):
    """A spool file a worker wrote before the upgrade holds an environment without the keys."""
    settings.DATA_DIR = tmp_path
    run = RunFactory(status=Run.Status.RUNNING)
    path = spool.spool_write(_spooled(run, dict(ENVIRONMENT)), worker_name="w")
    assert spool.spool_store(path, wait_s=0)
    snapshot = EnvironmentSnapshot.objects.get(run=run)
    assert snapshot.host_name == "gpu-1"
    assert (snapshot.model_runner, snapshot.async_scheduling, snapshot.cuda_graphs, snapshot.kv_cache_tokens) == (
        "", None, "", None,
    )  # fmt: skip
    assert snapshot.engine_log_lines == {}
