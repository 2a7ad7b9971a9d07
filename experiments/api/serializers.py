"""The API's shapes: the OpenAPI schema is generated from them, and the answers are their
output (payloads.py gives them what to read). Here the experiment, its spec, arms and
progress, and the download rows; the results' in result_serializers.py. The spec's fields are
derived from the experiment form's, so the schema documents exactly what the form accepts;
the download rows' from the export columns, so they are the downloads'. A field whose name is
not the attribute it reads says so with `source`."""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict

from django import forms
from django.db import models
from django.utils.choices import CallableChoiceIterator
from rest_framework import serializers

from experiments.api.submission import ARMS_KEY
from experiments.definition.forms.arms import ArmForm
from experiments.definition.forms.experiment import ExperimentForm
from experiments.measurement.deploy import batch_schedule
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


def numbers(name: str, names: tuple[str, ...], field: Callable[[], Field], extra: dict[str, Field]) -> type[Serializer]:
    """A serializer of one field per name, each made by `field`, and the `extra` ones."""
    return type(name, (Serializer,), {n: field() for n in names} | extra)


ProgressSerializer = numbers(
    "Progress",
    PROGRESS_COUNTS,
    serializers.IntegerField,
    {"status": serializers.ChoiceField(choices=Experiment.Status.choices), "runs": RunProgressSerializer(many=True)},
)


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
