"""An experiment spec as JSON (the API's body, the CLI's spec file) turned into what the
experiment form posts, so that ExperimentForm and ArmFormSet judge it: one set of rules and
messages for the page, the API and the command line.

A spec uses the form's field names and units (the equivalence margin in percent). A field
left out takes the value the empty form starts with, as a person who only fills in the name
would submit it.
"""

import json
from dataclasses import dataclass
from typing import Any

from django import forms
from django.contrib.auth.models import AnonymousUser, User
from django.db import models

from experiments.definition import prefill
from experiments.definition.forms.arms import ARM_FORMSET_PREFIX, ArmForm, ArmFormSet
from experiments.definition.forms.experiment import ExperimentForm, protocol_is_valid
from experiments.definition.services import ArmSpec
from experiments.measurement.deploy import batch_schedule
from experiments.models import Experiment

ARMS_KEY = "arms"
NON_FIELD = "non_field_errors"
Errors = dict[str, Any]  # messages by field; under "arms", one such dict per arm
# Fields the form takes as comma-separated text and the spec as a JSON list.
LIST_FIELDS = {"concurrency_levels", "primary_levels", "synthetic_sweep"}
# Fields the form takes as JSON text and the spec as the JSON itself (vLLM's own notation).
JSON_FIELDS = {batch_schedule.KEY}


@dataclass(frozen=True)
class Submission:
    """A spec the form accepted: the experiment's fields and its speculative arms."""

    fields: dict[str, Any]
    arms: list[ArmSpec]


class SpecInvalid(Exception):
    """The spec was refused: `errors` by field (arms by index), `messages` one line each."""

    def __init__(self, errors: Errors, messages: list[str]):
        super().__init__("; ".join(messages))
        self.errors = errors
        self.messages = messages


def _initial(field: forms.Field) -> Any:
    return field.initial() if callable(field.initial) else field.initial


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _takes_number(field: forms.Field) -> bool:
    """A field whose JSON value is a number: a count, a rate, a limit, or a row by its id."""
    if isinstance(field, forms.ModelChoiceField):
        return field.to_field_name is None
    return isinstance(field, forms.IntegerField | forms.FloatField | forms.DecimalField)


def _wrong_type(name: str, field: forms.Field, value: object) -> str | None:
    """Why a JSON value has the wrong type for its field (a number given as text, text as a
    number), or None. The value itself is not repeated: it may be anything, of any length."""
    if value is None:
        return None
    if name in LIST_FIELDS and isinstance(value, list):
        return None if all(_is_number(item) for item in value) else "Must be a list of numbers."
    if name in JSON_FIELDS and isinstance(value, list):
        return None
    if isinstance(field, forms.MultipleChoiceField):
        return (
            None if isinstance(value, list) and all(isinstance(v, str) for v in value) else "Must be a list of texts."
        )
    if _takes_number(field):
        return None if _is_number(value) else f"Must be a number, not {_json_type(value)}."
    if not isinstance(value, str):
        return f"Must be text, not {_json_type(value)}."
    return None


def _json_type(value: object) -> str:
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else "a number"


def _form_value(name: str, field: forms.Field, value: object, errors: Errors) -> Any:
    """A JSON value as the browser would post it, or None to post nothing (an unticked box)."""
    if isinstance(field, forms.BooleanField):
        if not isinstance(value, bool):
            errors[name] = ["Must be true or false."]
            return None
        return "on" if value else None
    problem = _wrong_type(name, field, value)
    if problem:
        errors[name] = [problem]
        return None
    if isinstance(value, list) and name in LIST_FIELDS:
        return ", ".join(str(item) for item in value)
    if isinstance(value, list) and name in JSON_FIELDS:
        return json.dumps(value)
    if isinstance(field, forms.MultipleChoiceField):
        return value
    if value is None:
        return ""
    return str(value)


def _asks_search(spec: dict[str, Any]) -> bool:
    return spec.get("search_low") is not None or spec.get("search_high") is not None


def _posted(spec: dict[str, Any], form_fields: dict[str, forms.Field], prefix: str, errors: Errors) -> dict[str, Any]:
    unknown = sorted(set(spec) - set(form_fields))
    for name in unknown:
        errors[name] = [f"Unknown field “{name}”; the fields are: {', '.join(form_fields)}."]
    data = {}
    for name, field in form_fields.items():
        value = _form_value(name, field, spec[name], errors) if name in spec else _default_post(field)
        if name == "concurrency_levels" and name not in spec and _asks_search(spec):
            value = ""  # a spec with a range to search lists no levels: the form's example ones would clash
        if value is not None:
            data[f"{prefix}{name}"] = value
    return data


def _default_post(field: forms.Field) -> str | None:
    value = _initial(field)
    if isinstance(field, forms.BooleanField):
        return "on" if value else None
    return "" if value is None else str(value)


def _arms_data(arms: object, errors: Errors) -> dict[str, Any]:
    if not isinstance(arms, list) or not all(isinstance(arm, dict) for arm in arms):
        errors[ARMS_KEY] = ['A list of speculative arms, each an object such as {"method": "ngram"}.']
        return {}
    data = {f"{ARM_FORMSET_PREFIX}-TOTAL_FORMS": str(len(arms)), f"{ARM_FORMSET_PREFIX}-INITIAL_FORMS": "0"}
    arm_errors: list[dict[str, list[str]]] = [{} for _ in arms]
    for index, arm in enumerate(arms):
        data |= _posted(arm, ArmForm.base_fields, f"{ARM_FORMSET_PREFIX}-{index}-", arm_errors[index])
    if any(arm_errors):
        errors[ARMS_KEY] = arm_errors
    return data


def _form_errors(form: forms.BaseForm) -> Errors:
    return {NON_FIELD if name == "__all__" else name: list(messages) for name, messages in form.errors.items()}


def _shape_messages(errors: Errors) -> list[str]:
    lines = []
    for name, messages in errors.items():
        if name == ARMS_KEY and isinstance(messages, list) and messages and isinstance(messages[0], dict):
            lines += [
                f"arm {i}, {field}: {m}" for i, arm in enumerate(messages, 1) for field, ms in arm.items() for m in ms
            ]
        else:
            lines += [f"{name}: {message}" for message in messages]
    return lines


def submission_from_spec(spec: object, *, user: User | AnonymousUser) -> Submission:
    """Validate a spec of `user`'s with the experiment form and the arm formset; raise
    SpecInvalid with the form's own messages when they refuse it."""
    if not isinstance(spec, dict):
        raise SpecInvalid({NON_FIELD: ["The spec must be a JSON object."]}, ["The spec must be a JSON object."])
    shape_errors: Errors = {}
    experiment_spec = {name: value for name, value in spec.items() if name != ARMS_KEY}
    data = _posted(experiment_spec, ExperimentForm.base_fields, "", shape_errors)
    data |= _arms_data(spec.get(ARMS_KEY, []), shape_errors)
    if shape_errors:
        raise SpecInvalid(shape_errors, _shape_messages(shape_errors))
    arms = ArmFormSet(data, prefix=ARM_FORMSET_PREFIX)
    form = ExperimentForm(
        data,
        user=user,
        speculative_arms=arms.total_form_count(),
        sweep_lengths=arms.posted_sweep_lengths(),
        draft_arms=arms.posted_draft_arms(),
        per_run_arms=arms.posted_per_run_arms(),
    )
    if not protocol_is_valid(form, arms):
        errors = _form_errors(form)
        if any(arms.errors) or arms.non_form_errors():
            errors[ARMS_KEY] = [_form_errors(arm_form) for arm_form in arms.forms]
            errors["arms_non_field_errors"] = list(arms.non_form_errors())
        raise SpecInvalid(errors, prefill.protocol_errors(form, arms))
    return Submission(fields=form.experiment_fields(), arms=arms.arm_specs())


def _json_value(field: forms.Field, value: object) -> Any:
    """A form value as the spec gives it: a row as its field takes it (a team by name, an
    uploaded prompt set by id), "" as null."""
    if isinstance(value, models.Model):
        assert isinstance(field, forms.ModelChoiceField), "only a ModelChoiceField's value is a row"
        return value.serializable_value(field.to_field_name or "pk")
    return None if value == "" else value


def _list_value(name: str, value: Any) -> Any:
    """A prefilled form value as the spec gives it: a list field's text as a list of numbers."""
    if name in JSON_FIELDS:
        return json.loads(value)
    if name != "synthetic_sweep":
        return value
    return [float(item) for item in value.split(",")]


def spec_from_experiment(experiment: Experiment) -> dict[str, Any]:
    """The experiment's protocol as a spec: what submitting it again would take."""
    spec = {
        name: _json_value(ExperimentForm.base_fields[name], value)
        for name, value in prefill.experiment_data(experiment).items()
        if name not in ("concurrency_levels", "primary_levels")
    }
    spec["concurrency_levels"] = [] if experiment.search_range else sorted(experiment.concurrency_levels)
    spec["primary_levels"] = sorted(experiment.primary_levels)
    arm_fields = ArmForm.base_fields
    spec[ARMS_KEY] = [
        {name: _list_value(name, value) for name, value in row.items() if value != "" and name in arm_fields}
        for row in prefill.arm_initial(experiment)
    ]
    return spec
