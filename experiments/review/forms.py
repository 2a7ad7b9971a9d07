"""The team's review: a comment on an experiment, a decision and the actions on it.
Validation and normalisation only."""

import dataclasses

from django import forms

from experiments.analysis.verdict_grid import SPEEDUP_METRICS
from experiments.decisions.services import DecisionSpec
from experiments.definition.speculative_configs import config_problem
from experiments.form_kit import reject_controls_multiline
from experiments.measurement.stats import objective
from experiments.models import Arm, Decision, Experiment, SpeedupEstimate
from experiments.rules import commands


class CommentForm(forms.Form):
    body = forms.CharField(
        label="Comment",
        max_length=5000,
        validators=[reject_controls_multiline],
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Plain text: markup is shown as typed. #12 links to experiment 12, decision #5 to that decision.",
    )

    def clean_body(self) -> str:
        body = self.cleaned_data["body"].strip()
        if not body:
            raise forms.ValidationError("Write something first.")
        return body


def _arm_choice(arm: Arm) -> str:
    config = arm.speculative_config()
    assert config is not None, "only a speculative arm is offered for deployment"
    return f"#{arm.experiment_id} {arm.label} — {commands.speculative_config_flag(config)}"


class DecisionForm(forms.Form):
    """A proposal, or its edit. The evidence and arms offered are those of `experiments`."""

    service = forms.SlugField(
        max_length=100,
        widget=forms.TextInput(attrs={"list": "known-services"}),
        help_text="The serving service this decides for, in lower case: e.g. chat or code-assist.",
    )
    kind = forms.ChoiceField(choices=Decision.Kind.choices, widget=forms.RadioSelect, label="Decision")
    evidence = forms.TypedMultipleChoiceField(
        coerce=int,
        widget=forms.CheckboxSelectMultiple,
        help_text="The experiments it rests on; their verdicts are kept with the decision as they stand now.",
    )
    arm = forms.TypedChoiceField(
        coerce=int,
        required=False,
        empty_value=None,
        label="Arm",
        help_text="For “deploy”: the arm whose --speculative-config goes to production.",
    )
    max_concurrency = forms.IntegerField(
        min_value=1,
        max_value=1_000_000,
        required=False,
        label="Up to concurrency",
        help_text="For “deploy”: the highest concurrency it is decided for.",
    )
    metric = forms.ChoiceField(
        choices=[(str(m), SpeedupEstimate.Metric(m).label) for m in SPEEDUP_METRICS],
        initial=str(SPEEDUP_METRICS[0]),
        label="Verdicts it rests on",
        help_text="The metric whose verdicts decide; a newer experiment contradicting them flags the decision.",
    )
    rationale = forms.CharField(
        max_length=5000,
        validators=[reject_controls_multiline],
        widget=forms.Textarea(attrs={"rows": 5}),
        help_text="Why, citing the evidence: plain text, #12 links to experiment 12.",
    )

    def __init__(self, data=None, *, experiments: list[Experiment], **kwargs):
        super().__init__(data, **kwargs)
        self.experiments = {experiment.id: experiment for experiment in experiments}
        evidence_field, arm_field = self.fields["evidence"], self.fields["arm"]
        # Both are declared above as choice fields.
        assert isinstance(evidence_field, forms.ChoiceField)
        assert isinstance(arm_field, forms.ChoiceField)
        evidence_field.choices = [(e.id, f"#{e.id} {e.name} ({e.get_status_display().lower()})") for e in experiments]
        self.arms = {arm.id: arm for e in experiments for arm in e.arms.all() if arm.is_speculative}
        arm_field.choices = [("", "none")] + [(arm.id, _arm_choice(arm)) for arm in self.arms.values()]

    def clean_service(self) -> str:
        return self.cleaned_data["service"].lower()

    def clean_evidence(self) -> list[Experiment]:
        cited = [self.experiments[i] for i in self.cleaned_data["evidence"]]
        unfinished = [f"#{e.id}" for e in cited if e.status != Experiment.Status.FINISHED]
        if unfinished:
            raise forms.ValidationError(f"Cite finished experiments only: {', '.join(unfinished)} has no verdicts.")
        if len({e.team_id for e in cited}) > 1:
            # The decision belongs to its evidence's team (experiments/decisions/services.py).
            raise forms.ValidationError("Cite experiments of one team: a decision belongs to its evidence's team.")
        return cited

    def clean_arm(self) -> Arm | None:
        arm_id = self.cleaned_data["arm"]
        return None if arm_id is None else self.arms[arm_id]

    def clean_rationale(self) -> str:
        return self.cleaned_data["rationale"].strip()

    def clean(self):
        cleaned = super().clean()
        assert cleaned is not None, "Form.clean() returns cleaned_data"
        kind, arm, evidence = cleaned.get("kind"), cleaned.get("arm"), cleaned.get("evidence")
        if kind == Decision.Kind.DEPLOY:
            if arm is None and "arm" not in self.errors:
                self.add_error("arm", "A deploy decision names the arm to deploy.")
            if cleaned.get("max_concurrency") is None and "max_concurrency" not in self.errors:
                self.add_error("max_concurrency", "A deploy decision says up to which concurrency.")
        if arm is not None and evidence and arm.experiment_id not in {e.id for e in evidence}:
            self.add_error("arm", f"The arm comes from #{arm.experiment_id}, which is not cited.")
        if kind == Decision.Kind.DEPLOY and arm is not None:
            problem = config_problem(
                arm.speculative_config(),
                target_model=arm.experiment.target_model,
                tensor_parallel_size=arm.experiment.tensor_parallel_size,
            )
            if problem:
                # An imported arm whose method came from its label has no settings to deploy.
                self.add_error(
                    "arm", f"This arm's --speculative-config cannot go to production: {problem}. Deploy an arm that "
                    "specdash ran, or import the files with their full speculative config.",
                )  # fmt: skip
        self._check_measured(cleaned)
        return cleaned

    def _check_measured(self, cleaned) -> None:
        """Deploying up to N rests on measurements up to N at least."""
        arm, evidence, limit = cleaned.get("arm"), cleaned.get("evidence"), cleaned.get("max_concurrency")
        if cleaned.get("kind") != Decision.Kind.DEPLOY or not (arm and evidence and limit):
            return
        config = arm.speculative_config()
        measured = [
            max(e.concurrency_levels)
            for e in evidence
            if any(a.speculative_config() == config for a in e.arms.all() if a.is_speculative)
        ]
        if measured and limit > max(measured):
            self.add_error(
                "max_concurrency",
                f"The evidence measured this arm up to concurrency {max(measured)}; a decision up to {limit} "
                "goes beyond it.",
            )
            return
        self._check_pays(evidence, config, limit)

    def _check_pays(self, evidence, config, limit: int) -> None:
        """No deploy decision rests on a level where the arm costs the service: a guard of its
        objective shown worse than its margin (experiments/measurement/stats/objective.py)."""
        arms = [a.id for e in evidence for a in e.arms.all() if a.is_speculative and a.speculative_config() == config]
        costs = SpeedupEstimate.objects.filter(
            arm_id__in=arms, primary=True, word=objective.COSTS, concurrency__lte=limit
        ).order_by("concurrency", "experiment_id")
        found = costs.first()
        if found is not None:
            self.add_error(
                "max_concurrency",
                f"#{found.experiment_id} found this arm costing the service at concurrency {found.concurrency} "
                "(a guard of its objective shown worse than its margin: see its question). Decide up to a lower "
                "concurrency, or deploy another arm.",
            )

    def spec(self) -> DecisionSpec:
        """The form's fields are named as DecisionSpec's."""
        return DecisionSpec(**{field.name: self.cleaned_data[field.name] for field in dataclasses.fields(DecisionSpec)})

    @classmethod
    def initial_from(cls, decision: Decision) -> dict:
        """A decision's content as the form's initial values (to edit or supersede it)."""
        return {
            "service": decision.service,
            "kind": decision.kind,
            "arm": decision.arm_id,
            "max_concurrency": decision.max_concurrency,
            "metric": decision.metric,
            "rationale": decision.rationale,
            "evidence": list(decision.citations.values_list("experiment_id", flat=True)),
        }


class DecisionActionForm(forms.Form):
    """Approve, reject, withdraw or dismiss a flag: the version read and, where asked, a note."""

    version = forms.IntegerField(min_value=1, widget=forms.HiddenInput)
    note = forms.CharField(
        max_length=2000,
        required=False,
        validators=[reject_controls_multiline],
        widget=forms.Textarea(attrs={"rows": 2}),
    )

    def __init__(self, data=None, *, note_required: bool = False, **kwargs):
        super().__init__(data, **kwargs)
        self.fields["note"].required = note_required
