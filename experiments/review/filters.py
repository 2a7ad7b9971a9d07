"""Which experiments to look at: the history's filters and the comparison's picks, read from
the URL so that a page can be shared. Validation only: a value that is not allowed is
reported on the page, never dropped in silence."""

import re
from datetime import date

from django import forms

from experiments.models import Arm, Decision, Experiment, SpeedupEstimate
from experiments.review.comparison import MAX_EXPERIMENTS
from experiments.review.history import (
    DECISION_STATES,
    DEFAULT_SORT,
    HEADLINE_METRICS,
    PAGE_SIZES,
    SORTS,
    FilterChoices,
    HistoryQuery,
)

MINE = "mine"


def _choice(label: str, empty: str, values, unknown: str) -> forms.ChoiceField:
    """An optional select whose refusal names the value that no experiment has."""
    return forms.ChoiceField(
        label=label,
        required=False,
        choices=[("", empty), *values],
        error_messages={"invalid_choice": unknown},
    )


class HistoryFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=200, label="Search")
    status = _choice("Status", "Any status", Experiment.Status.choices, "“%(value)s” is not a status.")
    method = _choice(
        "Method",
        "Any method",
        [(value, label) for value, label in Arm.Method.choices if value != Arm.Method.BASELINE],
        "“%(value)s” is not a speculative method.",
    )
    since = forms.DateField(required=False, label="Created from", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, label="to", widget=forms.DateInput(attrs={"type": "date"}))
    decision = _choice(
        "Decision",
        "Any or none",
        [(value, label) for value, (label, _) in DECISION_STATES.items()],
        "“%(value)s” is not a decision state.",
    )
    decision_kind = _choice("Decided", "Any decision", Decision.Kind.choices, "“%(value)s” is not a kind of decision.")
    sort = _choice("Sort", "Newest first", [(k, label) for k, (label, _) in SORTS.items()], "“%(value)s” is no order.")
    metric = _choice(
        "Headline",
        "TPOT",
        [(m, SpeedupEstimate.Metric(m).label) for m in HEADLINE_METRICS],
        "“%(value)s” is not a verdict metric.",
    )
    per_page = forms.TypedChoiceField(
        label="Per page",
        required=False,
        coerce=int,
        # Django returns empty_value as it is given; the stubs allow only a str or None.
        empty_value=PAGE_SIZES[0],  # type: ignore[arg-type]
        choices=[(size, str(size)) for size in PAGE_SIZES],
        error_messages={"invalid_choice": f"Show {', '.join(map(str, PAGE_SIZES))} per page (got “%(value)s”)."},
    )
    page = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    def __init__(self, data, *, choices: FilterChoices, **kwargs):
        super().__init__(data, **kwargs)
        self.fields["owner"] = _choice(
            "Owner",
            "Everyone",
            [(MINE, "Mine"), *((name, name) for _, name in choices.owners)],
            "There is no user “%(value)s”.",
        )
        self.fields["model"] = _choice(
            "Model", "Any model", [(m, m) for m in choices.models], "No experiment used the model “%(value)s”."
        )
        self.fields["queue"] = _choice(
            "Queue", "Any queue", [(q, q) for q in choices.queues], "No experiment ran on the queue “%(value)s”."
        )
        self.fields["hardware"] = _choice(
            "Hardware", "Any hardware", [(h, h) for h in choices.hardware], "No run recorded the hardware “%(value)s”."
        )
        self.fields["vllm"] = _choice(
            "vLLM",
            "Any vLLM",
            [(v, v) for v in choices.vllm_versions],
            "No run recorded vLLM “%(value)s”.",
        )
        self._owner_ids = {name: owner_id for owner_id, name in choices.owners}

    # How the page lays the filters out: the choice of experiments, then where and when they
    # ran, then how the list is shown.
    ROWS = (
        ("q", "status", "owner", "method", "model"),
        ("queue", "hardware", "vllm", "since", "until"),
        ("decision", "decision_kind"),
        ("sort", "metric", "per_page"),
    )

    def rows(self) -> list[list[forms.BoundField]]:
        return [[self[name] for name in row] for row in self.ROWS]

    def clean(self):
        cleaned = super().clean()
        assert cleaned is not None, "Form.clean() returns cleaned_data"
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and since > until:
            self.add_error("until", f"The range ends ({until}) before it starts ({since}).")
        if until and until >= date.max:
            # The list reads "until" as up to the start of the next day, which date.max has not.
            self.add_error("until", f"Give a date before {date.max}.")
        return cleaned

    def query(self, *, user) -> HistoryQuery:
        """The validated filters; `user` is who "mine" means."""
        data = self.cleaned_data
        owner = data["owner"]
        return HistoryQuery(
            text=data["q"].strip(),
            status=data["status"],
            owner_id=user.id if owner == MINE else self._owner_ids.get(owner),
            model=data["model"],
            method=data["method"],
            queue=data["queue"],
            hardware=data["hardware"],
            vllm_version=data["vllm"],
            since=data["since"],
            until=data["until"],
            decision=data["decision"],
            decision_kind=data["decision_kind"],
            sort=data["sort"] or DEFAULT_SORT,
        )

    # Named apart from the fields: a class attribute of a field's name would replace the field.
    @property
    def headline_metric(self) -> str:
        return self.cleaned_data["metric"] or HEADLINE_METRICS[0]

    @property
    def headline_label(self) -> str:
        return SpeedupEstimate.Metric(self.headline_metric).label

    @property
    def page_size(self) -> int:
        return self.cleaned_data["per_page"]

    @property
    def page_number(self) -> int:
        return self.cleaned_data["page"] or 1


class IdListField(forms.Field):
    """Repeated URL parameters as distinct whole numbers, in the order given; empty values
    (an "add" box left blank) are skipped."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value) -> list[int]:
        ids = []
        for item in value or []:
            item = str(item).strip().lstrip("#")
            if not item:
                continue
            # ASCII digits only, and few enough for a database id: str.isdigit() takes "²",
            # which int() refuses, and int() refuses 4,300 digits or more.
            if not re.fullmatch(r"[0-9]{1,18}", item):
                raise forms.ValidationError(f"“{item[:20]}” is not an experiment or arm number.")
            if int(item) not in ids:
                ids.append(int(item))
        return ids


class CompareForm(forms.Form):
    """Two or more experiments `user` may see and, optionally, the arms to show (all of them
    without). Another team's experiment is refused as one that does not exist."""

    experiments = IdListField(required=False)
    arms = IdListField(required=False)

    def __init__(self, data, *, user, **kwargs):
        super().__init__(data, **kwargs)
        self.user = user

    def clean_experiments(self) -> list[Experiment]:
        ids = self.cleaned_data["experiments"]
        if not 2 <= len(ids) <= MAX_EXPERIMENTS:
            raise forms.ValidationError(f"Pick 2 to {MAX_EXPERIMENTS} experiments to compare (got {len(ids)}).")
        found = Experiment.objects.visible_to(self.user).select_related("owner").in_bulk(ids)
        missing = [f"#{i}" for i in ids if i not in found]
        if missing:
            raise forms.ValidationError(f"There is no experiment {', '.join(missing)}.")
        return [found[i] for i in ids]

    def clean(self):
        cleaned = super().clean()
        assert cleaned is not None, "Form.clean() returns cleaned_data"
        experiments, arm_ids = cleaned.get("experiments"), cleaned.get("arms")
        if experiments and arm_ids:
            known = set(Arm.objects.filter(experiment__in=experiments, id__in=arm_ids).values_list("id", flat=True))
            stray = [f"{i}" for i in arm_ids if i not in known]
            if stray:
                self.add_error("arms", f"Arm {', '.join(stray)} belongs to none of these experiments.")
        return cleaned

    def arm_ids(self) -> list[int] | None:
        return self.cleaned_data["arms"] or None
