"""Validation and normalisation of what the browser sends. No side effects."""

import json
import os
import re
from typing import Any, cast

from django import forms
from django.conf import settings
from django.contrib.auth.models import Group
from django.db import models

from experiments import teams
from experiments.definition.objective_fields import ObjectiveFields
from experiments.definition.services import REPLICATE_LABEL, ArmSpec, arm_default_label
from experiments.execution import worker_queues
from experiments.measurement.deploy import batch_schedule
from experiments.measurement.planning import limits
from experiments.measurement.planning.limits import MAX_LOOKUP, MAX_SPECULATIVE_TOKENS
from experiments.measurement.planning.planner import MIN_RESOLUTION, SearchRange
from experiments.measurement.stats import objective
from experiments.models import MAX_TENSOR_PARALLEL_SIZE, Arm, Experiment, SpeedupEstimate, UploadedPromptSet
from experiments.prompts import catalog
from experiments.prompts.input_lengths import parse_length_distribution
from experiments.rules import server_settings, text_rules
from experiments.rules.model_paths import model_path_refusal
from experiments.rules.server_settings import ServerSetting

MAX_CONCURRENCY = 1024
# Fields the form takes that are no column: the objective's guards are stored as `guards`.
FORM_ONLY_FIELDS = ("guard_metrics", "guard_margin")
MAX_CONCURRENCY_LEVELS = 12
MAX_ARMS = 8
MAX_SWEEP_LENGTHS = 6
# A level is reached and held only with several requests per slot: with fewer, the run
# spends most of its time ramping up and draining, below its nominal concurrency.
PROMPTS_PER_SLOT = 4
MAX_MARGIN_PERCENT = 50
MAX_BLOCKS = 20
# The metrics an experiment's question may rest on (SpeedupEstimate.Metric values).
PRIMARY_METRIC_CHOICES = [
    ("server_tpot", "Engine-timed TPOT (what speculation changes)"),
    ("tpot", "TPOT at the client"),
    ("e2e", "End-to-end latency"),
    ("output_throughput", "Output throughput"),
]

DTYPE_CHOICES = [
    ("auto", "auto"),
    ("float32", "float32"),
    ("bfloat16", "bfloat16"),
    ("float16", "float16"),
]
SPECULATIVE_METHODS = [(value, label) for value, label in Arm.Method.choices if value != Arm.Method.BASELINE]
# Which arm fields each method uses; the others are ignored (and hidden in the page).
# Methods that take a path ("model" in vLLM's speculative config) map to what it points at.
PATH_METHODS = {
    Arm.Method.DRAFT_MODEL: "draft model",
    Arm.Method.EAGLE: "EAGLE head",
    Arm.Method.EAGLE3: "EAGLE-3 head",
}


def model_default(name: str):
    """The model field's default: the model holds defaults, the form shows them."""
    field = Experiment._meta.get_field(name)
    assert isinstance(field, models.Field), f"{name} is not a column of Experiment"
    return field.default


def model_checkbox(name: str, label: str, help_text: str) -> forms.BooleanField:
    """An optional checkbox, ticked or not as the model field's default says."""
    return forms.BooleanField(required=False, initial=model_default(name), label=label, help_text=help_text)


def setting_field(setting: ServerSetting) -> forms.Field:
    """An optional form field for a vLLM server setting (experiments/rules/server_settings.py):
    a choice among its values, or a number its rule checks; empty leaves vLLM's default."""
    common: dict[str, Any] = {"required": False, "label": setting.label, "help_text": setting.help_text}
    if setting.choices:
        choices = [("", "vLLM's default"), *((value, value) for value in setting.choices)]
        return forms.ChoiceField(choices=choices, **common)

    def check(value) -> None:
        problem = setting.problem(value)
        if problem:
            shown = text_rules.excerpt(server_settings.shown(value))
            raise forms.ValidationError(f"{setting.label} {problem} (got {shown}).")

    field = forms.IntegerField if setting.kind is int else forms.FloatField
    return field(validators=[check], **common | {"help_text": f"{setting.help_text} Allowed: {setting.range_text()}."})


def default_target_model() -> str:
    return str(settings.SPECDASH_MODELS_DIR / "target")


MAX_DESCRIPTION_CHARS = 10_000
# A measured run's requests must arrive within this time at the chosen Poisson rate.
MAX_ARRIVAL_SPAN_S = 3600
# Characters that make text read differently from what it is: direction overrides and
# isolates (a name shown backwards), and other invisible format or control characters.
LINE_BREAKS = text_rules.LINE_BREAKS


def reject_markup(value: str) -> None:
    if text_rules.has_markup(value):
        raise forms.ValidationError("Must not contain < or >.")


def reject_controls(value: str, allowed: str = "") -> None:
    """Refuse invisible control and format characters (experiments/rules/text_rules.py)."""
    found = text_rules.control_char(value, allowed)
    if found:
        raise forms.ValidationError(f"Must not contain invisible control characters (found {found}).")


def reject_controls_multiline(value: str) -> None:
    reject_controls(value, allowed=LINE_BREAKS)


def reject_control_queue(value: str) -> None:
    """The control worker would hold an experiment for hours while the reaper and the
    dispatcher wait behind it."""
    if value == worker_queues.CONTROL_QUEUE:
        raise forms.ValidationError(
            f"“{value}” is the queue of the reaper and the dispatcher; experiments run on a worker pool's queue."
        )


def clean_model_path(value: str) -> str:
    """A model path on the worker (experiments/rules/model_paths.py: inside SPECDASH_MODELS_DIR
    unless the installation allows any path or model id). The worker checks the rule again,
    and that the path holds a model there, before it starts a server (workers/server/launch.py)."""
    value = value.strip()
    reject_markup(value)
    reject_controls(value)
    if settings.SPECDASH_ALLOW_ANY_MODEL_PATH:
        stored = os.path.normpath(value) if value.startswith("/") else value
    else:
        stored = os.path.realpath(value)
    # The path as typed, and as stored (links resolved): the worker checks the stored one again.
    refusal = model_path_refusal(value) or model_path_refusal(stored)
    if refusal is not None:
        raise forms.ValidationError(refusal)
    return stored


def parse_concurrency_levels(text: str) -> list[int]:
    tokens = [t for t in re.split(r"[,\s]+", text.strip()) if t]
    if not tokens:
        raise forms.ValidationError("Give at least one concurrency level.")
    levels: list[int] = []
    for token in tokens:
        if not re.fullmatch(r"[+-]?\d+", token):
            raise forms.ValidationError(f"“{token[:20]}” is not a whole number.")
        if len(token.lstrip("+-0")) > len(str(MAX_CONCURRENCY)):
            # int() of a very long digit string is slow, and refused past 4,300 digits.
            raise forms.ValidationError(f"Concurrency must be at most {MAX_CONCURRENCY} (got {token[:20]}…).")
        level = int(token)
        if level < 1:
            raise forms.ValidationError(f"Concurrency must be at least 1 (got {level}).")
        if level > MAX_CONCURRENCY:
            raise forms.ValidationError(f"Concurrency must be at most {MAX_CONCURRENCY} (got {level}).")
        _add_once(levels, level, token)
    return _at_most(levels, MAX_CONCURRENCY_LEVELS, "levels")


def _add_once(values: list, value, as_given: str) -> None:
    if value in values:
        raise forms.ValidationError(f"{as_given} is listed twice.")
    values.append(value)


def _at_most(values: list, most: int, noun: str) -> list:
    """The values in order, or a refusal when there are more than `most`."""
    if len(values) > most:
        raise forms.ValidationError(f"At most {most} {noun} (got {len(values)}).")
    return sorted(values)


def parse_synthetic_sweep(text: str, *, k: int) -> list[float]:
    """'1.5, 2, 2.5' → [1.5, 2.0, 2.5]: distinct mean acceptance lengths in [1, k + 1], the
    range vLLM accepts for synthetic_acceptance_length (τ counts the bonus token)."""
    lengths: list[float] = []
    for item in filter(None, (item.strip() for item in re.split(r"[,;]", text))):
        try:
            length = float(item)
        except ValueError:
            raise forms.ValidationError(f"“{item[:20]}” is not a number.") from None
        if not 1 <= length <= k + 1:
            raise forms.ValidationError(f"{item[:20]} is outside 1 to k + 1 = {k + 1}: τ counts the bonus token.")
        _add_once(lengths, length, item)
    return _at_most(lengths, MAX_SWEEP_LENGTHS, "lengths")


def measured_levels_at_most(cleaned: dict) -> list[int]:
    """The levels an experiment may measure: the listed ones; for a break-even search, as many
    of its grid's lowest levels (the slowest to run) as it may measure per arm."""
    low, high, resolution = cleaned.get("search_low"), cleaned.get("search_high"), cleaned.get("search_resolution")
    if low is None or high is None or resolution is None or low >= high:
        return cleaned["concurrency_levels"]
    search = SearchRange(low, high, resolution)
    return list(search.grid()[: search.family_size])


def experiment_limit_s(cleaned: dict, *, arms: int) -> float:
    """The longest the experiment's task may run with `arms` arms (experiments/measurement/planning/limits.py)."""
    size = limits.Size(
        warmup=cleaned["warmup_requests"],
        prompts=cleaned["num_prompts"],
        max_tokens=cleaned["max_tokens"],
        request_rate=cleaned.get("request_rate"),
    )
    return limits.experiment_time_limit_s(
        size,
        levels=measured_levels_at_most(cleaned),
        runs_per_level=arms * cleaned["repetitions"],
        sessions=arms * cleaned["repetitions"],
        seconds_per_token=settings.SPECDASH_RUN_SECONDS_PER_TOKEN,
        server_start_s=worker_queues.server_start_timeout_s(cleaned.get("worker_queue", "")),
    )


def model_choice_field(form: forms.BaseForm, name: str) -> forms.ModelChoiceField:
    """The form's own copy of one of its ModelChoiceFields, whose queryset it narrows per user."""
    field = form.fields[name]
    assert isinstance(field, forms.ModelChoiceField), f"{name} is not a ModelChoiceField"
    return field


def _drop_errors(form: forms.Form, names) -> None:
    """Forget errors of fields the chosen option does not use: the page hides them, and
    their values are not stored."""
    for name in names:
        form.errors.pop(name, None)


def _seconds(value: float) -> str:
    """A duration as a person reads it: 12,345 s, or 1.2e+300 s rather than 301 digits."""
    return f"{value:,.0f} s" if value < 1e7 else f"{value:.2g} s"


def _positive(value, what: str):
    if value is not None and value <= 0:
        raise forms.ValidationError(f"{what} must be greater than 0.")
    return value


class TeamForm(forms.Form):
    """A form whose row goes to one of `user`'s teams (experiments/teams.py): the one named in
    `team`, or their only team when it is left empty. A name the user is not a member of is
    refused like one that does not exist."""

    team = forms.ModelChoiceField(
        queryset=Group.objects.none(),
        to_field_name="name",
        required=False,
        help_text="Its members see it. Empty: your only team.",
        error_messages={"invalid_choice": "You are in no team named “%(value)s”."},
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        model_choice_field(self, "team").queryset = teams.teams_of(user)

    def clean_team(self) -> Group:
        try:
            return teams.team_for_write(self.user, self.cleaned_data["team"])
        except teams.TeamRefused as refused:
            raise forms.ValidationError(str(refused)) from None

    @property
    def shows_team(self) -> bool:
        """The page offers the choice to members of several teams, and shows why a team was refused."""
        offered = model_choice_field(self, "team").queryset
        return "team" in self.errors or (offered is not None and offered.count() > 1)


class ExperimentForm(ObjectiveFields, TeamForm):
    """The experiment's own settings; `experiment_fields()` gives the Experiment model fields."""

    name = forms.CharField(max_length=200, validators=[reject_markup, reject_controls])
    description = forms.CharField(
        required=False,
        max_length=MAX_DESCRIPTION_CHARS,
        validators=[reject_controls_multiline],
        widget=forms.Textarea(attrs={"rows": 2}),
    )

    target_model = forms.CharField(
        max_length=500,
        initial=default_target_model,
        help_text="Path of the model directory on the worker host.",
    )
    worker_queue = forms.SlugField(
        max_length=64,
        initial="cpu",
        help_text="Celery queue of the worker pool, e.g. cpu or h100.",
        validators=[reject_control_queue],
        # The page lists the queues that have live workers (experiments/execution/worker_queues.py) in
        # this datalist; any other name is accepted, and the experiment waits for a worker.
        widget=forms.TextInput(attrs={"list": "live-queues", "autocomplete": "off"}),
    )
    dtype = forms.ChoiceField(choices=DTYPE_CHOICES, initial="auto")
    requested_vllm_version = forms.RegexField(
        regex=r"^[0-9A-Za-z][0-9A-Za-z.+_-]*$",
        max_length=64,
        required=False,
        label="vLLM version",
        help_text="Recorded as asked for; the worker runs the version installed on its host, and each run records it.",
        error_messages={"invalid": "A version such as 0.33.0 or 0.33.0rc1."},
    )
    max_model_len = forms.IntegerField(min_value=16, max_value=1_048_576, initial=512, label="Max model length")
    tensor_parallel_size = forms.IntegerField(
        min_value=1,
        max_value=MAX_TENSOR_PARALLEL_SIZE,
        initial=1,
        required=False,
        label="Tensor parallel size",
        help_text="GPUs each vLLM server spans (--tensor-parallel-size). The queue's workers must each see that many "
        "GPUs; a worker that sees fewer fails the runs before starting a server. CPU workers run 1.",
    )
    # The "Server settings" group (experiments/rules/server_settings.py): the same for every arm.
    gpu_memory_utilization = setting_field(server_settings.BY_NAME["gpu_memory_utilization"])
    max_num_seqs = setting_field(server_settings.BY_NAME["max_num_seqs"])
    max_num_batched_tokens = setting_field(server_settings.BY_NAME["max_num_batched_tokens"])
    kv_cache_dtype = setting_field(server_settings.BY_NAME["kv_cache_dtype"])
    quantization = setting_field(server_settings.BY_NAME["quantization"])

    workload_kind = forms.ChoiceField(
        choices=Experiment.WorkloadKind.choices,
        initial=Experiment.WorkloadKind.BUILTIN,
        widget=forms.RadioSelect,
        label="Workload",
    )
    endpoint = forms.ChoiceField(
        choices=Experiment.Endpoint.choices,
        initial=Experiment.Endpoint.COMPLETIONS,
        required=False,
        widget=forms.RadioSelect,
        help_text="Chat sends each prompt (or an uploaded set's messages) through the model's chat template; "
        "a model without one gets specdash's plain template.",
    )
    prompt_set = forms.ChoiceField(choices=catalog.prompt_set_choices, required=False)
    uploaded_prompt_set = forms.ModelChoiceField(
        queryset=UploadedPromptSet.objects.none(),
        required=False,
        label="Uploaded prompt set",
        help_text="A set from the Prompt sets page, at one version.",
    )
    synthetic_input_len = forms.IntegerField(
        min_value=1, max_value=1_048_576, required=False, label="Input length (tokens)"
    )
    input_lengths = forms.CharField(
        max_length=200,
        required=False,
        label="Input lengths (words)",
        help_text=(
            "Optional. Synthetic: instead of one length, 16-256 (uniform) or 16:3, 128:5, 1024:2 (length:weight). "
            "Uploaded set: a length or a range (100-400) sends only the set's prompts of that many words."
        ),
    )
    max_tokens = forms.IntegerField(min_value=1, max_value=1_048_576, initial=128, label="Output length (max_tokens)")
    num_prompts = forms.IntegerField(
        min_value=1,
        max_value=10_000,
        initial=32,
        label="Prompts per level",
        help_text=f"Measured requests per concurrency level and repetition, each a different prompt: at least "
        f"{PROMPTS_PER_SLOT} × the highest concurrency level. Every run sends the same ones.",
    )
    ignore_eos = forms.BooleanField(
        required=False, label="ignore_eos", help_text="Always generate max_tokens; distorts acceptance."
    )

    temperature = forms.FloatField(min_value=0.0, max_value=2.0, initial=0.0)
    top_p = forms.FloatField(initial=1.0, label="Top-p")
    seed = forms.IntegerField(min_value=0, max_value=2**31 - 1, initial=0)

    concurrency_levels = forms.CharField(
        required=False,
        initial="1, 4, 8",
        help_text=f"Comma-separated, 1 to {MAX_CONCURRENCY}, at most {MAX_CONCURRENCY_LEVELS}. Empty with a "
        "break-even search below.",
    )
    search_low = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_CONCURRENCY, label="Search from",
        help_text="Break-even search, instead of listed levels: the lowest concurrency of the range. The search "
        "measures the range's two ends, then places levels between the last one the arm is settled faster at "
        "and the first it is not, until they are neighbours on the grid.",
    )  # fmt: skip
    search_high = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_CONCURRENCY, label="Search up to",
        help_text="The highest concurrency of the range.",
    )  # fmt: skip
    search_resolution = forms.FloatField(
        required=False, min_value=MIN_RESOLUTION, max_value=MAX_CONCURRENCY, initial=2.0, label="Resolution",
        help_text="The largest ratio between neighbouring levels of the search's grid: 2 places levels at 1, 2, 4, "
        "8, … and finds the break-even within a factor of 2.",
    )  # fmt: skip
    primary_metric = forms.ChoiceField(
        choices=PRIMARY_METRIC_CHOICES,
        required=False,
        initial=model_default("primary_metric"),
        label="Primary metric",
        help_text="The speedup the verdict rests on: its cells get words with the family-wise error held at 5 %. "
        "The other metrics show estimates, their words unadjusted. A preset objective sets it (another one than "
        "the default asks for a custom objective).",
    )
    primary_levels = forms.CharField(
        required=False,
        label="Levels that matter",
        help_text="Comma-separated concurrency levels from those above whose cells are the question; "
        "empty: every level.",
    )
    repetitions = forms.IntegerField(
        min_value=1,
        max_value=MAX_BLOCKS,
        initial=model_default("repetitions"),
        label="Blocks (at most)",
        help_text="In each block every arm runs once on a freshly started server, the arms in a random order. "
        "With blocks added until settled, the most the experiment may run; else the number it runs. "
        "Fewer than 3 gives estimates without verdicts.",
    )
    sequential = model_checkbox(
        "sequential",
        "Add blocks until settled",
        "Run 3 blocks, then one more at a time while a primary cell is unsettled and the maximum is not "
        "reached; the tests allow for the repeated looks. Unticked: every block runs, one test at the end. "
        "Needs a fresh server for every arm in every block.",
    )
    worthwhile_gain = forms.FloatField(
        required=False,
        initial=model_default("worthwhile_gain") * 100,
        label="Smallest gain worth deploying (%)",
        help_text="An arm shown to gain less than this at a level stops there as not worth it.",
    )
    max_device_minutes = forms.FloatField(
        required=False,
        min_value=1,
        max_value=1_000_000,
        label="Device-minutes (at most)",
        help_text="Optional budget: no block is added once the runs so far and the next block would pass it.",
    )
    server_per_block = model_checkbox(
        "server_per_block",
        "A fresh server for every arm in every block",
        "Unchecked: one server per arm for all blocks, which saves start-up time but leaves the variance between "
        "server starts out of the intervals.",
    )
    aa_replicate = model_checkbox(
        "aa_replicate",
        "A/A replicate",
        "Run the baseline twice. The copy's “speedup” over the baseline is the noise floor: how far an arm moves "
        "with no effect at all.",
    )
    profile_intervals = model_checkbox(
        "profile_intervals",
        "Profile one interval per arm and level",
        "After each arm's measured runs, a few more requests per level under vLLM's torch profiler, to show "
        "where a step's time goes (proposing, verifying, sampling). Left out of every statistic.",
    )
    draft_calibration = model_checkbox(
        "draft_calibration",
        "Measure the draft model's cost",
        "For each draft-model arm, also serve its draft model alone, with plain decoding, at the same levels with "
        "the same prompts. Its step time over the baseline's is the cost ratio c that the predicted speedup "
        "uses; without it the page makes no prediction. Adds one server per draft model and block; it gets no "
        "verdict. Arms of other methods have no draft model to serve.",
    )
    equivalence_margin = forms.FloatField(
        initial=model_default("equivalence_margin") * 100,
        label="Equivalence margin (%)",
        help_text="The smallest speedup worth acting on, in percent: an arm whose interval lies inside "
        "1 ± this margin is called equivalent.",
    )
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
        **kwargs,
    ):
        """`user`: who submits it, whose teams and prompt sets it may use. `speculative_arms`:
        how many the arm formset posts (the most there can be when unknown); `sweep_lengths`:
        how many synthetic acceptance lengths its arms list, each a server of its own per block;
        `draft_arms`: how many of the posted arms use a draft model (None: not known)."""
        super().__init__(*args, user=user, **kwargs)
        self.speculative_arms = speculative_arms
        self.sweep_lengths = sweep_lengths
        self.draft_arms = draft_arms
        prompt_sets = UploadedPromptSet.objects.visible_to(user).defer("items").select_related("team")
        prompt_set_field = model_choice_field(self, "uploaded_prompt_set")
        prompt_set_field.queryset = prompt_sets
        if prompt_sets.values("team").distinct().count() > 1:
            # Two teams may each have a "traffic v1": the choice names the team then.
            # Django calls label_from_instance on the field, so this field's own one names the team.
            prompt_set_field.label_from_instance = lambda obj: f"{obj} ({obj.team.name})"  # type: ignore[method-assign]

    @property
    def server_setting_fields(self) -> list[forms.BoundField]:
        """The "Server settings" group, in the order of the list."""
        return [self[setting.name] for setting in server_settings.SERVER_SETTINGS]

    def clean_tensor_parallel_size(self) -> int:
        """Left empty (or not posted by an older client): one GPU per server."""
        return self.cleaned_data["tensor_parallel_size"] or 1

    def clean_target_model(self):
        return clean_model_path(self.cleaned_data["target_model"])

    def clean_endpoint(self) -> str:
        """Nothing chosen (a post from before the choice existed) means completions."""
        return self.cleaned_data["endpoint"] or Experiment.Endpoint.COMPLETIONS

    def clean_input_lengths(self) -> str:
        text = self.cleaned_data["input_lengths"].strip()
        if text:
            try:
                parse_length_distribution(text)
            except ValueError as error:
                raise forms.ValidationError(str(error)) from None
        return text

    def clean_top_p(self):
        top_p = self.cleaned_data["top_p"]
        if not 0 < top_p <= 1:
            raise forms.ValidationError("Top-p must be greater than 0 and at most 1.")
        return top_p

    def clean_concurrency_levels(self) -> list[int]:
        text = self.cleaned_data["concurrency_levels"]
        return parse_concurrency_levels(text) if text.strip() else []

    def clean_equivalence_margin(self) -> float:
        """Shown in percent, stored as a fraction (2 → 0.02)."""
        percent = self.cleaned_data["equivalence_margin"]
        if not 0 < percent < MAX_MARGIN_PERCENT:
            raise forms.ValidationError(
                f"The margin must be greater than 0 and less than {MAX_MARGIN_PERCENT} (percent; got {percent:g})."
            )
        return percent / 100

    def clean_primary_metric(self) -> str:
        """Left empty (or not posted by an older client): the engine-timed TPOT."""
        return self.cleaned_data["primary_metric"] or model_default("primary_metric")

    def clean_worthwhile_gain(self) -> float:
        """Shown in percent, stored as a fraction (5 → 0.05); left empty, the model's default."""
        percent = self.cleaned_data["worthwhile_gain"]
        if percent is None:
            return model_default("worthwhile_gain")
        if not 0 < percent < MAX_MARGIN_PERCENT:
            raise forms.ValidationError(
                f"The gain must be greater than 0 and less than {MAX_MARGIN_PERCENT} (percent; got {percent:g})."
            )
        return percent / 100

    def clean_primary_levels(self) -> list[int]:
        text = self.cleaned_data["primary_levels"]
        return parse_concurrency_levels(text) if text.strip() else []

    def _check_question(self, cleaned):
        """The levels that matter are among the measured ones; blocks are added one at a time
        only where every block starts fresh servers (the arms interleave block by block)."""
        levels, primary = cleaned.get("concurrency_levels"), cleaned.get("primary_levels")
        if levels and primary and not set(primary) <= set(levels):
            missing = ", ".join(str(level) for level in primary if level not in levels)
            self.add_error("primary_levels", f"{missing} is not among the concurrency levels measured.")
        if cleaned.get("sequential") and cleaned.get("server_per_block") is False:
            self.add_error(
                "sequential",
                "Blocks can be added one at a time only with a fresh server for every arm in every block: with one "
                "server per arm the arms do not interleave. Tick the fresh server, or untick this.",
            )

    def clean_request_rate(self):
        return _positive(self.cleaned_data["request_rate"], "The request rate")

    def clean_slo_ttft_ms(self):
        return _positive(self.cleaned_data["slo_ttft_ms"], "The TTFT SLO")

    def clean_slo_tpot_ms(self):
        return _positive(self.cleaned_data["slo_tpot_ms"], "The TPOT SLO")

    def clean_slo_e2e_ms(self):
        return _positive(self.cleaned_data["slo_e2e_ms"], "The E2E SLO")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        assert cleaned is not None, "Form.clean() returns cleaned_data"
        # add_error() drops a field from cleaned_data, and two rules may refuse num_prompts.
        measured = cleaned.get("num_prompts")
        if cleaned.get("workload_kind") == Experiment.WorkloadKind.SYNTHETIC:
            self._clean_synthetic(cleaned)
        elif cleaned.get("workload_kind") == Experiment.WorkloadKind.BUILTIN:
            self._clean_builtin(cleaned)
        elif cleaned.get("workload_kind") == Experiment.WorkloadKind.UPLOADED:
            self._clean_uploaded(cleaned)
        if cleaned.get("workload_kind") != Experiment.WorkloadKind.UPLOADED:
            _drop_errors(self, ["uploaded_prompt_set"])
            cleaned["uploaded_prompt_set"] = None
        if cleaned.get("workload_kind") not in (Experiment.WorkloadKind.SYNTHETIC, Experiment.WorkloadKind.UPLOADED):
            _drop_errors(self, ["input_lengths"])
            cleaned["input_lengths"] = ""
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
        """The objective's primary metric and guards (objective_fields.py); a preset rests on its
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

    def _clean_search(self, cleaned) -> None:
        """Listed levels, or a break-even search's range (its ends become the levels measured
        first); never both. A search adds blocks until settled on fresh servers, and chooses its
        own levels, so it has no levels that matter apart from them."""
        low, high = cleaned.get("search_low"), cleaned.get("search_high")
        if low is None and high is None:
            cleaned["search_resolution"] = None
            _drop_errors(self, ["search_resolution"])
            if not cleaned.get("concurrency_levels") and "concurrency_levels" not in self.errors:
                self.add_error("concurrency_levels", "Give the concurrency levels, or a range to search below.")
            return
        for name, value in (("search_low", low), ("search_high", high)):
            if value is None and name not in self.errors:
                self.add_error(name, "A break-even search needs both ends of its range.")
        resolution = cleaned.get("search_resolution")
        if resolution is None and "search_resolution" not in self.errors:
            self.add_error("search_resolution", "A break-even search needs a resolution (2: levels 1, 2, 4, …).")
        if cleaned.get("concurrency_levels"):
            self.add_error("concurrency_levels", "Listed levels or a range to search, not both: empty this one.")
        if low is None or high is None or resolution is None:
            return
        if low >= high:
            self.add_error("search_high", f"The range must end above where it starts ({low}).")
            return
        search = SearchRange(low, high, resolution)
        cleaned["concurrency_levels"] = list(search.ends)
        if cleaned.get("primary_levels"):
            self.add_error("primary_levels", "A break-even search chooses its own levels: leave this empty.")
        if not cleaned.get("sequential") or cleaned.get("server_per_block") is False:
            self.add_error(
                "sequential",
                "A break-even search adds blocks one at a time, on a fresh server for every arm in every block: tick "
                "both.",
            )

    def _highest_levels(self, cleaned) -> list[int] | None:
        """The levels the checks of size and time must allow for: the listed ones, or a search's
        whole grid."""
        search = self._search(cleaned)
        return list(search.grid()) if search else cleaned.get("concurrency_levels")

    @staticmethod
    def _search(cleaned) -> SearchRange | None:
        low, high, resolution = cleaned.get("search_low"), cleaned.get("search_high"), cleaned.get("search_resolution")
        if low is None or high is None or resolution is None or low >= high:
            return None
        return SearchRange(low, high, resolution)

    def _check_batch(self, cleaned):
        problem = server_settings.batch_problem(cleaned)
        if problem:
            self.add_error("max_num_batched_tokens", f"Max batched tokens per step {problem}.")

    def _check_time_limit(self, cleaned):
        """The experiment's task must end before Redis would hand its message out again."""
        needed = ("warmup_requests", "num_prompts", "max_tokens", "concurrency_levels", "repetitions")
        if any(cleaned.get(name) is None for name in needed) or not cleaned["concurrency_levels"]:
            return
        # A calibration arm per draft-model arm at most (every arm when their methods are not known).
        drafts = self.speculative_arms if self.draft_arms is None else self.draft_arms
        calibrations = drafts if cleaned.get("draft_calibration") else 0
        arms = self.speculative_arms + 1 + bool(cleaned.get("aa_replicate")) + calibrations
        limit_s = experiment_limit_s(cleaned, arms=arms + self.sweep_lengths)
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
            f"At {rate:.3g} req/s the {measured} measured requests would take {_seconds(measured / rate)} just to "
            f"arrive; a run may take at most {MAX_ARRIVAL_SPAN_S} s for that, so the rate must be at least "
            f"{measured / MAX_ARRIVAL_SPAN_S:.3g} req/s.",
        )

    def _clean_synthetic(self, cleaned):
        _drop_errors(self, ["prompt_set"])
        cleaned["prompt_set"] = ""
        cleaned["prompt_set_hash"] = ""
        shortest = self._distribution_bounds(cleaned)
        input_len = cleaned.get("synthetic_input_len")
        if input_len is None and "synthetic_input_len" not in self.errors:
            self.add_error("synthetic_input_len", "Synthetic prompts need an input length.")
        count = (cleaned.get("warmup_requests") or 0) + (cleaned.get("num_prompts") or 0)
        shortest = shortest or input_len
        if shortest is not None and count > catalog.synthetic_capacity(shortest):
            self.add_error(
                "input_lengths" if cleaned.get("input_lengths") else "synthetic_input_len",
                f"Only {catalog.synthetic_capacity(shortest)} distinct prompts of {shortest} word(s) exist; "
                f"the warm-up and measured requests need {count}.",
            )

    def _distribution_bounds(self, cleaned) -> int | None:
        """With a distribution, the input length recorded (and checked against the model length)
        is its longest; returns its shortest, which bounds how many distinct prompts exist."""
        if not cleaned.get("input_lengths"):
            return None
        distribution = parse_length_distribution(cleaned["input_lengths"])
        _drop_errors(self, ["synthetic_input_len"])
        cleaned["synthetic_input_len"] = distribution.longest
        return distribution.shortest

    def _clean_builtin(self, cleaned):
        _drop_errors(self, ["synthetic_input_len"])
        cleaned["synthetic_input_len"] = None
        if not cleaned.get("prompt_set"):
            self.add_error("prompt_set", "Choose a prompt set.")
            return
        cleaned["prompt_set_hash"] = catalog.prompt_set_hash(cleaned["prompt_set"])
        warmup, measured = cleaned.get("warmup_requests"), cleaned.get("num_prompts")
        if warmup is not None and measured is not None:
            shortfall = catalog.prompt_set_shortfall(cleaned["prompt_set"], warmup=warmup, measured=measured)
            if shortfall:
                self.add_error("num_prompts", shortfall)

    def _clean_uploaded(self, cleaned):
        """An uploaded set is named in the experiment as "name vN" with its hash."""
        _drop_errors(self, ["prompt_set", "synthetic_input_len"])
        cleaned["synthetic_input_len"] = None
        prompt_set = cleaned.get("uploaded_prompt_set")
        if prompt_set is None:
            if "uploaded_prompt_set" not in self.errors:
                self.add_error("uploaded_prompt_set", "Choose an uploaded prompt set.")
            return
        team = cleaned.get("team")
        if team is not None and prompt_set.team_id != team.pk:
            self.add_error(
                "uploaded_prompt_set",
                f"The prompt set “{prompt_set}” belongs to the team “{prompt_set.team.name}”, the experiment to "
                f"“{team.name}”: upload it to that team too.",
            )
            return
        cleaned["prompt_set"], cleaned["prompt_set_hash"] = str(prompt_set)[:64], prompt_set.sha256
        try:
            available = len(catalog.uploaded_selection(prompt_set, cleaned.get("input_lengths", "")))
        except ValueError as error:
            self.add_error("input_lengths", str(error))
            return
        of_length = f" of {cleaned['input_lengths']} words" if cleaned.get("input_lengths") else ""
        warmup, measured = cleaned.get("warmup_requests"), cleaned.get("num_prompts")
        if warmup is not None and measured is not None and warmup + measured > available:
            self.add_error(
                "input_lengths" if of_length else "num_prompts",
                f"The prompt set “{prompt_set}” has {available} prompts{of_length}, but {warmup} warm-up and "
                f"{measured} measured requests need {warmup + measured} distinct ones (no prompt is sent twice in a "
                "run). Lower the prompts per level or the warm-up requests.",
            )

    def _check_prompts_per_level(self, levels: list[int] | None, measured: int | None):
        if not levels or measured is None:
            return
        needed = PROMPTS_PER_SLOT * max(levels)
        if measured < needed:
            self.add_error(
                "num_prompts",
                f"At least {PROMPTS_PER_SLOT} × the highest concurrency level ({max(levels)}) = {needed} prompts, "
                f"so that the level is reached and held (got {measured}).",
            )

    def _check_fits_model_len(self, cleaned):
        max_tokens, max_model_len = cleaned.get("max_tokens"), cleaned.get("max_model_len")
        if max_tokens is None or max_model_len is None:
            return
        if cleaned.get("workload_kind") == Experiment.WorkloadKind.SYNTHETIC:
            input_len = cleaned.get("synthetic_input_len")
            if input_len is not None and max_tokens + input_len > max_model_len:
                self.add_error(
                    "max_tokens",
                    f"max_tokens ({max_tokens}) plus the input length ({input_len}) must fit in the "
                    f"max model length ({max_model_len}).",
                )
        elif cleaned.get("prompt_set"):
            prompt_len = self._longest_prompt_words(cleaned)
            if max_tokens + prompt_len > max_model_len:
                self.add_error(
                    "max_tokens",
                    f"max_tokens ({max_tokens}) plus the longest prompt used (at least {prompt_len} tokens, one per "
                    f"word) must fit in the max model length ({max_model_len}).",
                )

    @staticmethod
    def _longest_prompt_words(cleaned) -> int:
        count = (cleaned.get("warmup_requests") or 0) + (cleaned.get("num_prompts") or 0)
        uploaded = cleaned.get("uploaded_prompt_set")
        if uploaded is not None:
            selection = catalog.uploaded_selection(uploaded, cleaned.get("input_lengths", ""))[:count]
            return max((len(uploaded.items[index]["prompt"].split()) for index in selection), default=0)
        return catalog.longest_prompt_words(cleaned["prompt_set"], count)

    def experiment_fields(self) -> dict:
        """Keyword arguments for services.experiment_create (model fields of Experiment)."""
        names = [name for name in self.fields if name not in FORM_ONLY_FIELDS]
        return {name: self.cleaned_data[name] for name in [*names, "prompt_set_hash", "guards"]}


class BudgetForm(forms.Form):
    """A running experiment's device-minute budget, changed by its owner: the experiment form's
    field and rule (empty: no budget, blocks only)."""

    max_device_minutes = ExperimentForm.declared_fields["max_device_minutes"]


class ArmForm(forms.Form):
    """One speculative arm. Only the fields its method uses end up in the ArmSpec."""

    method = forms.ChoiceField(
        choices=SPECULATIVE_METHODS,
        initial=Arm.Method.NGRAM,
        help_text="n-gram lookup (ngram) and n-gram lookup on the GPU (ngram_gpu) take the same settings, but vLLM "
        "turns async scheduling off for ngram and keeps it for ngram_gpu, as for the baseline, EAGLE, MTP and draft "
        "models: on a GPU worker pick ngram_gpu to compare n-gram speculation alone, ngram to measure it as vLLM "
        "runs it by default. CPU workers refuse ngram_gpu (it needs a GPU). Suffix decoding needs arctic-inference "
        "in the worker's vLLM environment (its runs fail before a server starts without it), gets a fresh server "
        "for every run, and runs on vLLM's V1 model runner (Model Runner V2 does not support it) while on GPU the "
        "other arms run on V2: its speedup includes the runner's difference.",
    )
    num_speculative_tokens = forms.IntegerField(min_value=1, max_value=MAX_SPECULATIVE_TOKENS, initial=4, label="k")
    prompt_lookup_min = forms.IntegerField(
        min_value=1, max_value=MAX_LOOKUP, initial=2, required=False, label="Lookup min"
    )
    prompt_lookup_max = forms.IntegerField(
        min_value=1, max_value=MAX_LOOKUP, initial=4, required=False, label="Lookup max"
    )
    model = forms.CharField(max_length=500, required=False, label="Draft / head path")
    draft_tensor_parallel_size = setting_field(server_settings.DRAFT_TENSOR_PARALLEL_SIZE)
    num_speculative_tokens_per_batch_size = forms.CharField(
        max_length=1000,
        required=False,
        label="k by batch size",
        help_text="Optional, vLLM 0.32's num_speculative_tokens_per_batch_size as it takes it: a JSON list of "
        "[first batch size, last batch size, k] bands, e.g. [[1, 8, 4], [9, 64, 0]] drafts 4 tokens while at most "
        "8 requests run in a step and none above. The first band starts at 1, the bands neither overlap nor leave "
        "gaps, each k is from 0 (no speculation) to the arm's k; batch sizes after the last band keep its k. "
        "Empty: k at every batch size. On vLLM's V1 model runner (suffix decoding on GPU) vLLM captures "
        "piecewise CUDA graphs only.",
    )
    synthetic_sweep = forms.CharField(
        max_length=200,
        required=False,
        label="Synthetic acceptance sweep",
        help_text="Optional mean acceptance lengths τ between 1 and k + 1, e.g. 1.5, 2, 2.5, 3. The arm runs again "
        "at each, with vLLM's synthetic acceptance in place of real verification (the proposer and the target "
        "still run): one more server per length and block, at every level. Those runs only show what acceptance "
        "the arm would need to pay off; they are never part of its measurements.",
    )
    label = forms.CharField(
        max_length=100, required=False, validators=[reject_markup, reject_controls], help_text="Empty: method and k."
    )

    def clean_label(self) -> str:
        """Inner runs of spaces become one, so that two labels that look alike are alike."""
        return " ".join(self.cleaned_data["label"].split())

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        assert cleaned is not None, "Form.clean() returns cleaned_data"
        method = cleaned.get("method")
        if method not in Arm.NGRAM_METHODS:
            _drop_errors(self, ["prompt_lookup_min", "prompt_lookup_max"])
        if method not in PATH_METHODS:
            _drop_errors(self, ["model", "draft_tensor_parallel_size"])
        if method in Arm.NGRAM_METHODS:
            self._clean_ngram(cleaned)
        if method in PATH_METHODS:
            self._clean_path(cleaned)
        self._clean_sweep(cleaned)
        self._clean_batch_schedule(cleaned)
        return cleaned

    def _clean_batch_schedule(self, cleaned):
        """The schedule as vLLM takes it, its bands sorted, or None when left empty."""
        name = batch_schedule.KEY
        text, k = cleaned.get(name, "").strip(), cleaned.get("num_speculative_tokens")
        if not text or k is None:
            cleaned[name] = None
            return
        try:
            schedule = json.loads(text)
        except ValueError:
            schedule = text
        problem = batch_schedule.problem(schedule, k=k)
        if problem:
            self.add_error(name, f"k by batch size: {problem}.")
            cleaned[name] = None
            return
        cleaned[name] = batch_schedule.stored(batch_schedule.normalised(schedule))

    def _clean_sweep(self, cleaned):
        k = cleaned.get("num_speculative_tokens")
        if k is None or "synthetic_sweep" in self.errors:
            cleaned["synthetic_sweep"] = []
            return
        try:
            cleaned["synthetic_sweep"] = parse_synthetic_sweep(cleaned.get("synthetic_sweep", ""), k=k)
        except forms.ValidationError as error:
            self.add_error("synthetic_sweep", error)

    def _clean_ngram(self, cleaned):
        low, high = cleaned.get("prompt_lookup_min"), cleaned.get("prompt_lookup_max")
        for name, value in (("prompt_lookup_min", low), ("prompt_lookup_max", high)):
            if value is None and name not in self.errors:
                self.add_error(name, "n-gram arms need this.")
        if low is not None and high is not None and low > high:
            self.add_error("prompt_lookup_min", f"Lookup min ({low}) must not exceed lookup max ({high}).")

    def _clean_path(self, cleaned):
        path = cleaned.get("model", "")
        if not path:
            self.add_error("model", f"Give the path of the {PATH_METHODS[cleaned['method']]}.")
            return
        try:
            cleaned["model"] = clean_model_path(path)
        except forms.ValidationError as error:
            self.add_error("model", error)

    def arm_spec(self) -> ArmSpec:
        method = self.cleaned_data["method"]
        params = {}
        if method in Arm.NGRAM_METHODS:
            params = {
                "prompt_lookup_min": self.cleaned_data["prompt_lookup_min"],
                "prompt_lookup_max": self.cleaned_data["prompt_lookup_max"],
            }
        elif method in PATH_METHODS:
            params = {"model": self.cleaned_data["model"]}
            draft_tp = self.cleaned_data.get("draft_tensor_parallel_size")
            params |= {"draft_tensor_parallel_size": draft_tp} if draft_tp is not None else {}
        schedule = self.cleaned_data.get(batch_schedule.KEY)
        params |= {batch_schedule.KEY: schedule} if schedule else {}
        return ArmSpec(
            method=method,
            num_speculative_tokens=self.cleaned_data["num_speculative_tokens"],
            params=params,
            label=self.cleaned_data["label"].strip(),
            synthetic_sweep=tuple(self.cleaned_data["synthetic_sweep"]),
        )


class BaseArmFormSet(forms.BaseFormSet):
    # Django's own words ("Please submit at most 8 forms") speak of forms, which an API client never saw.
    default_error_messages = {
        "too_many_forms": f"At most {MAX_ARMS} speculative arms.",
        "too_few_forms": "Add at least one speculative arm; the baseline is added for you.",
    }

    def __init__(self, *args, **kwargs):
        # Every row the page submits is an arm the user wants: an untouched default row
        # is validated like any other, not skipped as "empty".
        kwargs.setdefault("form_kwargs", {})["empty_permitted"] = False
        super().__init__(*args, **kwargs)

    def live_forms(self) -> list[ArmForm]:
        return [form for form in self.forms if not form.cleaned_data.get("DELETE")]

    def clean(self):
        if any(self.errors):
            return
        forms_ = self.live_forms()
        if not forms_:
            raise forms.ValidationError("Add at least one speculative arm; the baseline is added for you.")
        self._check_duplicates(forms_)

    def _check_duplicates(self, forms_):
        configs, labels = set(), {"baseline", REPLICATE_LABEL.casefold()}
        for form in forms_:
            spec = form.arm_spec()
            # The params hold lists (the batch-size schedule): their JSON is the hashable identity.
            config = (spec.method, spec.num_speculative_tokens, json.dumps(spec.params, sort_keys=True))
            if config in configs:
                form.add_error(None, "Another arm has the same method, k and parameters.")
                continue
            configs.add(config)
            label = spec.label or arm_default_label(spec)
            # "Baseline" beside "baseline" reads as the same arm on a chart legend.
            if label.casefold() in labels:
                form.add_error("label", f"Another arm is already labelled “{label}”; give this one its own label.")
            labels.add(label.casefold())

    def check_draft_tensor_parallel(self, *, target: int) -> None:
        """A draft's tensor parallel size is one vLLM takes beside the target's."""
        for form in self.live_forms():
            draft = form.cleaned_data.get("draft_tensor_parallel_size")
            problem = server_settings.draft_tensor_parallel_problem(draft, target=target) if draft else None
            if problem and form.cleaned_data.get("method") in PATH_METHODS:
                form.add_error("draft_tensor_parallel_size", f"Draft tensor parallel size {problem}.")

    def arm_specs(self) -> list[ArmSpec]:
        return [form.arm_spec() for form in self.live_forms()]

    def posted_draft_arms(self) -> int:
        """How many posted arms (not marked for deletion) use a draft model, before they are
        validated: whether "Measure the draft model's cost" has anything to measure."""
        return sum(
            1
            for form in self.forms
            if form.data.get(form.add_prefix("method")) == Arm.Method.DRAFT_MODEL
            and not form.data.get(form.add_prefix("DELETE"))
        )

    def posted_sweep_lengths(self) -> int:
        """The synthetic acceptance lengths the posted arms list, before they are validated:
        what the experiment form's time limit counts as servers beside the arms."""
        texts = (form.data.get(form.add_prefix("synthetic_sweep"), "") for form in self.forms)
        return sum(1 for text in texts for item in re.split(r"[,;]", str(text)) if item.strip())


# formset_factory makes a subclass of the formset class it is given; its stub says only BaseFormSet.
ArmFormSet = cast(
    type[BaseArmFormSet],
    forms.formset_factory(
        ArmForm,
        formset=BaseArmFormSet,
        extra=0,
        min_num=1,
        max_num=MAX_ARMS,
        # A posted TOTAL_FORMS above this builds no more forms than this (and is refused).
        absolute_max=MAX_ARMS,
        validate_max=True,
        can_delete=True,
    ),
)
ARM_FORMSET_PREFIX = "arms"


def protocol_is_valid(form: ExperimentForm, arms: BaseArmFormSet) -> bool:
    """Both validated, so that every error shows at once, then the rule across them: each
    draft's tensor parallel size beside the target's."""
    form_valid, arms_valid = form.is_valid(), arms.is_valid()
    target = form.cleaned_data.get("tensor_parallel_size") if form.is_bound else None
    if arms_valid and target is not None:
        arms.check_draft_tensor_parallel(target=target)
    return form_valid and arms.is_valid()
