"""The service profile form: validation and normalisation only. The daily curve and the
category mix are read by experiments/rules/service_load.py, which says why their notation."""

import dataclasses
from collections.abc import Collection

from django import forms

from experiments.form_kit import PRIMARY_METRIC_CHOICES, TeamForm, clean_model_path, reject_controls, reject_markup
from experiments.models import ServiceProfile
from experiments.rules import service_load
from experiments.service_profiles.services import ServiceProfileSpec


def _above_zero(value: float) -> None:
    if value <= 0:
        raise forms.ValidationError("An SLO is a time above 0 ms.")


def _slo(label: str) -> forms.FloatField:
    return forms.FloatField(required=False, max_value=3_600_000, validators=[_above_zero], label=label)


class ServiceProfileForm(forms.Form):
    """A profile's content. `categories`: the category names a mix may use (the built-in sets'
    names and the categories of the user's uploaded sets)."""

    service = forms.SlugField(
        max_length=100,
        widget=forms.TextInput(attrs={"list": "known-services"}),
        help_text="As the team's decisions name it, in lower case: e.g. chat or code-assist.",
    )
    target_model = forms.CharField(
        max_length=500,
        widget=forms.TextInput(attrs={"list": "known-models", "autocomplete": "off"}),
        help_text="The model the service runs, as the experiments name it: only their results are used.",
    )
    worker_queue = forms.SlugField(
        max_length=64,
        label="Hardware (worker queue)",
        widget=forms.TextInput(attrs={"list": "known-queues", "autocomplete": "off"}),
        help_text="The worker queue of the GPU pool it runs on, e.g. h100: experiments on other queues are not used.",
    )
    metric = forms.ChoiceField(
        choices=PRIMARY_METRIC_CHOICES,
        initial=PRIMARY_METRIC_CHOICES[0][0],
        label="Speedup that matters",
        help_text="Experiments whose question rests on another metric are left out: speedups of two metrics do "
        "not compare.",
    )
    concurrency_low = forms.IntegerField(min_value=1, max_value=service_load.MAX_CONCURRENCY, required=False,
                                         label="Lowest concurrency")  # fmt: skip
    concurrency_high = forms.IntegerField(min_value=1, max_value=service_load.MAX_CONCURRENCY, required=False,
                                          label="Highest concurrency")  # fmt: skip
    daily_concurrency = forms.CharField(
        required=False,
        max_length=2000,
        label="Daily curve",
        widget=forms.Textarea(attrs={"rows": 2, "placeholder": "0-7: 2, 8-17: 24, 18-23: 6"}),
        help_text="Instead of a range: the concurrency expected in each hour, as hours: concurrency, e.g. "
        "0-7: 2, 8-17: 24, 18-23: 6. Every hour 0–23 once.",
    )
    slo_ttft_ms = _slo("TTFT SLO (ms)")
    slo_tpot_ms = _slo("TPOT SLO (ms)")
    slo_e2e_ms = _slo("E2E SLO (ms)")
    category_mix = forms.CharField(
        required=False,
        max_length=2000,
        widget=forms.TextInput(attrs={"placeholder": "chat: 0.6, code_edit: 0.4"}),
        help_text="Optional: the share of requests per prompt category, as category: share, summing to 1. "
        "Categories are the built-in sets' names and your uploaded sets' categories.",
    )

    def __init__(self, *args, categories: Collection[str], **kwargs):
        super().__init__(*args, **kwargs)
        self.categories = categories

    def clean_service(self) -> str:
        """Lower case, as the decision form writes Decision.service."""
        return self.cleaned_data["service"].lower()

    def clean_target_model(self) -> str:
        return clean_model_path(self.cleaned_data["target_model"])

    def clean_daily_concurrency(self) -> list[int]:
        text = self.cleaned_data["daily_concurrency"].strip()
        try:
            return service_load.read_daily_curve(text) if text else []
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None

    def clean_category_mix(self) -> dict[str, float]:
        text = self.cleaned_data["category_mix"]
        reject_controls(text)
        reject_markup(text)
        try:
            mix = service_load.read_category_mix(text) if text.strip() else {}
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None
        unknown = [category for category in mix if category not in self.categories]
        if unknown:
            known = ", ".join(sorted(self.categories)) or "none"
            raise forms.ValidationError(f"No prompt set has the category {', '.join(unknown)}; known: {known}.")
        return mix

    def clean(self):
        cleaned = super().clean()
        assert cleaned is not None, "Form.clean() returns cleaned_data"
        low, high = cleaned.get("concurrency_low"), cleaned.get("concurrency_high")
        if cleaned.get("daily_concurrency"):
            if low is not None or high is not None:
                self.add_error("daily_concurrency", "Give a concurrency range or a daily curve, not both.")
        elif "daily_concurrency" not in self.errors:
            self._check_range(low, high)
        return cleaned

    def _check_range(self, low: int | None, high: int | None) -> None:
        for name, value in (("concurrency_low", low), ("concurrency_high", high)):
            if value is None and name not in self.errors:
                self.add_error(name, "Give the lowest and highest concurrency, or a daily curve instead.")
        if low is not None and high is not None and low > high:
            self.add_error("concurrency_high", f"The highest concurrency ({high}) is below the lowest ({low}).")

    def spec(self) -> ServiceProfileSpec:
        """The form's fields are named as ServiceProfileSpec's."""
        fields = dataclasses.fields(ServiceProfileSpec)
        return ServiceProfileSpec(**{field.name: self.cleaned_data[field.name] for field in fields})

    @staticmethod
    def initial_from(profile: ServiceProfile) -> dict:
        """A profile's content as the form's initial values, the curve and mix as typed."""
        return {
            "service": profile.service, "target_model": profile.target_model, "worker_queue": profile.worker_queue,
            "metric": profile.metric, "concurrency_low": profile.concurrency_low,
            "concurrency_high": profile.concurrency_high, "slo_ttft_ms": profile.slo_ttft_ms,
            "slo_tpot_ms": profile.slo_tpot_ms, "slo_e2e_ms": profile.slo_e2e_ms,
            "daily_concurrency": service_load.daily_curve_text(profile.daily_concurrency),
            "category_mix": service_load.category_mix_text(profile.category_mix),
        }  # fmt: skip


class ServiceProfileNewForm(TeamForm, ServiceProfileForm):
    """A new profile, stored in one of the user's teams."""
