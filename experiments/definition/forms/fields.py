"""Field builders and small rules the experiment form's parts share."""

from typing import Any

from django import forms
from django.db import models

from experiments.models import Experiment
from experiments.rules import server_settings, text_rules
from experiments.rules.server_settings import ServerSetting


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


def drop_errors(form: forms.Form, names) -> None:
    """Forget errors of fields the chosen option does not use: the page hides them, and
    their values are not stored."""
    for name in names:
        form.errors.pop(name, None)


def seconds(value: float) -> str:
    """A duration as a person reads it: 12,345 s, or 1.2e+300 s rather than 301 digits."""
    return f"{value:,.0f} s" if value < 1e7 else f"{value:.2g} s"


def positive(value, what: str):
    if value is not None and value <= 0:
        raise forms.ValidationError(f"{what} must be greater than 0.")
    return value


def parsed(parse, text: str, **kwargs):
    """A rules/number_lists.py reader's value, its refusal as the form's error."""
    try:
        return parse(text, **kwargs)
    except ValueError as refused:
        raise forms.ValidationError(str(refused)) from None
