"""The experiment form: its name and description, the parts a user fills in (the target and its
server, the workload, the question, the objective: the other modules of this package), the load
(warm-up, arrival rate), the SLOs, and the rules across the parts (the prompts a level needs,
the arrival span, the time a worker may hold the experiment); the budget form; and the
protocol's check across the experiment form and its arms."""

from typing import Any

from django import forms
from django.conf import settings

from experiments.definition.forms.arms import MAX_ARMS, BaseArmFormSet
from experiments.definition.forms.fields import model_default, positive, seconds
from experiments.definition.forms.objective import ObjectiveFields
from experiments.definition.forms.question import QuestionFields, measured_levels_at_most
from experiments.definition.forms.server import ServerFields
from experiments.definition.forms.workload import WorkloadFields
from experiments.execution import worker_queues
from experiments.form_kit import TeamForm, reject_controls, reject_controls_multiline, reject_markup
from experiments.measurement.planning import limits
from experiments.measurement.stats import objective
from experiments.models import SpeedupEstimate

MAX_DESCRIPTION_CHARS = 10_000

# A measured run's requests must arrive within this time at the chosen Poisson rate.
MAX_ARRIVAL_SPAN_S = 3600

# Fields the form takes that are no column: the objective's guards are stored as `guards`.
FORM_ONLY_FIELDS = ("guard_metrics", "guard_margin")


def experiment_limit_s(cleaned: dict, *, arms: int, per_run_arms: int = 0) -> float:
    """The longest the experiment's task may run with `arms` arms, `per_run_arms` of which start a
    server for every run (suffix decoding: workers/runner.py) rather than one per block
    (experiments/measurement/planning/limits.py)."""
    size = limits.Size(
        warmup=cleaned["warmup_requests"],
        prompts=cleaned["num_prompts"],
        max_tokens=cleaned["max_tokens"],
        request_rate=cleaned.get("request_rate"),
    )
    levels = measured_levels_at_most(cleaned)
    return limits.experiment_time_limit_s(
        size,
        levels=levels,
        runs_per_level=arms * cleaned["repetitions"],
        sessions=(arms - per_run_arms + per_run_arms * len(levels)) * cleaned["repetitions"],
        seconds_per_token=worker_queues.seconds_per_token(cleaned.get("worker_queue", "")),
        server_start_s=worker_queues.server_start_timeout_s(cleaned.get("worker_queue", "")),
    )


class _Described(forms.Form):
    """The experiment's name and description, first on the page."""

    name = forms.CharField(max_length=200, validators=[reject_markup, reject_controls])
    description = forms.CharField(
        required=False,
        max_length=MAX_DESCRIPTION_CHARS,
        validators=[reject_controls_multiline],
        widget=forms.Textarea(attrs={"rows": 2}),
    )


# Django puts a base's fields before its subclass's, the last base's first: the bases are in the
# reverse of the page's order, which the API's schema follows.
class ExperimentForm(QuestionFields, WorkloadFields, ServerFields, _Described, ObjectiveFields, TeamForm):
    """The experiment's own settings; `experiment_fields()` gives the Experiment model fields."""

    warmup_requests = forms.IntegerField(
        min_value=0,
        max_value=1000,
        initial=model_default("warmup_requests"),
        label="Warm-up requests",
        help_text="Sent before each run and not measured; their prompts are not among the measured ones.",
    )
    request_rate = forms.FloatField(
        required=False,
        max_value=100_000,
        label="Request rate (req/s)",
        help_text="Poisson arrivals; empty sends as fast as the concurrency allows.",
    )

    slo_ttft_ms = forms.FloatField(required=False, label="TTFT SLO (ms)")
    slo_tpot_ms = forms.FloatField(required=False, label="TPOT SLO (ms)")
    slo_e2e_ms = forms.FloatField(required=False, label="E2E SLO (ms)")

    def __init__(
        self,
        *args,
        user,
        speculative_arms: int = MAX_ARMS,
        sweep_lengths: int = 0,
        draft_arms: int | None = None,
        per_run_arms: int = 0,
        **kwargs,
    ):
        """`user`: who submits it, whose teams and prompt sets it may use. `speculative_arms`:
        how many the arm formset posts (the most there can be when unknown); `sweep_lengths`:
        how many synthetic acceptance lengths its arms list, each a server of its own per block;
        `draft_arms`: how many of the posted arms use a draft model (None: not known); `per_run_arms`:
        how many start a server for every run (suffix decoding), counted in the time limit."""
        super().__init__(*args, user=user, **kwargs)
        self.speculative_arms = speculative_arms
        self.sweep_lengths = sweep_lengths
        self.draft_arms = draft_arms
        self.per_run_arms = per_run_arms
        self._offer_prompt_sets(user)

    def clean_request_rate(self):
        return positive(self.cleaned_data["request_rate"], "The request rate")

    def clean_slo_ttft_ms(self):
        return positive(self.cleaned_data["slo_ttft_ms"], "The TTFT SLO")

    def clean_slo_tpot_ms(self):
        return positive(self.cleaned_data["slo_tpot_ms"], "The TPOT SLO")

    def clean_slo_e2e_ms(self):
        return positive(self.cleaned_data["slo_e2e_ms"], "The E2E SLO")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        assert cleaned is not None, "Form.clean() returns cleaned_data"
        # add_error() drops a field from cleaned_data, and two rules may refuse num_prompts.
        measured = cleaned.get("num_prompts")
        self._clean_workload(cleaned)
        self._check_fits_model_len(cleaned)
        self._check_batch(cleaned)
        self._clean_search(cleaned)
        self._clean_objective(cleaned)
        self._check_question(cleaned)
        self._check_prompts_per_level(self._highest_levels(cleaned), measured)
        self._check_arrival_span(cleaned.get("request_rate"), measured)
        self._check_time_limit(cleaned)
        if cleaned.get("draft_calibration") and self.draft_arms == 0:
            self.add_error(
                "draft_calibration",
                "No arm uses a draft model, so there is no draft model to serve alone: add a draft-model arm or "
                "untick this.",
            )
        return cleaned

    def _clean_objective(self, cleaned) -> None:
        """The objective's primary metric and guards (objective.py); a preset rests on its
        own primary metric, so another one than the field's initial asks for a custom objective."""
        preset = objective.PRESETS.get(cleaned.get("objective") or "")
        posted = cleaned.get("primary_metric")
        chosen = posted and posted != model_default("primary_metric")
        if preset is not None and chosen and posted != preset.primary:
            self.add_error(
                "primary_metric",
                f"The objective “{preset.label}” rests on {SpeedupEstimate.Metric(preset.primary).label}: choose it, "
                "or a custom objective for another primary metric.",
            )
            return
        has_slo = any(cleaned.get(name) is not None for name in ("slo_ttft_ms", "slo_tpot_ms", "slo_e2e_ms"))
        cleaned.update(self.objective_fields(cleaned, has_slo=has_slo))

    def _check_time_limit(self, cleaned):
        """The experiment's task must end before Redis would hand its message out again."""
        needed = ("warmup_requests", "num_prompts", "max_tokens", "concurrency_levels", "repetitions")
        if any(cleaned.get(name) is None for name in needed) or not cleaned["concurrency_levels"]:
            return
        # A calibration arm per draft-model arm at most (every arm when their methods are not known).
        drafts = self.speculative_arms if self.draft_arms is None else self.draft_arms
        calibrations = drafts if cleaned.get("draft_calibration") else 0
        arms = self.speculative_arms + 1 + bool(cleaned.get("aa_replicate")) + calibrations
        limit_s = experiment_limit_s(cleaned, arms=arms + self.sweep_lengths, per_run_arms=self.per_run_arms)
        allowed_s = settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
        sweep = f" and {self.sweep_lengths} synthetic sweep servers" if self.sweep_lengths else ""
        if limit_s > allowed_s:
            self.add_error(
                None,
                f"With {arms} arms{sweep}, this experiment could take up to {limit_s / 3600:.1f} h, longer than the "
                f"{allowed_s / 3600:.1f} h a worker may hold one here (SPECDASH_VISIBILITY_TIMEOUT_S). Use fewer "
                "prompts, levels, repetitions or a shorter output, or ask the administrator to raise it.",
            )

    def _check_arrival_span(self, rate: float | None, measured: int | None):
        if rate is None or measured is None or measured / rate <= MAX_ARRIVAL_SPAN_S:
            return
        self.add_error(
            "request_rate",
            f"At {rate:.3g} req/s the {measured} measured requests would take {seconds(measured / rate)} just to "
            f"arrive; a run may take at most {MAX_ARRIVAL_SPAN_S} s for that, so the rate must be at least "
            f"{measured / MAX_ARRIVAL_SPAN_S:.3g} req/s.",
        )

    def experiment_fields(self) -> dict:
        """Keyword arguments for services.experiment_create (model fields of Experiment)."""
        names = [name for name in self.fields if name not in FORM_ONLY_FIELDS]
        return {name: self.cleaned_data[name] for name in [*names, "prompt_set_hash", "guards"]}


class BudgetForm(forms.Form):
    """A running experiment's device-minute budget, changed by its owner: the experiment form's
    field and rule (empty: no budget, blocks only)."""

    max_device_minutes = ExperimentForm.declared_fields["max_device_minutes"]


def protocol_is_valid(form: ExperimentForm, arms: BaseArmFormSet) -> bool:
    """Both validated, so that every error shows at once, then the rules across them: each
    draft's tensor parallel size beside the target's, and each method beside the target (MTP
    needs the target's own layers)."""
    form_valid, arms_valid = form.is_valid(), arms.is_valid()
    target = form.cleaned_data.get("tensor_parallel_size") if form.is_bound else None
    if arms_valid and target is not None:
        arms.check_draft_tensor_parallel(target=target)
    target_model = form.cleaned_data.get("target_model") if form.is_bound else None
    if arms_valid and target_model:
        arms.check_target(target_model)
    return form_valid and arms.is_valid()
