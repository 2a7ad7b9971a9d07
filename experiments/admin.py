"""Admin: experiments are created through the form (which adds arms, runs and the dispatch),
and measured results are written only by workers, so almost everything here is read-only.
Everyone but a superuser sees the rows of their own teams only, by the pages' rule
(experiments/teams.py). Teams themselves are the admin's Groups."""

from django.contrib import admin

from experiments import teams
from experiments.models import (
    Arm,
    Comment,
    Decision,
    DecisionEvent,
    DecisionEvidence,
    EnvironmentSnapshot,
    Experiment,
    ExperimentAnalysis,
    RequestRecord,
    Run,
    RunSummary,
    SpeedupEstimate,
)


class TeamAdmin(admin.ModelAdmin):
    """Lists and opens the rows of the user's teams; `team_path` leads from the row to its team."""

    team_path = "team"

    def get_queryset(self, request):
        return super().get_queryset(request).filter(teams.visible_q(request.user, self.team_path))


class ReadOnlyAdmin(TeamAdmin):
    """Measured results, their derivations and the review records: a deleted run or request
    row would change a verdict without a trace, so nothing here is added, changed or deleted
    by hand."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ArmInline(admin.TabularInline):
    model = Arm
    fields = readonly_fields = ("position", "label", "method", "num_speculative_tokens", "params")
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


# Only the wording of an experiment may change in the admin: the protocol is what the results
# were measured under.
EXPERIMENT_RECORDED_FIELDS = [
    "owner",
    "team",
    "status",
    "created_at",
    "started_at",
    "finished_at",
    "target_model",
    "worker_queue",
    "dtype",
    "max_model_len",
    "workload_kind",
    "prompt_set",
    "prompt_set_hash",
    "synthetic_input_len",
    "num_prompts",
    "max_tokens",
    "ignore_eos",
    "temperature",
    "top_p",
    "seed",
    "concurrency_levels",
    "repetitions",
    "warmup_requests",
    "request_rate",
    "slo_ttft_ms",
    "slo_tpot_ms",
    "slo_e2e_ms",
    "requested_vllm_version",
    "vllm_versions",
    "hardware",
    "origin",
    "origin_kind",
    "cancelled_by",
]


@admin.register(Experiment)
class ExperimentAdmin(TeamAdmin):
    list_display = ["id", "name", "status", "target_model", "worker_queue", "owner", "team", "created_at"]
    list_filter = ["status", "worker_queue", "workload_kind"]
    search_fields = ["name", "target_model", "owner__username"]
    list_select_related = ["owner"]
    date_hierarchy = "created_at"
    inlines = [ArmInline]
    fields = ["name", "description", *EXPERIMENT_RECORDED_FIELDS]
    readonly_fields = [*EXPERIMENT_RECORDED_FIELDS, "origin_elsewhere"]

    def get_fields(self, request, obj=None):
        """The origin is named only to those who may see it: a member of two teams can re-run
        one team's experiment into the other."""
        fields = list(super().get_fields(request, obj))
        origin = obj.origin_id if obj is not None else None
        if origin is not None and not Experiment.objects.visible_to(request.user).filter(pk=origin).exists():
            fields[fields.index("origin")] = "origin_elsewhere"
        return fields

    @admin.display(description="origin")
    def origin_elsewhere(self, obj) -> str:
        return "an experiment of another team"

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        """An experiment is cancelled from its page, never deleted: its runs, requests and
        the decisions citing it would go with it (or, while it runs, from under its worker)."""
        return False


@admin.register(Arm)
class ArmAdmin(ReadOnlyAdmin):
    team_path = "experiment__team"
    list_display = ["label", "experiment", "position", "method", "num_speculative_tokens"]
    list_filter = ["method"]
    list_select_related = ["experiment"]
    search_fields = ["label", "experiment__name"]


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    team_path = "experiment__team"
    list_display = [
        "id",
        "experiment",
        "arm",
        "concurrency",
        "repetition",
        "status",
        "worker_host",
        "requests_done",
        "requests_total",
        "attempts",
        "heartbeat_at",
    ]
    list_filter = ["status", "worker_host"]
    list_select_related = ["experiment", "arm"]
    search_fields = ["experiment__name", "arm__label", "worker_host"]


@admin.register(RunSummary)
class RunSummaryAdmin(ReadOnlyAdmin):
    team_path = "run__experiment__team"
    list_display = [
        "run",
        "completed",
        "failed",
        "request_throughput",
        "output_throughput",
        "ttft_p50_ms",
        "tpot_p50_ms",
    ]
    list_select_related = ["run__arm"]
    raw_id_fields = ["run"]


@admin.register(RequestRecord)
class RequestRecordAdmin(ReadOnlyAdmin):
    team_path = "run__experiment__team"
    list_display = ["id", "run", "prompt_index", "output_tokens", "ttft_ms", "e2e_ms", "finish_reason"]
    list_select_related = ["run__arm"]
    raw_id_fields = ["run"]
    # Request tables grow to millions of rows: skip the exact count on every page.
    show_full_result_count = False


@admin.register(EnvironmentSnapshot)
class EnvironmentSnapshotAdmin(ReadOnlyAdmin):
    team_path = "run__experiment__team"
    list_display = ["run", "host_name", "gpu_name", "vllm_version", "captured_at"]
    list_select_related = ["run__arm"]
    raw_id_fields = ["run"]


@admin.register(SpeedupEstimate)
class SpeedupEstimateAdmin(ReadOnlyAdmin):
    team_path = "experiment__team"
    list_display = ["arm", "experiment", "concurrency", "metric", "point", "ci_low", "ci_high", "note"]
    list_filter = ["metric"]
    list_select_related = ["arm", "experiment"]


@admin.register(ExperimentAnalysis)
class ExperimentAnalysisAdmin(ReadOnlyAdmin):
    team_path = "experiment__team"
    list_display = ["experiment", "computed_at"]
    list_select_related = ["experiment"]


# ---------------------------------------------------------------- the team's review
# Records of who said and decided what: nothing here is added, changed or deleted by hand.


class RecordInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class DecisionEvidenceInline(RecordInline):
    model = DecisionEvidence
    fields = readonly_fields = ("experiment", "verdicts")


class DecisionEventInline(RecordInline):
    model = DecisionEvent
    fields = readonly_fields = ("at", "actor", "action", "version", "changes", "note")


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "service",
        "kind",
        "state",
        "arm",
        "max_concurrency",
        "proposed_by",
        "decided_by",
        "team",
        "flagged_at",
    ]
    list_filter = ["state", "kind", "service"]
    list_select_related = ["arm", "proposed_by", "decided_by"]
    search_fields = ["service", "rationale"]
    inlines = [DecisionEvidenceInline, DecisionEventInline]


@admin.register(DecisionEvent)
class DecisionEventAdmin(ReadOnlyAdmin):
    team_path = "decision__team"
    list_display = ["decision", "at", "actor", "action", "version"]
    list_filter = ["action"]
    list_select_related = ["decision", "actor"]


@admin.register(Comment)
class CommentAdmin(ReadOnlyAdmin):
    team_path = "experiment__team"
    list_display = ["experiment", "author", "created_at"]
    list_select_related = ["experiment", "author"]
    search_fields = ["body", "author__username", "experiment__name"]
