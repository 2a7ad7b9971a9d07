"""Re-run and clone: an experiment's protocol as the experiment form's data, and the small
forms that start a new experiment from an old one.

A re-run sends the origin's protocol through ExperimentForm and ArmFormSet again, so it
meets today's rules (and records the prompt set's current hash); a clone opens that form
filled in. Either way the new experiment links back to its origin.
"""

import json

from django import forms

from experiments.definition.forms.arms import ARM_FORMSET_PREFIX, PATH_METHODS
from experiments.definition.forms.experiment import ExperimentForm
from experiments.definition.forms.objective import objective_initial
from experiments.form_kit import TeamForm, model_choice_field
from experiments.measurement.deploy import batch_schedule
from experiments.models import Arm, Experiment
from experiments.prompts import catalog

# ExperimentForm fields whose form value is not the model's value.
_SHOWN_APART = {
    "concurrency_levels", "primary_levels", "equivalence_margin", "worthwhile_gain", "objective", "guard_metrics",
    "guard_margin",
}  # fmt: skip


def experiment_data(origin: Experiment) -> dict:
    """The origin's settings as ExperimentForm takes them, for `initial` or as posted data."""
    data = {name: getattr(origin, name) for name in ExperimentForm.base_fields if name not in _SHOWN_APART}
    # A search's measured levels are its results, not its protocol: its range asks for them again.
    listed = [] if origin.search_range else sorted(origin.concurrency_levels)
    data["concurrency_levels"] = ", ".join(map(str, listed))
    data["primary_levels"] = ", ".join(map(str, sorted(origin.primary_levels)))
    data["equivalence_margin"] = round(origin.equivalence_margin * 100, 6)
    data["worthwhile_gain"] = round(origin.worthwhile_gain * 100, 6)
    data |= objective_initial(objective_name=origin.objective, guards=origin.guards)
    return {name: "" if value is None else value for name, value in data.items()}


def _arm_row(arm: Arm) -> dict:
    params = arm.params or {}
    return {
        "method": arm.method,
        "num_speculative_tokens": arm.num_speculative_tokens,
        "prompt_lookup_min": params.get("prompt_lookup_min", ""),
        "prompt_lookup_max": params.get("prompt_lookup_max", ""),
        "model": params.get("model", "") if arm.method in PATH_METHODS else "",
        "draft_tensor_parallel_size": params.get("draft_tensor_parallel_size", ""),
        batch_schedule.KEY: json.dumps(params[batch_schedule.KEY]) if batch_schedule.KEY in params else "",
        "label": arm.label,
        "synthetic_sweep": ", ".join(f"{length:g}" for length in arm.synthetic_sweep),
    }


def arm_initial(origin: Experiment) -> list[dict]:
    """One ArmForm's values per speculative arm; the baseline and replicate are added anyway, and
    a search's confirmation arms again when it finds its break-even."""
    return [_arm_row(arm) for arm in origin.arms.order_by("position") if arm.is_speculative and not arm.confirms_id]


def arm_data(origin: Experiment) -> dict:
    """The speculative arms as the page posts its formset."""
    rows = arm_initial(origin)
    data = {f"{ARM_FORMSET_PREFIX}-TOTAL_FORMS": len(rows), f"{ARM_FORMSET_PREFIX}-INITIAL_FORMS": 0}
    for index, row in enumerate(rows):
        data |= {f"{ARM_FORMSET_PREFIX}-{index}-{name}": value for name, value in row.items()}
    return data


def prompt_set_changed(origin: Experiment) -> bool:
    """The built-in prompt set the origin used holds other prompts now (or is gone): a re-run
    would measure other text under the same name."""
    if origin.workload_kind != Experiment.WorkloadKind.BUILTIN or not origin.prompt_set_hash:
        return False
    try:
        return catalog.prompt_set_hash(origin.prompt_set) != origin.prompt_set_hash
    except ValueError:
        return True


def _labelled(form: forms.Form, errors: dict, where: str = "") -> list[str]:
    return [
        f"{where}{form.fields[name].label or name if name in form.fields else 'protocol'}: {message}"
        for name, messages in errors.items()
        for message in messages
    ]


def protocol_errors(form: ExperimentForm, arms: forms.BaseFormSet) -> list[str]:
    """Why an origin's protocol no longer passes the experiment form, one line per refusal."""
    lines = _labelled(form, form.errors)
    lines += [str(message) for message in arms.non_form_errors()]
    for number, arm_form in enumerate(arms.forms, start=1):
        lines += _labelled(arm_form, arm_form.errors, f"arm {number}, ")
    return lines


class RerunForm(TeamForm):
    """What a re-run may change: its name, the team, the worker queue and the vLLM version
    asked for. The fields are ExperimentForm's own, so they validate alike."""

    name = ExperimentForm.base_fields["name"]
    worker_queue = ExperimentForm.base_fields["worker_queue"]
    requested_vllm_version = ExperimentForm.base_fields["requested_vllm_version"]

    @classmethod
    def for_origin(cls, origin: Experiment, *, user) -> "RerunForm":
        return cls(
            user=user,
            initial={
                "name": f"{origin.name} (re-run)"[:200],
                "team": origin.team,
                "worker_queue": origin.worker_queue,
                "requested_vllm_version": origin.requested_vllm_version,
            },
        )


class OriginForm(forms.Form):
    """The experiment a cloned form started from, sent along as a hidden field."""

    origin = forms.ModelChoiceField(
        queryset=Experiment.objects.none(),
        required=False,
        widget=forms.HiddenInput,
        error_messages={
            "invalid_choice": "The experiment this form was cloned from is not one you can see (it was deleted, "
            "belongs to another team, or the link was changed); nothing was saved. Open the clone again from an "
            "experiment's page."
        },
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        model_choice_field(self, "origin").queryset = Experiment.objects.visible_to(user)
