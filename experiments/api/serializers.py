"""The API's shapes: the OpenAPI schema is generated from them, and the answers are their
output (payloads.py gives them what to read). The spec's fields are derived from the
experiment form's, so the schema documents exactly what the form accepts; the download rows'
from the export columns, so they are the downloads'. A field whose name is not the
attribute it reads says so with `source`."""

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypedDict

from django import forms
from django.db import models
from django.utils.choices import CallableChoiceIterator
from rest_framework import serializers

from experiments.api.submission import ARMS_KEY
from experiments.definition.forms.arms import ArmForm
from experiments.definition.forms.experiment import ExperimentForm
from experiments.measurement.deploy import batch_schedule
from experiments.measurement.engine import stream_fidelity
from experiments.models import Experiment, RequestRecord, Run, RunSummary
from experiments.results.exports import REQUEST_EXPORT_FIELDS, SUMMARY_EXPORT_FIELDS

# DRF's classes take type arguments in its stubs only.
if TYPE_CHECKING:
    Serializer = serializers.Serializer[Any]
    Field = serializers.Field[Any, Any, Any, Any]
else:
    Serializer, Field = serializers.Serializer, serializers.Field

SYNTHETIC_RUN_HELP = "Set on the runs of a synthetic acceptance sweep, which do not measure the arm."
PROGRESS_COUNTS = ("total", "queued", "running", "succeeded", "failed", "cancelled", "done")


class _SpecFieldOptions(TypedDict):
    required: bool
    help_text: str


def _number_bounds(field: forms.Field) -> dict[str, Any]:
    bounds = {"min_value": getattr(field, "min_value", None), "max_value": getattr(field, "max_value", None)}
    return {name: value for name, value in bounds.items() if value is not None}


def _spec_field(name: str, field: forms.Field) -> Field:
    """The serializer field documenting one form field; optional, since an omitted field takes
    the form's initial value."""
    common: _SpecFieldOptions = {"required": False, "help_text": str(field.help_text or field.label or name)}
    if name in ("concurrency_levels", "primary_levels"):
        return serializers.ListField(child=serializers.IntegerField(min_value=1), **common)
    if name == "synthetic_sweep":
        return serializers.ListField(child=serializers.FloatField(min_value=1), **common)
    if name == batch_schedule.KEY:
        band = serializers.ListField(child=serializers.IntegerField(min_value=0), min_length=3, max_length=3)
        return serializers.ListField(child=band, allow_null=True, **common)
    if isinstance(field, forms.BooleanField):
        return serializers.BooleanField(**common)
    if isinstance(field, forms.MultipleChoiceField):
        # DRF takes any iterable of choices; its stub asks for a Sequence (Django gives a list here).
        return serializers.ListField(child=serializers.ChoiceField(choices=field.choices), **common)  # type: ignore[arg-type]
    if isinstance(field, forms.ModelChoiceField) and field.to_field_name:
        return serializers.CharField(allow_null=True, **common | {"help_text": f"{common['help_text']} (its name)"})
    if isinstance(field, forms.ModelChoiceField):
        return serializers.IntegerField(allow_null=True, **common | {"help_text": f"{common['help_text']} (its id)"})
    # Django's FloatField is an IntegerField: ask about it first.
    if isinstance(field, forms.FloatField):
        return serializers.FloatField(allow_null=not field.required, **_number_bounds(field), **common)
    if isinstance(field, forms.IntegerField):
        return serializers.IntegerField(allow_null=not field.required, **_number_bounds(field), **common)
    # Choices read at run time (the prompt sets) would make the schema depend on the data.
    if isinstance(field, forms.ChoiceField) and not isinstance(field.choices, CallableChoiceIterator):
        # DRF takes any iterable of choices; its stub asks for a Sequence (Django gives a list here).
        return serializers.ChoiceField(choices=field.choices, **common)  # type: ignore[arg-type]
    return serializers.CharField(allow_blank=not field.required, allow_null=True, **common)


# A spec as it was given: the fields it holds and no others (an omitted field takes the form's
# initial value, so an experiment's spec leaves out what its arm's method does not take).
class _Spec(Serializer):
    def to_representation(self, instance: Any) -> dict[str, Any]:
        return {name: value for name, value in super().to_representation(instance).items() if name in instance}


def _serializer_from_form(name: str, form_class: type[forms.Form], extra: dict[str, Field]) -> type[Serializer]:
    fields = {field_name: _spec_field(field_name, field) for field_name, field in form_class.base_fields.items()}
    return type(name, (_Spec,), fields | extra)


ArmSpecSerializer = _serializer_from_form("ArmSpec", ArmForm, {})
ExperimentSpecSerializer = _serializer_from_form(
    "ExperimentSpec",
    ExperimentForm,
    {ARMS_KEY: ArmSpecSerializer(many=True, help_text="The speculative arms; the baseline is added for you.")},
)


class SpecErrorsSerializer(Serializer):
    # The serializer metaclass pops declared fields off the class, so this shadows no attribute.
    errors = serializers.DictField(  # type: ignore[assignment]
        help_text="The form's messages by field; `arms` holds one object per arm."
    )
    messages = serializers.ListField(child=serializers.CharField(), help_text="One line per refusal.")


class DetailSerializer(Serializer):
    detail = serializers.CharField()


class ArmSerializer(Serializer):
    id = serializers.IntegerField()
    position = serializers.IntegerField()
    # The serializer metaclass pops declared fields off the class, so this shadows no attribute.
    label = serializers.CharField()  # type: ignore[assignment]
    method = serializers.CharField()
    num_speculative_tokens = serializers.IntegerField(allow_null=True)
    params = serializers.DictField()
    is_baseline = serializers.BooleanField()
    is_replicate = serializers.BooleanField()
    is_calibration = serializers.BooleanField(
        help_text="Serves a draft model (params.model) alone to measure its cost; never compared with the baseline."
    )
    speculative_config = serializers.DictField(allow_null=True, help_text="vLLM's --speculative-config.")
    synthetic_sweep = serializers.ListField(
        child=serializers.FloatField(), help_text="Synthetic mean acceptance lengths the arm also ran at; [] for none."
    )


class EngineDecisionSerializer(Serializer):
    model_runner = serializers.CharField(help_text="V1 or V2; empty where vLLM's log did not say.")
    async_scheduling = serializers.BooleanField(
        allow_null=True, help_text="Null where vLLM's log did not say (vLLM 0.32 logs only turning it off)."
    )
    cuda_graphs = serializers.CharField(
        help_text="off, on, or the CUDA graph mode captured (FULL_AND_PIECEWISE, ...); empty where not logged."
    )
    kv_cache_tokens = serializers.IntegerField(allow_null=True, help_text="The KV cache's size in tokens.")
    log_lines = serializers.DictField(
        child=serializers.CharField(), help_text="Per field, the line of vLLM's log it was read from."
    )


# Reads a results.selectors.ArmProtocol.
class ArmEngineSerializer(Serializer):
    decisions = EngineDecisionSerializer(
        many=True, source="engine_decisions",
        help_text="What vLLM decided for the arm's servers, each distinct decision once; [] before any run.",
    )  # fmt: skip
    flags = serializers.ListField(
        child=serializers.CharField(), source="engine_flags",
        help_text="Where the arm's servers decided otherwise than the baseline's.",
    )  # fmt: skip


# An arm as ArmSerializer gives it, with what vLLM decided for its servers: reads a
# results.selectors.ArmProtocol (the arm's own fields from its arm).
class ExperimentArmSerializer(ArmSerializer):
    engine = ArmEngineSerializer()

    def to_representation(self, instance: Any) -> dict[str, Any]:
        return {**ArmSerializer(instance.arm).data, "engine": ArmEngineSerializer(instance).data}


# Reads the experiment (`experiment`) and what payloads.experiment_payload read beside it.
class ExperimentSerializer(Serializer):
    id = serializers.IntegerField(source="experiment.pk")
    name = serializers.CharField(source="experiment.name")
    owner = serializers.CharField(source="experiment.owner.get_username")
    status = serializers.ChoiceField(choices=Experiment.Status.choices, source="experiment.status")
    created_at = serializers.DateTimeField(source="experiment.created_at")
    started_at = serializers.DateTimeField(allow_null=True, source="experiment.started_at")
    finished_at = serializers.DateTimeField(allow_null=True, source="experiment.finished_at")
    vllm_versions = serializers.ListField(child=serializers.CharField(), source="experiment.vllm_versions")
    hardware = serializers.ListField(child=serializers.CharField(), source="experiment.hardware")
    spec = ExperimentSpecSerializer(help_text="The protocol, as a spec that could be submitted again.")
    arms = ExperimentArmSerializer(many=True)
    warnings = serializers.ListField(child=serializers.CharField())
    queue_notice = serializers.CharField(
        allow_null=True,
        help_text="While queued or running: that no live worker listens on its queue (it waits until one "
        "joins), or that this could not be told. Null otherwise.",
    )
    links = serializers.DictField(child=serializers.CharField())


class RunProgressSerializer(Serializer):
    id = serializers.IntegerField()
    arm_id = serializers.IntegerField()
    arm = serializers.CharField(source="arm.label")
    concurrency = serializers.IntegerField()
    repetition = serializers.IntegerField(help_text="The block, 1-based.")
    block_position = serializers.IntegerField()
    synthetic_acceptance_length = serializers.FloatField(allow_null=True, help_text=SYNTHETIC_RUN_HELP)
    status = serializers.ChoiceField(choices=Run.Status.choices)
    requests_done = serializers.IntegerField()
    requests_total = serializers.IntegerField()
    error = serializers.CharField()


def _numbers(
    name: str, names: tuple[str, ...], field: Callable[[], Field], extra: dict[str, Field]
) -> type[Serializer]:
    return type(name, (Serializer,), {n: field() for n in names} | extra)


ProgressSerializer = _numbers(
    "Progress",
    PROGRESS_COUNTS,
    serializers.IntegerField,
    {"status": serializers.ChoiceField(choices=Experiment.Status.choices), "runs": RunProgressSerializer(many=True)},
)
SpreadSerializer = _numbers("Spread", ("mean", "min", "max"), partial(serializers.FloatField, allow_null=True), {})


# Reads a results.block.Cell.
class SummaryCellSerializer(Serializer):
    arm_id = serializers.IntegerField(source="arm.id")
    level = serializers.IntegerField()
    runs = serializers.IntegerField(help_text="Succeeded runs (blocks) the spread is over.")
    metrics = serializers.DictField(
        child=SpreadSerializer(), source="spread", help_text="Run-summary column: mean, min, max."
    )
    drafts = serializers.IntegerField(allow_null=True)
    accepted = serializers.IntegerField(allow_null=True)
    acceptance_length = serializers.FloatField(allow_null=True, help_text="τ = 1 + accepted / drafts.")
    tokens_per_step = serializers.FloatField(allow_null=True)
    low_concurrency = serializers.BooleanField()


# Reads a SpeedupEstimate.
class SpeedupSerializer(Serializer):
    arm_id = serializers.IntegerField()
    level = serializers.IntegerField(source="concurrency")
    metric = serializers.CharField()
    point = serializers.FloatField(allow_null=True, help_text="Above 1 the arm is better.")
    ci_low = serializers.FloatField(allow_null=True)
    ci_high = serializers.FloatField(allow_null=True)
    outcome = serializers.CharField(help_text="faster, slower, equivalent, inconclusive, or why there is no call.")
    n_blocks = serializers.IntegerField(source="n_repetitions")
    n_pairs = serializers.IntegerField()
    block_ratios = serializers.ListField(child=serializers.FloatField())
    note = serializers.CharField()
    failed_arm = serializers.IntegerField()
    failed_baseline = serializers.IntegerField()
    primary = serializers.BooleanField(
        help_text="A cell of the experiment's question: its word holds the family-wise error at 5 % (docs/verdicts.md)."
    )
    confidence = serializers.FloatField(
        help_text="The confidence of ci_low..ci_high: 0.95, or for a primary cell the level its word was tested at."
    )
    p_value = serializers.FloatField(allow_null=True, help_text="A primary cell's t-test p-value at its deciding look.")
    equivalence_low = serializers.FloatField(allow_null=True, help_text="A primary cell's equivalence interval.")
    equivalence_high = serializers.FloatField(allow_null=True)


class GuardSerializer(Serializer):
    metric = serializers.CharField()
    label = serializers.CharField()
    margin = serializers.FloatField(
        help_text="How much worse it may be (a fraction): its interval must lie above 1 − this."
    )
    margin_percent = serializers.CharField()
    status = serializers.CharField(help_text="non-inferior, worse or not shown.")
    figure = serializers.CharField(help_text="Its speedup [interval] at the look that fixed it.")
    change = serializers.CharField(help_text="The same as a change against the baseline: -12 % [-20 %, -4 %].")
    blocks = serializers.IntegerField()
    confidence = serializers.FloatField(
        help_text="The two-sided level of its interval; its lower end is the one-sided test."
    )
    implied = serializers.BooleanField(
        help_text="A guard because the arm queued or was preempted where the baseline was not (or the reverse)."
    )


class JointWordSerializer(Serializer):
    word = serializers.CharField(
        help_text="For the service: pays, costs, not worth it, open, inconclusive, or why there is no call."
    )
    sentence = serializers.CharField(help_text="Why, naming the guard that blocked it.")
    primary_outcome = serializers.CharField(help_text="The primary metric's own word.")
    guards = GuardSerializer(many=True)
    blocked_by = serializers.CharField(
        help_text="The guard that keeps the arm from paying; empty when it pays or none does."
    )


class DeclaredGuardSerializer(Serializer):
    metric = serializers.CharField()
    label = serializers.CharField()
    margin = serializers.FloatField()
    margin_percent = serializers.CharField()


class ObjectiveSerializer(Serializer):
    name = serializers.CharField(help_text="interactive, shared, capacity, custom; empty: the primary metric alone.")
    label = serializers.CharField()
    explanation = serializers.CharField()
    primary = serializers.CharField()
    primary_label = serializers.CharField()
    guards = DeclaredGuardSerializer(many=True)


class ServiceBreakEvenSerializer(Serializer):
    arm_id = serializers.IntegerField()
    arm = serializers.CharField()
    state = serializers.CharField(help_text="pays at every level, pays at no level, stops paying or not settled.")
    below = serializers.IntegerField(allow_null=True, help_text="The highest level that pays, below `above`.")
    above = serializers.IntegerField(allow_null=True, help_text="The next level, settled as not paying.")
    sentence = serializers.CharField()


class QuestionCellSerializer(Serializer):
    arm_id = serializers.IntegerField()
    arm = serializers.CharField()
    level = serializers.IntegerField()
    outcome = serializers.CharField(
        help_text="faster, slower, equivalent, not worth it, open, inconclusive, or why there is no call."
    )
    figure = serializers.CharField()
    confidence = serializers.FloatField()
    confidence_percent = serializers.CharField()
    blocks = serializers.IntegerField(help_text="The blocks the word rests on (up to the look that settled it).")
    p_value = serializers.FloatField(allow_null=True)
    why = serializers.CharField()
    joint = JointWordSerializer(
        required=False,
        help_text="The word for the service's objective (candidate cells of an analysis since objectives).",
    )


class SearchLevelSerializer(Serializer):
    level = serializers.IntegerField()
    entered = serializers.IntegerField(help_text="The block the search first ran this level in.")
    outcome = serializers.CharField()
    figure = serializers.CharField()
    blocks = serializers.IntegerField()


class SearchConfirmationSerializer(Serializer):
    arm_id = serializers.IntegerField()
    arm = serializers.CharField()
    config = serializers.CharField(help_text="The --speculative-config it ran: the derived batch-size schedule of k.")
    levels = SearchLevelSerializer(many=True)
    verdict = serializers.CharField(help_text="confirmed, refuted or not settled.")


class SearchArmSerializer(Serializer):
    arm_id = serializers.IntegerField()
    arm = serializers.CharField()
    state = serializers.CharField(
        help_text="found, pays across the range, pays nowhere in the range, searching or narrowed."
    )
    sentence = serializers.CharField()
    below = serializers.IntegerField(allow_null=True, help_text="The highest level settled faster below `above`.")
    above = serializers.IntegerField(allow_null=True, help_text="The first level settled not faster.")
    crossing = serializers.FloatField(allow_null=True, help_text="Where the points cross 1 between them.")
    faster_above = serializers.ListField(child=serializers.IntegerField())
    levels = SearchLevelSerializer(many=True)
    confirmation = SearchConfirmationSerializer(allow_null=True)
    derived = serializers.CharField(
        allow_null=True, required=False,
        help_text="A found break-even's derived --speculative-config that no confirmation arm ran; null otherwise.",
    )  # fmt: skip
    unconfirmed_because = serializers.CharField(required=False, help_text="Why no confirmation arm ran it.")


class SearchDeviceSerializer(Serializer):
    minutes = serializers.FloatField()
    start_minutes = serializers.FloatField()
    load_minutes = serializers.FloatField()
    search_minutes = serializers.FloatField()
    confirmation_minutes = serializers.FloatField()
    sessions = serializers.IntegerField()
    runs = serializers.IntegerField()
    fixed_runs = serializers.IntegerField()
    fixed_minutes = serializers.FloatField(help_text="About what a fixed grid of the same resolution would spend.")
    saved_minutes = serializers.FloatField()
    mean_start_s = serializers.FloatField()
    mean_run_s = serializers.FloatField()


class SearchSerializer(Serializer):
    low = serializers.IntegerField()
    high = serializers.IntegerField()
    resolution = serializers.FloatField()
    grid = serializers.ListField(child=serializers.IntegerField())
    family_size = serializers.IntegerField()
    arms = SearchArmSerializer(many=True)
    device = SearchDeviceSerializer(allow_null=True)


class QuestionSerializer(Serializer):
    metric = serializers.CharField()
    metric_label = serializers.CharField()
    levels = serializers.ListField(child=serializers.IntegerField())
    sequential = serializers.BooleanField()
    max_blocks = serializers.IntegerField()
    looks = serializers.ListField(child=serializers.IntegerField())
    blocks_run = serializers.IntegerField()
    device_minutes = serializers.FloatField()
    budget = serializers.FloatField(allow_null=True)
    stop = serializers.CharField(help_text="settled, searched, maximum, budget or fixed.")
    stop_sentence = serializers.CharField()
    objective = ObjectiveSerializer(required=False, help_text="The service's objective the experiment declared.")
    service_break_evens = ServiceBreakEvenSerializer(
        many=True, required=False, help_text="Per arm, where it stops paying for the service (its joint words)."
    )
    cells = QuestionCellSerializer(many=True)
    replicate_cells = QuestionCellSerializer(many=True)
    confirmation_cells = QuestionCellSerializer(
        many=True, required=False, help_text="A break-even search's confirmation arms: a family of their own."
    )
    search = SearchSerializer(
        allow_null=True, required=False, help_text="A break-even search's answer; null for listed levels."
    )
    open = serializers.ListField(
        child=serializers.CharField(), help_text="Cells still open, each with about how much more would settle it."
    )


BreakEvenSerializer = _numbers(
    "BreakEven",
    ("level", "lo", "hi"),
    partial(serializers.FloatField, allow_null=True),
    {
        "state": serializers.CharField(
            help_text="crosses, pays at every measured level (faster at each), pays at no measured level "
            "(slower at each), not settled or not estimable (docs/verdicts.md, “Break-even”)."
        ),
        "reason": serializers.CharField(
            required=False,
            help_text="Why it is not settled (each level's call: faster, slower, open) or not estimable; "
            "empty otherwise. Absent from analyses stored before the states needed intervals.",
        ),
    },
)


class VerdictSerializer(Serializer):
    arm_id = serializers.IntegerField()
    arm = serializers.CharField()
    replicate = serializers.BooleanField()
    metric = serializers.CharField()
    text = serializers.CharField()
    break_even = BreakEvenSerializer()


# Reads a results.block.PositionAcceptance.
class AcceptanceSerializer(Serializer):
    arm_id = serializers.IntegerField(source="arm.id")
    drafts = serializers.IntegerField()
    accepted = serializers.ListField(child=serializers.IntegerField())
    unconditional = serializers.ListField(child=serializers.FloatField(allow_null=True))
    conditional = serializers.ListField(child=serializers.FloatField(allow_null=True))
    conditional_drafted = serializers.ListField(child=serializers.FloatField(allow_null=True))


CapacityCellSerializer = _numbers(
    "CapacityCell",
    ("kv_cache_peak", "kv_cache_mean"),
    partial(serializers.FloatField, allow_null=True, help_text="A fraction: 1 = the whole KV cache."),
    {
        "runs": serializers.IntegerField(
            help_text="Succeeded runs (blocks) that recorded the figures; 0: not recorded."
        ),
        "running_max": serializers.IntegerField(allow_null=True),
        "waiting_max": serializers.IntegerField(allow_null=True),
        "preemptions": serializers.IntegerField(allow_null=True, help_text="Summed over the runs."),
    },
)


class CapacitySerializer(Serializer):
    arm_id = serializers.IntegerField()
    level = serializers.IntegerField()
    arm = CapacityCellSerializer()
    baseline = CapacityCellSerializer(help_text="The baseline at the same level.")
    preempted_alone = serializers.BooleanField(help_text="The arm preempted here and the baseline did not.")
    queued_alone = serializers.BooleanField(help_text="Requests waited in the arm's server here, never the baseline's.")


class ProfileSerializer(Serializer):
    arm = serializers.IntegerField(help_text="The arm's id.")
    level = serializers.IntegerField()
    shares = serializers.DictField(
        child=serializers.FloatField(),
        allow_null=True,
        help_text='Proposing, verifying, sampling and other, fractions summing to 1 (docs/metrics.md "Profiled '
        'intervals"); null when the interval failed.',
    )
    step_ms = serializers.FloatField(allow_null=True, help_text="The measured runs' mean step time at this level.")
    phase_ms = serializers.DictField(
        child=serializers.FloatField(), allow_null=True, help_text="Each share times the measured step time."
    )
    requests = serializers.IntegerField(help_text="Requests sent while the profiler ran.")
    steps = serializers.IntegerField(allow_null=True, help_text="Engine steps in the trace.")
    profiled_ms = serializers.FloatField(allow_null=True, help_text="Time the trace covers.")
    error = serializers.CharField(allow_blank=True, help_text="Why the interval gave no shares, if it did not.")


class SweepLevelSerializer(Serializer):
    level = serializers.IntegerField()
    points = serializers.ListField(
        child=serializers.DictField(child=serializers.FloatField()),
        help_text="Speedup (y) at each synthetic acceptance length (x).",
    )
    break_even = serializers.FloatField(allow_null=True, help_text="The length where the speedup crosses 1.")


class SweepSerializer(Serializer):
    arm = serializers.IntegerField(help_text="The arm's id.")
    # The serializer metaclass pops declared fields off the class, so this shadows no attribute.
    label = serializers.CharField()  # type: ignore[assignment]
    tau = serializers.FloatField(allow_null=True, help_text="The arm's measured mean acceptance length.")
    lengths = serializers.ListField(child=serializers.FloatField())
    levels = SweepLevelSerializer(many=True)
    sentence = serializers.CharField()


STALL, SHARE = f"{stream_fidelity.STALL_STEPS:g}", f"{stream_fidelity.DISTORTED_RUN_SHARE:.0%}"


class StreamRunSerializer(Serializer):
    arm_id = serializers.IntegerField()
    level = serializers.IntegerField()
    block = serializers.IntegerField()
    run_id = serializers.IntegerField()
    checked = serializers.IntegerField(
        allow_null=True, help_text="Requests compared with vLLM's timing; null for runs recorded before it was."
    )
    distorted = serializers.IntegerField(allow_null=True, help_text="Checked requests whose stream was distorted.")
    stalled = serializers.IntegerField(
        allow_null=True, help_text=f"Checked requests that waited over {STALL} engine steps."
    )
    bursts = serializers.IntegerField(allow_null=True, help_text="Checked requests whose decode arrived at once.")
    late_first_tokens = serializers.IntegerField(
        allow_null=True, help_text=f"Checked requests whose first token came over {STALL} engine steps late."
    )
    span_ratio_p50 = serializers.FloatField(allow_null=True, help_text="Median client / engine decode span.")
    span_ratio_p05 = serializers.FloatField(allow_null=True, help_text="5th percentile of the same ratio.")
    flagged = serializers.BooleanField(
        help_text=f"Over {SHARE} of the checked requests distorted: the client's TPOT and TTFT get no verdict here."
    )


# Reads the experiment (`experiment`) and what payloads.results_payload read beside it.
class ResultsSerializer(Serializer):
    experiment_id = serializers.IntegerField(source="experiment.pk")
    status = serializers.ChoiceField(choices=Experiment.Status.choices, source="experiment.status")
    analysed = serializers.BooleanField(help_text="False until the experiment has finished and been analysed.")
    margin = serializers.FloatField(
        source="experiment.equivalence_margin", help_text="The equivalence margin as a fraction."
    )
    levels = serializers.ListField(child=serializers.IntegerField())
    arms = ArmSerializer(many=True)
    summaries = SummaryCellSerializer(many=True)
    speedups = SpeedupSerializer(many=True)
    question = QuestionSerializer(
        allow_null=True, help_text="The experiment's question and where each primary cell stands; null before analysis."
    )
    verdicts = VerdictSerializer(many=True)
    acceptance_by_position = AcceptanceSerializer(many=True)
    fidelity = serializers.ListField(child=serializers.DictField())
    stream_fidelity = StreamRunSerializer(
        many=True, help_text='Per run, its streams against vLLM\'s timing (docs/metrics.md "Stream fidelity").'
    )
    series = serializers.DictField(help_text="The chart series the page draws (CDFs, tokens per step, ...).")
    capacity = CapacitySerializer(many=True, help_text='Per compared arm and level, docs/metrics.md "Capacity".')
    capacity_warnings = serializers.ListField(child=serializers.CharField())
    profiles = ProfileSerializer(
        many=True, help_text="Where a step's time went, per profiled interval (not part of any statistic)."
    )
    acceptance_sweeps = SweepSerializer(
        many=True, help_text="Synthetic acceptance sweeps: speedup against acceptance length (not measurements)."
    )
    warnings = serializers.ListField(child=serializers.CharField())


def _row_serializer(
    name: str, model: type[models.Model], columns: tuple[str, ...], extra: dict[str, Field]
) -> type[Serializer]:
    """A download row: the run columns, then the table's own (a model serializer's mapping)."""
    mapped = type(
        f"{name}Fields", (serializers.ModelSerializer,), {"Meta": type("Meta", (), {"model": model, "fields": columns})}
    )
    fields = {column: mapped().fields[column] for column in columns if column not in extra}
    run = {
        "run_id": serializers.IntegerField(), "arm": serializers.CharField(), "method": serializers.CharField(),
        "concurrency": serializers.IntegerField(), "repetition": serializers.IntegerField(),
        "synthetic_acceptance_length": serializers.FloatField(allow_null=True, help_text=SYNTHETIC_RUN_HELP),
    }  # fmt: skip
    return type(name, (Serializer,), run | fields | extra)


RequestRowSerializer = _row_serializer(
    "RequestRow",
    RequestRecord,
    REQUEST_EXPORT_FIELDS,
    {
        # Stored packed (experiments/measurement/encoding/packed.py), given as lists of numbers.
        "chunk_times_ms": serializers.ListField(
            child=serializers.FloatField(), help_text=RequestRecord._meta.get_field("chunk_times_ms").help_text
        ),
        "chunk_tokens": serializers.ListField(child=serializers.IntegerField(min_value=0, max_value=2**32 - 1)),
        "spec_accepted_per_step": serializers.ListField(
            child=serializers.IntegerField(min_value=0, max_value=2**16 - 1), allow_null=True
        ),
        "spec_proposed_per_step": serializers.ListField(
            child=serializers.IntegerField(min_value=0, max_value=2**16 - 1), allow_null=True
        ),
        "output_token_ids": serializers.ListField(child=serializers.IntegerField(), allow_null=True),
    },
)
SummaryRowSerializer = _row_serializer(
    "SummaryRow", RunSummary, SUMMARY_EXPORT_FIELDS, {"run_status": serializers.ChoiceField(choices=Run.Status.choices)}
)
