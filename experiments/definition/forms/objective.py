"""The experiment form's service objective (experiments/measurement/stats/objective.py): a
preset a team recognises, or its own primary metric and guards, and the guards' margin.

A preset sets the primary metric and the guards; "custom" takes the form's primary metric and
the guards ticked; "the primary metric alone" asks the single-metric question every experiment
from before objectives asked. Forms validate and normalise only: `objective_fields` gives the
model's `objective`, `primary_metric` and `guards` from what was posted."""

from django import forms

from experiments.measurement.stats import objective as objectives
from experiments.models import SpeedupEstimate

Metric = SpeedupEstimate.Metric
OBJECTIVE_CHOICES = [
    *((preset.name, preset.label) for preset in objectives.PRESETS.values()),
    (objectives.CUSTOM, "Custom: the primary metric below, and the guards ticked"),
    (objectives.SINGLE_METRIC, "The primary metric alone (no guards)"),
]
GUARD_CHOICES = [
    (str(metric), Metric(metric).label)
    for metric in (Metric.E2E, Metric.E2E_P95, Metric.TTFT, Metric.TPOT, Metric.OUTPUT_THROUGHPUT, Metric.GOODPUT)
]
MAX_GUARD_MARGIN_PERCENT = 50


def _explained() -> str:
    lines = [f"{preset.label}: {preset.explanation}" for preset in objectives.PRESETS.values()]
    return " ".join(lines)


class ObjectiveFields(forms.Form):
    """The fields, and their normalisation into the model's objective, primary metric and guards."""

    objective = forms.ChoiceField(
        choices=OBJECTIVE_CHOICES, required=False, initial="interactive", label="The service's objective",
        help_text="What the service needs, which decides when an arm pays: its primary metric must be called "
        "faster and every guard shown no worse than its margin. " + _explained(),
    )  # fmt: skip
    guard_metrics = forms.MultipleChoiceField(
        choices=GUARD_CHOICES, required=False, widget=forms.CheckboxSelectMultiple, label="Guards (custom)",
        help_text="With a custom objective: the metrics that must not get worse. Goodput needs an SLO.",
    )  # fmt: skip
    guard_margin = forms.FloatField(
        required=False, initial=objectives.GUARD_MARGIN * 100, label="Guard margin (%)",
        help_text="How much worse a guard may be and the arm still pay: its interval must lie above 1 − this. "
        "5 % by default, below the 7 % gain worth deploying, so that a gain is never bought with an equal loss.",
    )  # fmt: skip

    def clean_guard_margin(self) -> float:
        percent = self.cleaned_data["guard_margin"]
        if percent is None:
            return objectives.GUARD_MARGIN
        if not 0 < percent < MAX_GUARD_MARGIN_PERCENT:
            limit = MAX_GUARD_MARGIN_PERCENT
            raise forms.ValidationError(
                f"The margin must be greater than 0 and less than {limit} (percent; got {percent:g})."
            )
        return percent / 100

    def objective_fields(self, cleaned: dict, *, has_slo: bool) -> dict:
        """{"objective", "primary_metric", "guards"} as the model stores them; adds a form error
        where the choice cannot be tested (goodput without an SLO, no guard for custom)."""
        name = cleaned.get("objective") or objectives.SINGLE_METRIC
        margin = cleaned.get("guard_margin") or objectives.GUARD_MARGIN
        primary = cleaned.get("primary_metric") or ""
        preset = objectives.PRESETS.get(name)
        if preset is not None:
            primary = preset.primary
            wanted = [objectives.Guard(g.metric, margin) for g in preset.guards]
        elif name == objectives.CUSTOM:
            wanted = [objectives.Guard(metric, margin) for metric in cleaned.get("guard_metrics") or []]
            if Metric.GOODPUT in (g.metric for g in wanted) and not has_slo:
                self.add_error("guard_metrics", "Goodput counts the requests within the SLOs: set an SLO first.")
            if not wanted:
                self.add_error("guard_metrics", "Tick at least one guard, or choose the primary metric alone.")
        else:
            wanted = []
        guards = objectives.guards_for(wanted, primary=primary, has_slo=has_slo)
        stored = [{"metric": g.metric, "margin": g.margin} for g in guards]
        return {"objective": name, "primary_metric": primary, "guards": stored}


def objective_initial(*, objective_name: str, guards: list[dict]) -> dict:
    """An experiment's objective as the form shows it again (a clone, a re-run, the API's spec)."""
    margin = guards[0]["margin"] if guards else objectives.GUARD_MARGIN
    metrics = [g["metric"] for g in guards] if objective_name == objectives.CUSTOM else []
    return {"objective": objective_name, "guard_metrics": metrics, "guard_margin": round(margin * 100, 6)}
