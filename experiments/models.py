"""specdash tables: what an experiment asks for, how its runs went, and what they measured."""

from django.conf import settings
from django.contrib.auth.models import Group
from django.contrib.postgres.fields import ArrayField
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from experiments import stream_fidelity
from experiments.fields import PackedArrayField
from experiments.limits import MAX_SPECULATIVE_TOKENS
from experiments.teams import visible_q

# The most GPUs one server may span: a node of eight.
MAX_TENSOR_PARALLEL_SIZE = 8


class IllegalTransition(Exception):
    """A status change that the state machine does not allow."""


class TeamQuerySet(models.QuerySet):
    """Rows that belong to a team (experiments/teams.py)."""

    def visible_to(self, user) -> "TeamQuerySet":
        """What `user` may see: their teams' rows (every row for a superuser)."""
        return self.filter(visible_q(user))


def team_field() -> models.ForeignKey:
    return models.ForeignKey(Group, on_delete=models.PROTECT, related_name="+", help_text="Its members see it.")


class ExperimentQuerySet(TeamQuerySet):
    def active(self) -> "ExperimentQuerySet":
        """Experiments that still have work to do (queued or running)."""
        return self.filter(status__in=Experiment.ACTIVE_STATUSES)


class Experiment(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        FINISHED = "finished", "Finished"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    ACTIVE_STATUSES = (Status.QUEUED, Status.RUNNING)

    class WorkloadKind(models.TextChoices):
        BUILTIN = "builtin", "Built-in prompt set"
        UPLOADED = "uploaded", "Uploaded prompt set"
        SYNTHETIC = "synthetic", "Synthetic prompts (random tokens)"

    class OriginKind(models.TextChoices):
        RERUN = "rerun", "Re-run"
        CLONE = "clone", "Clone"

    class Endpoint(models.TextChoices):
        COMPLETIONS = "completions", "Completions (/v1/completions, raw prompts)"
        CHAT = "chat", "Chat (/v1/chat/completions, the model's chat template)"

    class Source(models.TextChoices):
        MEASURED = "measured", "Measured by specdash"
        IMPORTED = "imported", "Imported vllm bench serve results"

    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="experiments")
    team = team_field()
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)

    target_model = models.CharField(max_length=500, help_text="Local path on the worker, or a model id.")
    worker_queue = models.CharField(max_length=64, default="cpu")
    dtype = models.CharField(max_length=16, default="auto")
    max_model_len = models.PositiveIntegerField(default=512)
    # GPUs each of the experiment's vLLM servers spans (its --tensor-parallel-size); the worker
    # that takes the experiment must see at least this many (workers/runner.py).
    tensor_parallel_size = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(MAX_TENSOR_PARALLEL_SIZE)]
    )

    workload_kind = models.CharField(max_length=16, choices=WorkloadKind.choices, default=WorkloadKind.BUILTIN)
    prompt_set = models.CharField(max_length=64, blank=True)
    prompt_set_hash = models.CharField(max_length=64, blank=True)
    synthetic_input_len = models.PositiveIntegerField(null=True, blank=True)
    input_lengths = models.CharField(
        max_length=200,
        blank=True,
        help_text="Synthetic input-length distribution, e.g. 16-256 (experiments/input_lengths.py).",
    )
    uploaded_prompt_set = models.ForeignKey(
        "UploadedPromptSet", null=True, blank=True, on_delete=models.PROTECT, related_name="experiments"
    )
    endpoint = models.CharField(max_length=16, choices=Endpoint.choices, default=Endpoint.COMPLETIONS)
    num_prompts = models.PositiveIntegerField(help_text="Measured requests per concurrency level and repetition.")
    max_tokens = models.PositiveIntegerField(help_text="Output length asked for in each request.")
    ignore_eos = models.BooleanField(default=False)

    temperature = models.FloatField(default=0.0)
    top_p = models.FloatField(default=1.0)
    seed = models.IntegerField(default=0)

    concurrency_levels = ArrayField(models.PositiveIntegerField())
    repetitions = models.PositiveSmallIntegerField(
        default=3, help_text="Blocks: in each, every arm runs once, on its own server, in a random order."
    )
    server_per_block = models.BooleanField(
        default=True,
        help_text="Start a fresh vLLM server for every arm in every block. Off: one server per arm for all "
        "blocks, which saves start-up time but leaves the variance between server starts out of the intervals.",
    )
    aa_replicate = models.BooleanField(
        default=False, help_text="Run the baseline twice; the second copy's 'speedup' measures the noise floor."
    )
    draft_calibration = models.BooleanField(
        default=False,
        help_text="Serve each draft-model arm's draft model alone, as a plain server at the same levels with the "
        "same workload: its step time over the baseline's is the cost ratio c of the predicted speedup.",
    )
    equivalence_margin = models.FloatField(
        default=0.02, help_text="Smallest speedup worth acting on, as a fraction (0.02 = 2 %)."
    )
    warmup_requests = models.PositiveSmallIntegerField(default=2)
    profile_intervals = models.BooleanField(
        default=False,
        help_text="After each arm's measured runs, one short extra interval per level under vLLM's torch "
        "profiler (experiments/profiles.py); left out of every statistic.",
    )
    request_rate = models.FloatField(
        null=True,
        blank=True,
        help_text="Poisson arrival rate in requests/s; empty sends as fast as concurrency allows.",
    )

    slo_ttft_ms = models.FloatField(null=True, blank=True)
    slo_tpot_ms = models.FloatField(null=True, blank=True)
    slo_e2e_ms = models.FloatField(null=True, blank=True)

    # What the runs recorded in their environment snapshots, copied here when the experiment
    # ends so that the history can filter and show them without reading every snapshot.
    # The runtime asked for. The worker does not enforce it yet: it runs the vLLM installed on
    # its host, which the runs' environment snapshots record (vllm_versions below).
    requested_vllm_version = models.CharField(max_length=64, blank=True)

    origin = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="descendants",
        help_text="The experiment this one re-runs or was cloned from.",
    )  # fmt: skip
    origin_kind = models.CharField(max_length=8, choices=OriginKind.choices, blank=True)
    cancelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    # Liveness (workers/liveness.py): a task is handed to the broker (dispatched_at; empty
    # while the broker cannot be reached), then one worker process holds the experiment
    # (lease_owner) and beats every second (lease_at). A stale beat means that process died.
    dispatched_at = models.DateTimeField(null=True, blank=True, help_text="When its task was last handed to Redis.")
    lease_owner = models.CharField(max_length=255, blank=True, help_text="host:pid:worker executing it.")
    lease_at = models.DateTimeField(null=True, blank=True, help_text="That worker process's last beat.")

    # An imported experiment (experiments/imports.py) is read-only: its runs are summaries
    # read from `vllm bench serve` result files, one per file, listed in imported_files.
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.MEASURED)
    imported_files = models.JSONField(default=list, blank=True, help_text="Each file imported: name, arm, level.")

    vllm_versions = ArrayField(
        models.CharField(max_length=64), default=list, blank=True, help_text="vLLM version(s) the runs ran on."
    )
    hardware = ArrayField(
        models.CharField(max_length=255), default=list, blank=True, help_text="Accelerator (or CPU) the runs ran on."
    )

    objects = ExperimentQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["-created_at"], name="experiment_created_idx"),
            models.Index(fields=["status", "-created_at"], name="experiment_status_idx"),
            # The history's sort by name and its choice lists (history.filter_choices).
            models.Index(fields=["name", "id"], name="experiment_name_idx"),
            models.Index(fields=["target_model"], name="experiment_model_idx"),
            models.Index(fields=["worker_queue"], name="experiment_queue_idx"),
            models.Index(fields=["hardware"], name="experiment_hardware_idx"),
            models.Index(fields=["vllm_versions"], name="experiment_vllm_idx"),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(repetitions__gte=1), name="experiment_repetitions_positive"),
            models.CheckConstraint(condition=Q(num_prompts__gte=1), name="experiment_num_prompts_positive"),
            models.CheckConstraint(
                condition=Q(equivalence_margin__gt=0, equivalence_margin__lt=1), name="experiment_margin_fraction"
            ),
        ]

    def __str__(self):
        return self.name

    @property
    def has_slos(self) -> bool:
        return bool(self.slo_labels)

    @property
    def slo_labels(self) -> list[str]:
        """The SLOs that are set, as the pages show them: e.g. "TPOT ≤ 50 ms"."""
        limits = (("TTFT", self.slo_ttft_ms), ("TPOT", self.slo_tpot_ms), ("E2E", self.slo_e2e_ms))
        return [f"{name} ≤ {limit:g} ms" for name, limit in limits if limit is not None]

    @property
    def is_imported(self) -> bool:
        return self.source == self.Source.IMPORTED

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE_STATUSES

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    def protocol_warnings(self) -> list[str]:
        """The benchmarking traps (README, "Metrics") that the settings alone walk into."""
        warnings = []
        if self.workload_kind == self.WorkloadKind.SYNTHETIC:
            warnings.append("Synthetic random-word prompts: acceptance on them says little about real traffic.")
        uploaded = self.uploaded_prompt_set if self.workload_kind == self.WorkloadKind.UPLOADED else None
        if uploaded is not None and uploaded.has_messages and self.endpoint == self.Endpoint.COMPLETIONS:
            warnings.append(
                "Chat messages were sent as their text to the completions endpoint, without the model's chat "
                "template: acceptance of drafts trained on chat-formatted text (EAGLE, MTP) is understated."
            )
        if self.ignore_eos:
            warnings.append("ignore_eos is on: outputs run past their natural end, which distorts acceptance.")
        if not self.is_greedy:
            warnings.append(f"Sampling at temperature {self.temperature:g}: not comparable with greedy results.")
        return warnings


class UploadedPromptSet(models.Model):
    """A prompt set a user uploaded (experiments/prompt_uploads.py reads the file): one version
    of a name, never edited; uploading other content under the name makes the next version."""

    class Format(models.TextChoices):
        PROMPTS = "prompts", "JSONL of prompts"
        CHAT = "chat", "JSONL of chat messages"
        SHAREGPT = "sharegpt", "ShareGPT conversations"

    name = models.SlugField(max_length=48)
    version = models.PositiveIntegerField()
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    team = team_field()
    created_at = models.DateTimeField(auto_now_add=True)
    file_name = models.CharField(max_length=255)
    format = models.CharField(max_length=16, choices=Format.choices)
    sha256 = models.CharField(max_length=64)
    size_bytes = models.PositiveIntegerField()
    items = models.JSONField(help_text='[{"prompt", "category", "messages"?}, ...] in file order.')
    prompt_count = models.PositiveIntegerField()
    categories = models.JSONField(default=dict, blank=True, help_text="Prompts per category; {} without categories.")
    length_histogram = models.JSONField(default=list, help_text="Prompts per length bin in words (lo, hi, count).")

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["name", "-version"]
        # Each team names and versions its own sets.
        constraints = [models.UniqueConstraint(fields=["team", "name", "version"], name="prompt_set_version_unique")]

    def __str__(self):
        return f"{self.name} v{self.version}"

    @property
    def has_messages(self) -> bool:
        return self.format == self.Format.CHAT

    def prompts(self) -> list[str]:
        """The requests' text in file order: what a completions request sends."""
        return [item["prompt"] for item in self.items]

    def item_categories(self) -> list[str]:
        return [item["category"] for item in self.items]


class ArmQuerySet(models.QuerySet):
    def compared_or_baseline(self) -> "ArmQuerySet":
        """The arms whose measurements the comparison shows: every arm but a calibration arm,
        which serves another model than the target and has no speedup."""
        return self.filter(is_calibration=False)


class Arm(models.Model):
    class Method(models.TextChoices):
        BASELINE = "baseline", "Baseline (no speculation)"
        NGRAM = "ngram", "n-gram lookup"
        DRAFT_MODEL = "draft_model", "Draft model"
        EAGLE = "eagle", "EAGLE"
        EAGLE3 = "eagle3", "EAGLE-3"
        MTP = "mtp", "MTP"
        SUFFIX = "suffix", "Suffix decoding"

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="arms")
    position = models.PositiveSmallIntegerField()
    label = models.CharField(max_length=100)
    method = models.CharField(max_length=16, choices=Method.choices)
    num_speculative_tokens = models.PositiveSmallIntegerField(null=True, blank=True)
    # Method-specific settings: prompt_lookup_min/max (n-gram), model (draft, EAGLE heads).
    params = models.JSONField(default=dict, blank=True)
    # A second, identical baseline (A/A): compared with the baseline like any arm, its
    # "speedup" is the noise floor of the experiment.
    is_replicate = models.BooleanField(default=False)
    # Mean acceptance lengths at which the arm runs again with vLLM's synthetic acceptance
    # (experiments/acceptance_sweep.py): those runs are not the arm's measurements.
    synthetic_sweep = ArrayField(
        models.FloatField(),
        default=list,
        blank=True,
        help_text="Synthetic mean acceptance lengths to run the arm at besides its real runs; empty: no sweep.",
    )
    # A calibration arm serves a draft model (params["model"]) alone with plain decoding: it
    # measures what a draft step costs, and is never compared with the baseline.
    is_calibration = models.BooleanField(default=False)

    objects = ArmQuerySet.as_manager()

    class Meta:
        ordering = ["experiment", "position"]
        constraints = [
            models.UniqueConstraint(fields=["experiment", "position"], name="arm_position_unique"),
            models.UniqueConstraint(fields=["experiment", "label"], name="arm_label_unique"),
            models.UniqueConstraint(
                fields=["experiment"],
                condition=Q(method="baseline", is_replicate=False, is_calibration=False),
                name="arm_one_baseline_per_experiment",
            ),
            models.UniqueConstraint(
                fields=["experiment"], condition=Q(is_replicate=True), name="arm_one_replicate_per_experiment"
            ),
            models.CheckConstraint(
                condition=Q(is_replicate=False) | Q(method="baseline"), name="arm_replicate_is_a_baseline"
            ),
            models.CheckConstraint(
                condition=Q(is_calibration=False) | Q(method="baseline", is_replicate=False),
                name="arm_calibration_is_plain_decoding",
            ),
            models.CheckConstraint(
                condition=Q(method="baseline", num_speculative_tokens__isnull=True)
                | (
                    ~Q(method="baseline")
                    & Q(num_speculative_tokens__gte=1, num_speculative_tokens__lte=MAX_SPECULATIVE_TOKENS)
                ),
                name="arm_k_matches_method",
            ),
        ]

    def __str__(self):
        return self.label

    @property
    def is_baseline(self) -> bool:
        """The reference every other arm (the replicate included) is compared with."""
        return self.method == self.Method.BASELINE and not self.is_replicate and not self.is_calibration

    @property
    def is_speculative(self) -> bool:
        return self.method != self.Method.BASELINE

    # The keys of vLLM's --speculative-config that specdash sets for each method, beside method
    # and num_speculative_tokens: the experiment form's fields (experiments/forms.py), and all an
    # imported config may carry (experiments/imports.py). tests/test_vllm_config_keys.py checks
    # them against the installed vLLM's SpeculativeConfig.
    PARAM_KEYS = {
        Method.NGRAM: ("prompt_lookup_min", "prompt_lookup_max"),
        Method.DRAFT_MODEL: ("model",),
        Method.EAGLE: ("model",),
        Method.EAGLE3: ("model",),
        Method.MTP: (),
        Method.SUFFIX: (),
    }

    def speculative_config(self) -> dict | None:
        """The JSON vLLM takes as --speculative-config, or None for plain decoding."""
        if not self.is_speculative:
            return None
        config = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens}
        config.update(self.params)
        return config

    def synthetic_config(self, acceptance_length: float) -> dict:
        """The arm's --speculative-config with real rejection replaced by vLLM's synthetic
        acceptance: the proposer and the verifier still run, but each draft position is
        accepted at the rate that gives this mean acceptance length (vLLM 0.32,
        SpeculativeConfig.synthetic_acceptance_length, in [1, k + 1])."""
        return self.speculative_config() | {
            "rejection_sample_method": "synthetic",
            "synthetic_acceptance_length": acceptance_length,
        }


class RunQuerySet(models.QuerySet):
    def open(self) -> "RunQuerySet":
        """Runs not done yet: queued, or running on a worker."""
        return self.filter(status__in=Run.OPEN_STATUSES)

    def succeeded(self) -> "RunQuerySet":
        return self.filter(status=Run.Status.SUCCEEDED)

    def real(self) -> "RunQuerySet":
        """Runs that measure their arm: all but a synthetic acceptance sweep's."""
        return self.filter(synthetic_acceptance_length__isnull=True)

    def synthetic(self) -> "RunQuerySet":
        """Runs of an arm's synthetic acceptance sweep: never part of the arm's statistics."""
        return self.filter(synthetic_acceptance_length__isnull=False)

    def in_execution_order(self, *, server_per_block: bool) -> "RunQuerySet":
        """The order the worker runs them in (experiments/schedule.py): block by block, each
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
    def succeeded_of(self, experiment: "Experiment") -> "RunSummaryQuerySet":
        """The summaries of an experiment's succeeded real runs: what results and analysis
        read. A synthetic acceptance sweep's runs are left out (synthetic_sweep_of)."""
        return self.filter(
            run__experiment=experiment, run__status=Run.Status.SUCCEEDED, run__synthetic_acceptance_length__isnull=True
        )

    def synthetic_sweep_of(self, experiment: "Experiment") -> "RunSummaryQuerySet":
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

    # Whether the client saw the stream as the engine made it (experiments/stream_fidelity.py);
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

    # vLLM's capacity figures over the measured interval (workers/prom.py); null on runs
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

    objects = RunSummaryQuerySet.as_manager()

    def __str__(self):
        return f"summary of {self.run}"

    @property
    def stream_flagged(self) -> bool:
        """Too many distorted streams for the client's TTFT and TPOT to get a verdict."""
        return stream_fidelity.run_flagged(self.stream_checked, self.stream_distorted)

    @property
    def acceptance_rate(self) -> float | None:
        if not self.spec_num_draft_tokens:
            return None
        return self.spec_num_accepted_tokens / self.spec_num_draft_tokens

    @property
    def acceptance_length(self) -> float | None:
        if not self.spec_num_drafts:
            return None
        return 1 + self.spec_num_accepted_tokens / self.spec_num_drafts


class RequestRecordQuerySet(models.QuerySet):
    def succeeded_of(self, experiment: "Experiment") -> "RequestRecordQuerySet":
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
    # The four lists and the output token ids are stored packed (experiments/packed.py): PostgreSQL
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
    # The output's token ids as unsigned 32-bit little-endian integers (experiments/tokens.py):
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
    it. What it gives is where a step's time goes (experiments/profiles.py)."""

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
    # environment variables that set it (workers/affinity.py); empty on GPU hosts.
    cpu_binding = models.JSONField(default=dict, blank=True)

    def __str__(self):
        return f"environment of {self.run}"


class SpeedupEstimate(models.Model):
    """Speedup of one arm over the baseline at one concurrency level, with its interval.
    Above 1 always means the arm is better. Computed once when the experiment ends."""

    class Metric(models.TextChoices):
        SERVER_TPOT = "server_tpot", "Engine-timed TPOT"
        TPOT = "tpot", "TPOT"
        E2E = "e2e", "End-to-end latency"
        TTFT = "ttft", "TTFT"
        OUTPUT_THROUGHPUT = "output_throughput", "Output throughput"
        REQUEST_THROUGHPUT = "request_throughput", "Request throughput"

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="speedups")
    arm = models.ForeignKey(Arm, on_delete=models.CASCADE, related_name="speedups")
    concurrency = models.PositiveIntegerField()
    metric = models.CharField(max_length=32, choices=Metric.choices)
    point = models.FloatField(null=True)
    ci_low = models.FloatField(null=True)
    ci_high = models.FloatField(null=True)
    n_pairs = models.PositiveIntegerField(default=0)
    n_repetitions = models.PositiveIntegerField(default=0, help_text="Blocks with a ratio.")
    note = models.CharField(max_length=200, blank=True)
    outcome = models.CharField(max_length=32, blank=True, help_text="The verdict word (experiments/verdicts.py).")
    block_ratios = ArrayField(models.FloatField(), default=list, help_text="The speedup measured in each block.")
    failed_baseline = models.PositiveIntegerField(default=0)
    failed_arm = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["arm__position", "metric", "concurrency"]
        constraints = [
            models.UniqueConstraint(fields=["arm", "concurrency", "metric"], name="speedup_unique_cell"),
        ]

    def __str__(self):
        return f"{self.arm} {self.metric} @ {self.concurrency}"

    def chart_point(self) -> dict:
        """The estimate as the pages' chart scripts read it."""
        return {
            "arm": self.arm_id,
            "level": self.concurrency,
            "metric": self.metric,
            "point": self.point,
            "lo": self.ci_low,
            "hi": self.ci_high,
            "outcome": self.outcome,
        }


class ExperimentAnalysis(models.Model):
    """What the experiment page shows beyond the run summaries: verdicts and chart series,
    derived from the recorded requests once, when the experiment ends."""

    experiment = models.OneToOneField(Experiment, on_delete=models.CASCADE, related_name="analysis")
    computed_at = models.DateTimeField(auto_now=True)
    verdicts = models.JSONField(default=list)
    series = models.JSONField(default=dict)
    warnings = models.JSONField(default=list)
    fidelity = models.JSONField(default=list)

    def __str__(self):
        return f"analysis of {self.experiment}"


# ---------------------------------------------------------------- review: comments and decisions


class Comment(models.Model):
    """A remark on an experiment: plain text, kept as written (no edits, no deletes)."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="comments")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    body = models.TextField(max_length=5000)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self):
        return f"comment by {self.author} on {self.experiment}"


class Decision(models.Model):
    """What the team decided for a named service, and the evidence it rests on.

    Proposed by one user, final once another approves it. Every change is a DecisionEvent;
    a final decision is never edited, only superseded by the next final one for its service.
    """

    class Kind(models.TextChoices):
        DEPLOY = "deploy", "Deploy"
        DO_NOT_DEPLOY = "do_not_deploy", "Do not deploy"
        NEEDS_MORE_DATA = "needs_more_data", "Needs more data"

    class State(models.TextChoices):
        PROPOSED = "proposed", "Proposed"
        FINAL = "final", "Final"
        REJECTED = "rejected", "Rejected"
        WITHDRAWN = "withdrawn", "Withdrawn"
        SUPERSEDED = "superseded", "Superseded"

    service = models.SlugField(max_length=100, help_text="The serving service it decides for, e.g. chat.")
    team = team_field()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    arm = models.ForeignKey(Arm, null=True, blank=True, on_delete=models.PROTECT, related_name="decisions")
    # What vLLM takes as --speculative-config for that arm, copied when the decision is written.
    speculative_config = models.JSONField(null=True, blank=True)
    max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    metric = models.CharField(
        max_length=32, choices=SpeedupEstimate.Metric.choices, default=SpeedupEstimate.Metric.TPOT
    )
    rationale = models.TextField(max_length=5000)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PROPOSED)
    version = models.PositiveIntegerField(default=1, help_text="Goes up with every edit; an approval names it.")
    proposed_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    proposed_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    supersedes = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="superseded_by"
    )
    flagged_at = models.DateTimeField(null=True, blank=True)
    flag_reason = models.TextField(blank=True)
    flag_experiment = models.ForeignKey(Experiment, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    evidence = models.ManyToManyField(Experiment, through="DecisionEvidence", related_name="decisions")

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["-proposed_at", "-id"]
        constraints = [
            # Each team decides for its own services.
            models.UniqueConstraint(
                fields=["team", "service"], condition=Q(state="final"), name="decision_one_final_per_service"
            ),
            models.CheckConstraint(
                condition=~Q(kind="deploy") | Q(arm__isnull=False, max_concurrency__gte=1),
                name="decision_deploy_names_arm_and_concurrency",
            ),
        ]

    def __str__(self):
        return f"decision #{self.pk} for {self.service}"

    @property
    def is_open(self) -> bool:
        return self.state == self.State.PROPOSED

    @property
    def headline(self) -> str:
        """The decision in one line, e.g. "Deploy EAGLE-3 k=3 up to concurrency 16"."""
        arm = f" {self.arm.label}" if self.arm_id else ""
        limit = f" up to concurrency {self.max_concurrency}" if self.max_concurrency else ""
        if self.kind == self.Kind.DEPLOY:
            return f"Deploy{arm}{limit}"
        if self.kind == self.Kind.DO_NOT_DEPLOY:
            return f"Do not deploy{arm or ' speculative decoding'}{limit}"
        return f"Needs more data{' on' + arm if arm else ''}{limit}"

    @property
    def is_flagged(self) -> bool:
        return self.flagged_at is not None and self.state == self.State.FINAL


class DecisionEvidence(models.Model):
    """An experiment a decision cites, with its verdicts as they stood when cited."""

    decision = models.ForeignKey(Decision, on_delete=models.PROTECT, related_name="citations")
    experiment = models.ForeignKey(Experiment, on_delete=models.PROTECT, related_name="citations")
    verdicts = models.JSONField(default=list)

    class Meta:
        ordering = ["decision", "experiment"]
        constraints = [
            models.UniqueConstraint(fields=["decision", "experiment"], name="evidence_cited_once"),
        ]

    def __str__(self):
        return f"{self.experiment} cited by {self.decision}"

    @property
    def verdicts_by_arm(self) -> list[tuple[str, list[dict]]]:
        """The kept verdicts grouped by arm, levels in order."""
        arms: dict[str, list[dict]] = {}
        for cell in self.verdicts:
            arms.setdefault(cell["arm"], []).append(cell)
        return [(arm, sorted(cells, key=lambda c: c["level"])) for arm, cells in arms.items()]


class DecisionEvent(models.Model):
    """One change of a decision: who, when, what. Written by experiments/decisions.py only."""

    class Action(models.TextChoices):
        PROPOSED = "proposed", "proposed"
        EDITED = "edited", "edited"
        APPROVED = "approved", "approved"
        REJECTED = "rejected", "rejected"
        WITHDRAWN = "withdrawn", "withdrew"
        SUPERSEDED = "superseded", "superseded"
        FLAGGED = "flagged", "flagged for review"
        FLAG_DISMISSED = "flag_dismissed", "dismissed the flag"

    decision = models.ForeignKey(Decision, on_delete=models.PROTECT, related_name="events")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="Empty for specdash itself (a contradicting experiment).",
    )  # fmt: skip
    at = models.DateTimeField(auto_now_add=True)
    action = models.CharField(max_length=16, choices=Action.choices)
    version = models.PositiveIntegerField(help_text="The decision's version after the change.")
    changes = models.JSONField(default=dict, help_text="field: [before, after]")
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self):
        return f"{self.decision} {self.action}"


class HistoryVisit(models.Model):
    """When a user last looked at the history, for the "since your last visit" notices.

    A visit is a run of page views less than experiments.notifications.VISIT_GAP apart:
    paging and filtering do not end it, so the notices stay until the user comes back later."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="history_visit")
    seen_at = models.DateTimeField(help_text="The latest history page view.")
    previous_seen_at = models.DateTimeField(null=True, blank=True, help_text="The last view of the visit before.")

    def __str__(self):
        return f"{self.user}'s last visit"


class Submission(models.Model):
    """A write that a user's page or API client sent, under the key it carried: a form posted
    twice (a double click, a browser's retry) or an API call retried with the same
    Idempotency-Key stores once, and the second answer points at the first's result
    (experiments/submissions.py)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    location = models.CharField(max_length=500, blank=True, help_text="Where the first submission's result is.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="submission_user_key_unique")]

    def __str__(self):
        return f"submission {self.key} of {self.user}"
