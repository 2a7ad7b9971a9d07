"""How the runs went: a Run per arm, concurrency level and block, with the worker that holds
it and its heartbeat; what the worker ingests from it (RunSummary, one RequestRecord per
measured request, the EnvironmentSnapshot of its host); and the ProfiledInterval of an arm
run under vLLM's torch profiler, which is no Run and no measurement. The worker writes these
rows; analysis, results and review read them."""

from typing import Self

from django.contrib.postgres.fields import ArrayField
from django.db import models

from experiments.measurement.engine import stream_fidelity
from experiments.measurement.engine.host_load import foreign_load
from experiments.models.arm import Arm
from experiments.models.definition import Experiment
from experiments.models.fields import PackedArrayField


class RunQuerySet(models.QuerySet):
    def open(self) -> Self:
        """Runs not done yet: queued, or running on a worker."""
        return self.filter(status__in=Run.OPEN_STATUSES)

    def succeeded(self) -> Self:
        return self.filter(status=Run.Status.SUCCEEDED)

    def real(self) -> Self:
        """Runs that measure their arm: all but a synthetic acceptance sweep's."""
        return self.filter(synthetic_acceptance_length__isnull=True)

    def synthetic(self) -> Self:
        """Runs of an arm's synthetic acceptance sweep: never part of the arm's statistics."""
        return self.filter(synthetic_acceptance_length__isnull=False)

    def in_execution_order(self, *, server_per_block: bool) -> Self:
        """The order the worker runs them in (experiments/measurement/planning/schedule.py): block by block, each
        block's arms in their drawn order; with one server per arm, arm by arm."""
        if server_per_block:
            return self.order_by("repetition", "block_position", "level_position", "id")
        return self.order_by("block_position", "repetition", "level_position", "id")


class Run(models.Model):
    """One arm at one concurrency level in one repetition (block).

    In each block every arm runs once, on a server of its own, the arms in a random order
    (block_position, 1-based) and the levels in an order shared by the arms of the block
    (level_position, 1-based): see services.experiment_schedule."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        SUCCEEDED = "succeeded", "Succeeded"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    OPEN_STATUSES = (Status.QUEUED, Status.RUNNING)

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="runs")
    arm = models.ForeignKey(Arm, on_delete=models.CASCADE, related_name="runs")
    concurrency = models.PositiveIntegerField()
    repetition = models.PositiveSmallIntegerField(help_text="The block, 1-based.")
    block_position = models.PositiveSmallIntegerField(default=1, help_text="The arm's place in its block's order.")
    level_position = models.PositiveSmallIntegerField(default=1, help_text="The level's place on the arm's server.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    worker_host = models.CharField(max_length=255, blank=True)
    # Several workers share a host (one per GPU), so the host alone does not say which one
    # executed the run: the Celery node name does (queue-N@host, unique in the fleet).
    worker_name = models.CharField(max_length=255, blank=True, help_text="Celery node name of the worker that ran it.")
    attempts = models.PositiveSmallIntegerField(default=0)
    requests_done = models.PositiveIntegerField(default=0)
    requests_total = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    synthetic_acceptance_length = models.FloatField(
        null=True,
        blank=True,
        help_text="Set on a run of the arm's synthetic acceptance sweep: vLLM accepted drafts at random to give "
        "this mean acceptance length. Such a run is not a measurement of the arm.",
    )
    # Device time (experiments/analysis/device_time.py): the seconds its vLLM server took from launch
    # to answering /health, on the first run of each server session; null on the others. A run claimed
    # again after its server died carries both servers' starts (execution.services.run_claim).
    server_start_s = models.FloatField(
        null=True, blank=True, help_text="Seconds its server took to start, on the first run a server ran."
    )

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["arm__position", "repetition", "concurrency", "synthetic_acceptance_length"]
        constraints = [
            models.UniqueConstraint(
                fields=["arm", "concurrency", "repetition", "synthetic_acceptance_length"],
                name="run_unique_cell",
                nulls_distinct=False,
            ),
        ]
        indexes = [
            models.Index(fields=["status", "heartbeat_at"], name="run_status_heartbeat_idx"),
        ]

    def __str__(self):
        synthetic = (
            "" if self.synthetic_acceptance_length is None else f" synthetic τ={self.synthetic_acceptance_length:g}"
        )
        return f"{self.arm}{synthetic} @ {self.concurrency} #{self.repetition}"


class RunSummaryQuerySet(models.QuerySet):
    def succeeded_of(self, experiment: "Experiment") -> Self:
        """The summaries of an experiment's succeeded real runs: what results and analysis
        read. A synthetic acceptance sweep's runs are left out (synthetic_sweep_of)."""
        return self.filter(
            run__experiment=experiment, run__status=Run.Status.SUCCEEDED, run__synthetic_acceptance_length__isnull=True
        )

    def synthetic_sweep_of(self, experiment: "Experiment") -> Self:
        """The summaries of an experiment's succeeded synthetic acceptance runs."""
        return self.filter(
            run__experiment=experiment, run__status=Run.Status.SUCCEEDED, run__synthetic_acceptance_length__isnull=False
        )


class RunSummary(models.Model):
    """Aggregates of one run's measured requests, written in the same transaction as its rows."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="summary")
    duration_s = models.FloatField()
    completed = models.PositiveIntegerField()
    failed = models.PositiveIntegerField()
    total_input_tokens = models.PositiveBigIntegerField()
    total_output_tokens = models.PositiveBigIntegerField()
    request_throughput = models.FloatField()
    output_throughput = models.FloatField()
    goodput = models.FloatField(null=True, blank=True)
    achieved_concurrency = models.FloatField(
        null=True, help_text="Sum of the requests' E2E latencies / measured duration."
    )

    ttft_mean_ms = models.FloatField(null=True)
    ttft_p50_ms = models.FloatField(null=True)
    ttft_p90_ms = models.FloatField(null=True)
    ttft_p99_ms = models.FloatField(null=True)
    tpot_mean_ms = models.FloatField(null=True)
    tpot_p50_ms = models.FloatField(null=True)
    tpot_p90_ms = models.FloatField(null=True)
    tpot_p99_ms = models.FloatField(null=True)
    itl_mean_ms = models.FloatField(null=True)
    itl_p50_ms = models.FloatField(null=True)
    itl_p90_ms = models.FloatField(null=True)
    itl_p99_ms = models.FloatField(null=True)
    e2e_mean_ms = models.FloatField(null=True)
    e2e_p50_ms = models.FloatField(null=True)
    e2e_p90_ms = models.FloatField(null=True)
    e2e_p99_ms = models.FloatField(null=True)
    tokens_per_chunk_mean = models.FloatField(null=True)
    # TPOT as the engine timed it (RequestRecord.server_tpot_ms): what speculation changes.
    server_tpot_mean_ms = models.FloatField(null=True)
    server_tpot_p50_ms = models.FloatField(null=True)
    server_tpot_p90_ms = models.FloatField(null=True)
    server_tpot_p99_ms = models.FloatField(null=True)

    # Whether the client saw the stream as the engine made it (experiments/measurement/engine/stream_fidelity.py);
    # null on runs recorded before the engine's times were.
    stream_checked = models.PositiveIntegerField(
        null=True, help_text="Requests whose stream could be compared with the engine's timing."
    )
    stream_distorted = models.PositiveIntegerField(
        null=True, help_text="Checked requests whose client decode span was off the engine's decode time."
    )
    stream_stalled = models.PositiveIntegerField(
        null=True, help_text="Checked requests that waited longer than 5 engine steps for a chunk or the first token."
    )
    stream_bursts = models.PositiveIntegerField(
        null=True, help_text="Checked requests whose client decode span was under a fifth of the engine's."
    )
    stream_late_first_tokens = models.PositiveIntegerField(
        null=True, help_text="Checked requests whose first token came over 5 engine steps after the engine made it."
    )
    stream_span_ratio_p50 = models.FloatField(
        null=True, help_text="Median over the checked requests of client decode span / engine decode time."
    )
    stream_span_ratio_p05 = models.FloatField(null=True, help_text="5th percentile of the same ratio.")

    # Differences of vLLM's cumulative /metrics counters across the measured interval.
    spec_num_drafts = models.PositiveBigIntegerField(null=True)
    spec_num_draft_tokens = models.PositiveBigIntegerField(null=True)
    spec_num_accepted_tokens = models.PositiveBigIntegerField(null=True)
    spec_accepted_per_pos = ArrayField(models.PositiveBigIntegerField(), null=True)

    # vLLM's capacity figures over the measured interval (experiments/measurement/engine/prom.py); null on runs
    # recorded before they were measured, or when /metrics could not be read.
    capacity_samples = models.PositiveIntegerField(
        null=True, help_text="Readings of /metrics taken while the measured requests ran."
    )
    kv_cache_usage_peak = models.FloatField(null=True, help_text="Highest KV-cache usage sampled (1 = full).")
    kv_cache_usage_mean = models.FloatField(null=True, help_text="Mean of the KV-cache usage samples (1 = full).")
    requests_running_max = models.PositiveIntegerField(null=True, help_text="Most requests sampled in the batch.")
    requests_waiting_max = models.PositiveIntegerField(null=True, help_text="Most requests sampled waiting.")
    preemptions = models.PositiveBigIntegerField(
        null=True, help_text="Difference of vLLM's preemption counter across the measured interval."
    )

    # The host's state over the run (experiments/measurement/engine/host_load.py, read from /proc by
    # workers/host/host_load.py); null on runs recorded before it was, or off Linux.
    host_foreign_cpu = models.FloatField(
        null=True,
        blank=True,
        help_text="Share of the host's CPU time other processes took during the run (1 = every core).",
    )
    host_steal = models.FloatField(
        null=True, blank=True, help_text="Share of the host's CPU time stolen by the hypervisor."
    )
    host_load = models.FloatField(null=True, blank=True, help_text="The host's 1-minute load average at the run's end.")
    host_cores = models.PositiveIntegerField(null=True, blank=True, help_text="The host's online CPUs.")
    host_memory_stall = models.FloatField(
        null=True, blank=True, help_text="Share of the run's time some task waited for memory (pressure stall)."
    )
    host_gpu_foreign = models.FloatField(
        null=True,
        blank=True,
        help_text="GPU utilisation by other processes at the run's end (1 = busy); null without a GPU.",
    )

    objects = RunSummaryQuerySet.as_manager()

    def __str__(self):
        return f"summary of {self.run}"

    @property
    def host_flagged(self) -> bool:
        """The run shared its host with other work (experiments/measurement/engine/host_load.py)."""
        return foreign_load(self.host_foreign_cpu, self.host_steal, self.host_gpu_foreign)

    @property
    def stream_flagged(self) -> bool:
        """Too many distorted streams for the client's TTFT and TPOT to get a verdict."""
        return stream_fidelity.run_flagged(self.stream_checked, self.stream_distorted)

    @property
    def acceptance_rate(self) -> float | None:
        if not self.spec_num_draft_tokens or self.spec_num_accepted_tokens is None:
            return None
        return self.spec_num_accepted_tokens / self.spec_num_draft_tokens

    @property
    def acceptance_length(self) -> float | None:
        if not self.spec_num_drafts or self.spec_num_accepted_tokens is None:
            return None
        return 1 + self.spec_num_accepted_tokens / self.spec_num_drafts


class RequestRecordQuerySet(models.QuerySet):
    def succeeded_of(self, experiment: "Experiment") -> Self:
        """The requests without error of an experiment's succeeded real runs: what the
        statistics read. A synthetic acceptance sweep's requests are left out."""
        return self.filter(
            run__experiment=experiment,
            run__status=Run.Status.SUCCEEDED,
            run__synthetic_acceptance_length__isnull=True,
            error="",
        )


class RequestRecord(models.Model):
    """One measured request; warm-up requests are not stored."""

    # No index of its own: the unique (run, prompt_index) index below starts with the run and
    # serves every lookup by run; a second index only slowed ingestion (docs/benchmarks.md).
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="requests", db_index=False)
    prompt_index = models.PositiveIntegerField()
    input_tokens = models.PositiveIntegerField()
    output_tokens = models.PositiveIntegerField()
    sent_at_s = models.FloatField(help_text="Seconds from the start of the measured interval.")
    ttft_ms = models.FloatField(null=True)
    e2e_ms = models.FloatField(null=True)
    tpot_ms = models.FloatField(null=True, help_text="(E2E - TTFT) / (output tokens - 1); empty for one token.")
    # The four lists and the output token ids are stored packed (experiments/measurement/encoding/packed.py): PostgreSQL
    # copies bytes where an array column parsed every element, which made ingestion slow
    # (docs/benchmarks.md). The ORM reads them back as lists.
    chunk_times_ms = PackedArrayField(
        element="float64", default=list, help_text="Arrival of each content chunk after send."
    )
    chunk_tokens = PackedArrayField(element="uint32", default=list)
    finish_reason = models.CharField(max_length=32, blank=True)
    error = models.TextField(blank=True)
    spec_acceptance_length = models.FloatField(null=True)
    spec_accepted_per_step = PackedArrayField(element="uint16", null=True)
    spec_proposed_per_step = PackedArrayField(element="uint16", null=True)
    # The output's token ids as unsigned 32-bit little-endian integers (experiments/measurement/encoding/token_ids.py):
    # enough to tell whether an arm's output equals the baseline's, and where it first differs.
    output_token_ids = models.BinaryField(null=True)
    queue_ms = models.FloatField(
        null=True, help_text="Time the request waited in the client for a free slot after its Poisson arrival."
    )
    server_decode_ms = models.FloatField(
        null=True,
        help_text=(
            "vLLM's generation_time_ms: the engine's time from the request's first output token to its last, "
            "timed where the steps run, so a client that reads the stream late does not shorten it."
        ),
    )
    server_ttft_ms = models.FloatField(
        null=True, help_text="vLLM's time_to_first_token_ms: from the request's scheduling to its first token."
    )
    server_queue_ms = models.FloatField(
        null=True, help_text="vLLM's queue_time_ms: from the request's arrival in the engine to its scheduling."
    )
    server_tpot_ms = models.FloatField(
        null=True, help_text="server_decode_ms / (output tokens - 1): TPOT as the engine timed it."
    )
    stream_span_ratio = models.FloatField(
        null=True,
        help_text="Client decode span (last chunk - first chunk) / server_decode_ms; 1 when the stream kept pace.",
    )
    stream_longest_wait_steps = models.FloatField(
        null=True,
        help_text="Longest wait for a chunk (or for the first token beyond the engine's account), in engine steps.",
    )

    objects = RequestRecordQuerySet.as_manager()

    class Meta:
        # One row per prompt of a run: a run stored twice (a re-delivered task, a result
        # written from the worker's spool after a database outage) can never duplicate rows.
        constraints = [models.UniqueConstraint(fields=["run", "prompt_index"], name="request_run_prompt_unique")]

    def __str__(self):
        return f"request {self.prompt_index} of {self.run}"

    @property
    def succeeded(self) -> bool:
        return not self.error


class ProfiledInterval(models.Model):
    """A short extra interval of one arm at one level, run under vLLM's torch profiler on the
    server of the arm's last block, after its measured runs. Not a Run: the profiler slows
    the engine, so its requests are not stored and no latency, throughput or verdict reads
    it. What it gives is where a step's time goes (experiments/measurement/engine/trace_shares.py)."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="profiled_intervals")
    arm = models.ForeignKey(Arm, on_delete=models.CASCADE, related_name="profiled_intervals")
    concurrency = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    worker_host = models.CharField(max_length=255, blank=True)
    requests = models.PositiveIntegerField(help_text="Requests sent while the profiler ran.")
    completed = models.PositiveIntegerField(default=0)
    duration_s = models.FloatField(null=True)
    trace_path = models.CharField(
        max_length=500, blank=True, help_text="The gzipped trace on the worker host, relative to its data folder."
    )
    trace_bytes = models.PositiveBigIntegerField(null=True)
    steps = models.PositiveIntegerField(null=True, help_text="Engine steps found in the trace.")
    profiled_ms = models.FloatField(
        null=True, help_text="From the first step's start to the last one's end: the shares' denominator."
    )
    share_proposing = models.FloatField(null=True)
    share_verifying = models.FloatField(null=True)
    share_sampling = models.FloatField(null=True)
    share_other = models.FloatField(null=True)
    top_events = models.JSONField(default=list, blank=True, help_text="[share, name] of the heaviest event names.")
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["arm__position", "concurrency"]
        constraints = [
            models.UniqueConstraint(fields=["arm", "concurrency"], name="profiled_interval_unique_cell"),
        ]

    def __str__(self):
        return f"profiled {self.arm} @ {self.concurrency}"


class EnvironmentSnapshot(models.Model):
    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="environment")
    captured_at = models.DateTimeField(auto_now_add=True)
    host_name = models.CharField(max_length=255)
    cpu_model = models.CharField(max_length=255, blank=True)
    cpu_count = models.PositiveIntegerField(null=True)
    gpu_name = models.CharField(max_length=255, blank=True)
    gpu_count = models.PositiveIntegerField(default=0)
    gpu_memory_mb = models.PositiveIntegerField(null=True)
    gpu_driver = models.CharField(max_length=64, blank=True)
    cuda_version = models.CharField(max_length=64, blank=True)
    vllm_version = models.CharField(max_length=64, blank=True)
    torch_version = models.CharField(max_length=64, blank=True)
    python_version = models.CharField(max_length=64, blank=True)
    server_command = ArrayField(models.TextField(), default=list)
    # Which cores the engine's threads and the load generator were bound to, and the
    # environment variables that set it (workers/server/affinity.py); empty on GPU hosts.
    cpu_binding = models.JSONField(default=dict, blank=True)
    # What vLLM decided for the run's server, as its log said (workers/server/engine_report.py);
    # blank or null where the log did not say, and on runs recorded before it was read.
    model_runner = models.CharField(max_length=8, blank=True, help_text="vLLM's model runner: V1 or V2.")
    async_scheduling = models.BooleanField(null=True, help_text="Whether vLLM scheduled asynchronously.")
    cuda_graphs = models.CharField(
        max_length=32, blank=True, help_text="off, or the CUDA graph mode vLLM captured (FULL_AND_PIECEWISE, ...)."
    )
    kv_cache_tokens = models.PositiveBigIntegerField(null=True, help_text="The KV cache's size in tokens.")
    engine_log_lines = models.JSONField(
        default=dict, blank=True, help_text="Per field above, the line of vLLM's log it was read from."
    )

    def __str__(self):
        return f"environment of {self.run}"
