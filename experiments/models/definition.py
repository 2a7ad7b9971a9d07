"""What an experiment asks for: the Experiment with its settings. Its arms (the decoding
methods it compares) are in experiments/models/arm.py, the prompt sets it may send in
experiments/models/prompt_set.py, team ownership and IllegalTransition in
experiments/models/base.py."""

from typing import Self

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q

from experiments.measurement.planning.planner import MIN_RESOLUTION, SearchRange
from experiments.measurement.stats.objective import Guard
from experiments.measurement.stats.question import Question
from experiments.measurement.stats.sequential import (
    BLOCK_MODEL,
    BOUNDARIES,
    FIRST_LOOK,
    PER_CELL_T,
    POCOCK_BOUNDARY,
    SPENDING_BOUNDARY,
    Design,
)
from experiments.models.base import TeamQuerySet, team_field
from experiments.rules import server_settings
from experiments.rules.server_settings import MAX_TENSOR_PARALLEL_SIZE

_SETTINGS = server_settings.BY_NAME


def _choices(name: str) -> list[tuple[str, str]]:
    return [(value, value) for value in _SETTINGS[name].choices]


class ExperimentQuerySet(TeamQuerySet):
    def active(self) -> Self:
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
    # that takes the experiment must see at least this many (workers/server/launch.py).
    tensor_parallel_size = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(MAX_TENSOR_PARALLEL_SIZE)]
    )
    # vLLM's production settings (experiments/rules/server_settings.py), the same for every arm's
    # server; empty leaves vLLM's default.
    gpu_memory_utilization = models.FloatField(
        null=True, blank=True, help_text=_SETTINGS["gpu_memory_utilization"].help_text
    )
    kv_cache_memory_bytes = models.PositiveBigIntegerField(
        null=True, blank=True, help_text=_SETTINGS["kv_cache_memory_bytes"].help_text
    )
    max_num_seqs = models.PositiveIntegerField(null=True, blank=True, help_text=_SETTINGS["max_num_seqs"].help_text)
    max_num_batched_tokens = models.PositiveIntegerField(
        null=True, blank=True, help_text=_SETTINGS["max_num_batched_tokens"].help_text
    )
    kv_cache_dtype = models.CharField(
        max_length=32, blank=True, choices=_choices("kv_cache_dtype"), help_text=_SETTINGS["kv_cache_dtype"].help_text
    )
    quantization = models.CharField(
        max_length=32, blank=True, choices=_choices("quantization"), help_text=_SETTINGS["quantization"].help_text
    )

    workload_kind = models.CharField(max_length=16, choices=WorkloadKind.choices, default=WorkloadKind.BUILTIN)
    prompt_set = models.CharField(max_length=64, blank=True)
    prompt_set_hash = models.CharField(max_length=64, blank=True)
    synthetic_input_len = models.PositiveIntegerField(null=True, blank=True)
    input_lengths = models.CharField(
        max_length=200,
        blank=True,
        help_text="Synthetic input-length distribution, e.g. 16-256 (experiments/prompts/input_lengths.py).",
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
        default=10,
        help_text="Blocks: in each, every arm runs once, on its own server, in a random order. With a sequential "
        "design, the most blocks the experiment may run.",
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
    # The question (experiments/measurement/stats/question.py): the metric and levels whose cells get
    # the family-wise controlled words, and how the blocks are spent on them.
    primary_metric = models.CharField(
        max_length=32, default="server_tpot",
        help_text="The speedup the verdict rests on; the other metrics show estimates with unadjusted words.",
    )  # fmt: skip
    primary_levels = ArrayField(
        models.PositiveIntegerField(), default=list, blank=True,
        help_text="The concurrency levels that matter; empty: every level.",
    )  # fmt: skip
    sequential = models.BooleanField(
        default=True,
        help_text="Add blocks one at a time from the third on, until every primary cell is settled or the "
        "maximum (repetitions) is reached (experiments/measurement/stats/sequential.py). Off: every block runs.",
    )
    # The service's objective (experiments/measurement/stats/objective.py): a preset's name, "custom",
    # or "" for the primary metric alone (every experiment from before objectives).
    objective = models.CharField(
        max_length=16, blank=True, default="",
        help_text="The service's objective: interactive, shared, capacity, custom; empty: the primary metric alone.",
    )  # fmt: skip
    guards = models.JSONField(
        default=list, blank=True,
        help_text='The metrics that must not get worse: [{"metric": "e2e", "margin": 0.05}, …] (margin a fraction).',
    )  # fmt: skip
    worthwhile_gain = models.FloatField(
        default=0.07,
        help_text="Smallest gain worth deploying, as a fraction: an arm shown to gain less stops as not worth it.",
    )
    boundary = models.CharField(
        max_length=16,
        choices=[
            (SPENDING_BOUNDARY, "alpha spending, ρ = 3 (close to O'Brien–Fleming)"),
            (POCOCK_BOUNDARY, "Pocock (one level at every look)"),
        ],
        default=SPENDING_BOUNDARY,
        editable=False,
        help_text="The group-sequential boundary the looks use (experiments/measurement/stats/sequential.py); "
        "experiments run before the spending boundary keep Pocock's when their looks are replayed.",
    )
    verdict_method = models.CharField(
        max_length=16,
        choices=[
            (BLOCK_MODEL, "block model: pooled spread, estimates that account for the stop"),
            (PER_CELL_T, "each cell's t on its own blocks"),
        ],
        default=BLOCK_MODEL,
        editable=False,
        help_text="The test of the looks (experiments/measurement/stats/sequential.py, block_decisions.py); "
        "experiments run before the block model keep the per-cell t when their looks are replayed.",
    )
    max_device_minutes = models.FloatField(
        null=True, blank=True,
        help_text="With a sequential design, no block is added once the runs so far and the next block's "
        "expected time would pass this many device-minutes; empty: blocks only.",
    )  # fmt: skip
    # A break-even search (experiments/measurement/planning/planner.py): the range and resolution of its grid of
    # levels. Its concurrency_levels are the levels measured so far: the ends, then those it adds.
    search_low = models.PositiveIntegerField(
        null=True, blank=True, help_text="Break-even search: the lowest concurrency of the range."
    )
    search_high = models.PositiveIntegerField(
        null=True, blank=True, help_text="Break-even search: the highest concurrency of the range."
    )
    search_resolution = models.FloatField(
        null=True, blank=True,
        help_text="Break-even search: the largest ratio between neighbouring levels of its grid.",
    )  # fmt: skip
    warmup_requests = models.PositiveSmallIntegerField(default=2)
    profile_intervals = models.BooleanField(
        default=False,
        help_text="After each arm's measured runs, one short extra interval per level under vLLM's torch "
        "profiler (experiments/measurement/engine/trace_shares.py); left out of every statistic.",
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

    # An imported experiment (experiments/imports/services.py) is read-only: its runs are summaries
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
            models.CheckConstraint(
                condition=Q(worthwhile_gain__gt=0, worthwhile_gain__lt=1), name="experiment_worthwhile_gain_fraction"
            ),
            models.CheckConstraint(
                condition=Q(gpu_memory_utilization__isnull=True)
                | Q(gpu_memory_utilization__gt=0, gpu_memory_utilization__lte=1),
                name="experiment_gpu_memory_fraction",
            ),
            models.CheckConstraint(
                condition=Q(search_low__isnull=True, search_high__isnull=True, search_resolution__isnull=True)
                | Q(search_low__gte=1, search_high__gte=F("search_low"), search_resolution__gte=MIN_RESOLUTION),
                name="experiment_search_range",
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
    def server_setting_values(self) -> dict[str, server_settings.Value | None]:
        """The experiment-wide vLLM settings by name, None or "" where vLLM's default applies."""
        return {setting.name: getattr(self, setting.name) for setting in server_settings.SERVER_SETTINGS}

    @property
    def server_settings_set(self) -> list[tuple[server_settings.ServerSetting, server_settings.Value]]:
        """The settings set, each with its value, for the protocol card."""
        return server_settings.set_values(self.server_setting_values)

    @property
    def is_imported(self) -> bool:
        return self.source == self.Source.IMPORTED

    @property
    def is_active(self) -> bool:
        return self.status in self.ACTIVE_STATUSES

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def question_levels(self) -> list[int]:
        """The concurrency levels whose cells are the question, in ascending order."""
        return sorted(self.primary_levels or self.concurrency_levels)

    @property
    def adds_blocks(self) -> bool:
        """Blocks are added one at a time: a sequential design, on a fresh server per arm and
        block (with one server per arm the arms do not interleave, so every block runs)."""
        return self.sequential and self.server_per_block

    @property
    def search_range(self) -> SearchRange | None:
        """The break-even search's range, or None for an experiment of listed levels."""
        if self.search_low is None or self.search_high is None or self.search_resolution is None:
            return None
        return SearchRange(self.search_low, self.search_high, self.search_resolution)

    @property
    def question(self) -> Question:
        """What the experiment asked and how its blocks are spent on it (experiments/measurement/stats/question.py)."""
        design = Design(
            max_blocks=self.repetitions,
            sequential=self.adds_blocks,
            margin=self.equivalence_margin,
            worthwhile_gain=self.worthwhile_gain,
            spending=BOUNDARIES[self.boundary],
            method=self.verdict_method,
        )
        search = self.search_range
        family = search.family_size if search else None
        guards = tuple(Guard(g["metric"], g["margin"]) for g in self.guards)
        return Question(self.primary_metric, tuple(self.question_levels), design, family, guards, self.objective)

    @property
    def first_blocks(self) -> int:
        """The blocks queued at submission: with blocks added until settled, those before the
        first look (a break-even search: the first only, as it places a level after each block);
        else every block."""
        if self.adds_blocks and self.search_range is not None:
            return 1
        return min(FIRST_LOOK, self.repetitions) if self.adds_blocks else self.repetitions

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
