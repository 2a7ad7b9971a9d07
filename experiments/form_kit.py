"""The form kit every domain's forms share, below the domains: a form whose row goes to one of the
user's teams (TeamForm), the text rules as field validators, a model path's rule and the metrics a
question may rest on. Forms validate and normalise only."""

import os

from django import forms
from django.conf import settings
from django.contrib.auth.models import Group

from experiments import teams
from experiments.rules import text_rules
from experiments.rules.model_paths import model_path_refusal

# The metrics an experiment's question may rest on (SpeedupEstimate.Metric values).
PRIMARY_METRIC_CHOICES = [
    ("server_tpot", "Engine-timed TPOT (what speculation changes)"),
    ("tpot", "TPOT at the client"),
    ("e2e", "End-to-end latency"),
    ("output_throughput", "Output throughput"),
]


def reject_markup(value: str) -> None:
    if text_rules.has_markup(value):
        raise forms.ValidationError("Must not contain < or >.")


def reject_controls(value: str, allowed: str = "") -> None:
    """Refuse invisible control and format characters (experiments/rules/text_rules.py)."""
    found = text_rules.control_char(value, allowed)
    if found:
        raise forms.ValidationError(f"Must not contain invisible control characters (found {found}).")


def reject_controls_multiline(value: str) -> None:
    reject_controls(value, allowed=text_rules.LINE_BREAKS)


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


def model_choice_field(form: forms.BaseForm, name: str) -> forms.ModelChoiceField:
    """The form's own copy of one of its ModelChoiceFields, whose queryset it narrows per user."""
    field = form.fields[name]
    assert isinstance(field, forms.ModelChoiceField), f"{name} is not a ModelChoiceField"
    return field


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
