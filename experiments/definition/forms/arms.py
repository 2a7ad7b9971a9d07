"""The experiment form's speculative arms: one form per arm (method, k, its method's settings,
an optional batch-size schedule of k and synthetic acceptance sweep, a label) and the formset
that holds them (at least one, no two alike)."""

import json
import re
from typing import Any, cast

from django import forms

from experiments.analysis.variance import ONE_SERVER_PER_RUN_METHODS
from experiments.definition.forms.fields import drop_errors, parsed, setting_field
from experiments.definition.services import REPLICATE_LABEL, ArmSpec, arm_default_label
from experiments.form_kit import clean_model_path, reject_controls, reject_markup
from experiments.measurement.deploy import batch_schedule
from experiments.measurement.planning.limits import MAX_LOOKUP, MAX_SPECULATIVE_TOKENS
from experiments.models import Arm
from experiments.rules import server_settings, speculation_targets
from experiments.rules.number_lists import parse_synthetic_sweep

MAX_ARMS = 8
SPECULATIVE_METHODS = [(value, label) for value, label in Arm.Method.choices if value != Arm.Method.BASELINE]

# Which arm fields each method uses; the others are ignored (and hidden in the page).
# Methods that take a path ("model" in vLLM's speculative config) map to what it points at.
PATH_METHODS = {
    Arm.Method.DRAFT_MODEL: "draft model",
    Arm.Method.EAGLE: "EAGLE head",
    Arm.Method.EAGLE3: "EAGLE-3 head",
}


class ArmForm(forms.Form):
    """One speculative arm. Only the fields its method uses end up in the ArmSpec."""

    method = forms.ChoiceField(
        choices=SPECULATIVE_METHODS,
        initial=Arm.Method.NGRAM,
        help_text="n-gram lookup (ngram) and n-gram lookup on the GPU (ngram_gpu) take the same settings, but vLLM "
        "turns async scheduling off for ngram and keeps it for ngram_gpu, as for the baseline, EAGLE, MTP and draft "
        "models: on a GPU worker pick ngram_gpu to compare n-gram speculation alone, ngram to measure it as vLLM "
        "runs it by default. CPU workers refuse ngram_gpu (it needs a GPU). Suffix decoding needs arctic-inference "
        "in the worker's vLLM environment (its runs fail before a server starts without it), gets a fresh server "
        "for every run, and runs on vLLM's V1 model runner (Model Runner V2 does not support it) while on GPU the "
        "other arms run on V2: its speedup includes the runner's difference.",
    )
    num_speculative_tokens = forms.IntegerField(min_value=1, max_value=MAX_SPECULATIVE_TOKENS, initial=4, label="k")
    prompt_lookup_min = forms.IntegerField(
        min_value=1, max_value=MAX_LOOKUP, initial=2, required=False, label="Lookup min"
    )
    prompt_lookup_max = forms.IntegerField(
        min_value=1, max_value=MAX_LOOKUP, initial=4, required=False, label="Lookup max"
    )
    model = forms.CharField(max_length=500, required=False, label="Draft / head path")
    draft_tensor_parallel_size = setting_field(server_settings.DRAFT_TENSOR_PARALLEL_SIZE)
    num_speculative_tokens_per_batch_size = forms.CharField(
        max_length=1000,
        required=False,
        label="k by batch size",
        help_text="Optional, vLLM 0.32's num_speculative_tokens_per_batch_size as it takes it: a JSON list of "
        "[first batch size, last batch size, k] bands, e.g. [[1, 8, 4], [9, 64, 0]] drafts 4 tokens while at most "
        "8 requests run in a step and none above. The first band starts at 1, the bands neither overlap nor leave "
        "gaps, each k is from 0 (no speculation) to the arm's k; batch sizes after the last band keep its k. "
        "Empty: k at every batch size. On vLLM's V1 model runner (suffix decoding on GPU) vLLM captures "
        "piecewise CUDA graphs only.",
    )
    synthetic_sweep = forms.CharField(
        max_length=200,
        required=False,
        label="Synthetic acceptance sweep",
        help_text="Optional mean acceptance lengths τ between 1 and k + 1, e.g. 1.5, 2, 2.5, 3. The arm runs again "
        "at each, with vLLM's synthetic acceptance in place of real verification (the proposer and the target "
        "still run): one more server per length and block, at every level. Those runs only show what acceptance "
        "the arm would need to pay off; they are never part of its measurements.",
    )
    label = forms.CharField(
        max_length=100, required=False, validators=[reject_markup, reject_controls], help_text="Empty: method and k."
    )

    def clean_label(self) -> str:
        """Inner runs of spaces become one, so that two labels that look alike are alike."""
        return " ".join(self.cleaned_data["label"].split())

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        assert cleaned is not None, "Form.clean() returns cleaned_data"
        method = cleaned.get("method")
        if method not in Arm.NGRAM_METHODS:
            drop_errors(self, ["prompt_lookup_min", "prompt_lookup_max"])
        if method not in PATH_METHODS:
            drop_errors(self, ["model", "draft_tensor_parallel_size"])
        if method in Arm.NGRAM_METHODS:
            self._clean_ngram(cleaned)
        if method in PATH_METHODS:
            self._clean_path(cleaned)
        self._clean_sweep(cleaned)
        self._clean_batch_schedule(cleaned)
        return cleaned

    def _clean_batch_schedule(self, cleaned):
        """The schedule as vLLM takes it, its bands sorted, or None when left empty."""
        name = batch_schedule.KEY
        text, k = cleaned.get(name, "").strip(), cleaned.get("num_speculative_tokens")
        if not text or k is None:
            cleaned[name] = None
            return
        try:
            schedule = json.loads(text)
        except ValueError:
            schedule = text
        problem = batch_schedule.problem(schedule, k=k)
        if problem:
            self.add_error(name, f"k by batch size: {problem}.")
            cleaned[name] = None
            return
        cleaned[name] = batch_schedule.stored(batch_schedule.normalised(schedule))

    def _clean_sweep(self, cleaned):
        k = cleaned.get("num_speculative_tokens")
        if k is None or "synthetic_sweep" in self.errors:
            cleaned["synthetic_sweep"] = []
            return
        try:
            cleaned["synthetic_sweep"] = parsed(parse_synthetic_sweep, cleaned.get("synthetic_sweep", ""), k=k)
        except forms.ValidationError as error:
            self.add_error("synthetic_sweep", error)

    def _clean_ngram(self, cleaned):
        low, high = cleaned.get("prompt_lookup_min"), cleaned.get("prompt_lookup_max")
        for name, value in (("prompt_lookup_min", low), ("prompt_lookup_max", high)):
            if value is None and name not in self.errors:
                self.add_error(name, "n-gram arms need this.")
        if low is not None and high is not None and low > high:
            self.add_error("prompt_lookup_min", f"Lookup min ({low}) must not exceed lookup max ({high}).")

    def _clean_path(self, cleaned):
        path = cleaned.get("model", "")
        if not path:
            self.add_error("model", f"Give the path of the {PATH_METHODS[cleaned['method']]}.")
            return
        try:
            cleaned["model"] = clean_model_path(path)
        except forms.ValidationError as error:
            self.add_error("model", error)

    def arm_spec(self) -> ArmSpec:
        method = self.cleaned_data["method"]
        params = {}
        if method in Arm.NGRAM_METHODS:
            params = {
                "prompt_lookup_min": self.cleaned_data["prompt_lookup_min"],
                "prompt_lookup_max": self.cleaned_data["prompt_lookup_max"],
            }
        elif method in PATH_METHODS:
            params = {"model": self.cleaned_data["model"]}
            draft_tp = self.cleaned_data.get("draft_tensor_parallel_size")
            params |= {"draft_tensor_parallel_size": draft_tp} if draft_tp is not None else {}
        schedule = self.cleaned_data.get(batch_schedule.KEY)
        params |= {batch_schedule.KEY: schedule} if schedule else {}
        return ArmSpec(
            method=method,
            num_speculative_tokens=self.cleaned_data["num_speculative_tokens"],
            params=params,
            label=self.cleaned_data["label"].strip(),
            synthetic_sweep=tuple(self.cleaned_data["synthetic_sweep"]),
        )


class BaseArmFormSet(forms.BaseFormSet):
    # Django's own words ("Please submit at most 8 forms") speak of forms, which an API client never saw.
    default_error_messages = {
        "too_many_forms": f"At most {MAX_ARMS} speculative arms.",
        "too_few_forms": "Add at least one speculative arm; the baseline is added for you.",
    }

    def __init__(self, *args, **kwargs):
        # Every row the page submits is an arm the user wants: an untouched default row
        # is validated like any other, not skipped as "empty".
        kwargs.setdefault("form_kwargs", {})["empty_permitted"] = False
        super().__init__(*args, **kwargs)

    def live_forms(self) -> list[ArmForm]:
        return [form for form in self.forms if not form.cleaned_data.get("DELETE")]

    def clean(self):
        if any(self.errors):
            return
        forms_ = self.live_forms()
        if not forms_:
            raise forms.ValidationError("Add at least one speculative arm; the baseline is added for you.")
        self._check_duplicates(forms_)

    def _check_duplicates(self, forms_):
        configs, labels = set(), {"baseline", REPLICATE_LABEL.casefold()}
        for form in forms_:
            spec = form.arm_spec()
            # The params hold lists (the batch-size schedule): their JSON is the hashable identity.
            config = (spec.method, spec.num_speculative_tokens, json.dumps(spec.params, sort_keys=True))
            if config in configs:
                form.add_error(None, "Another arm has the same method, k and parameters.")
                continue
            configs.add(config)
            label = spec.label or arm_default_label(spec)
            # "Baseline" beside "baseline" reads as the same arm on a chart legend.
            if label.casefold() in labels:
                form.add_error("label", f"Another arm is already labelled “{label}”; give this one its own label.")
            labels.add(label.casefold())

    def check_draft_tensor_parallel(self, *, target: int) -> None:
        """A draft's tensor parallel size is one vLLM takes beside the target's
        (experiments/rules/speculation_targets.py)."""
        for form in self.live_forms():
            method, draft = form.cleaned_data.get("method"), form.cleaned_data.get("draft_tensor_parallel_size")
            problem = speculation_targets.draft_tensor_parallel_problem(str(method), draft, target=target)
            if problem and method in PATH_METHODS:
                form.add_error("draft_tensor_parallel_size", f"Draft tensor parallel size {problem}.")

    def check_target(self, target_model: str) -> None:
        """Each arm's method runs beside this target: MTP needs the target's own MTP layers,
        read from its config.json where this host holds it (experiments/rules/speculation_targets.py)."""
        for form in self.live_forms():
            problem = speculation_targets.target_problem(str(form.cleaned_data.get("method")), target_model)
            if problem:
                form.add_error("method", f"{problem[0].upper()}{problem[1:]}.")

    def arm_specs(self) -> list[ArmSpec]:
        return [form.arm_spec() for form in self.live_forms()]

    def posted_draft_arms(self) -> int:
        """How many posted arms (not marked for deletion) use a draft model, before they are
        validated: whether "Measure the draft model's cost" has anything to measure."""
        return sum(
            1
            for form in self.forms
            if form.data.get(form.add_prefix("method")) == Arm.Method.DRAFT_MODEL
            and not form.data.get(form.add_prefix("DELETE"))
        )

    def posted_per_run_arms(self) -> int:
        """How many posted arms start a server for every run (suffix decoding keeps a cache of
        earlier responses for its server's life: workers/runner.py), before they are validated:
        the experiment form's time limit counts their server starts per run."""
        return sum(
            1
            for form in self.forms
            if form.data.get(form.add_prefix("method")) in ONE_SERVER_PER_RUN_METHODS
            and not form.data.get(form.add_prefix("DELETE"))
        )

    def posted_sweep_lengths(self) -> int:
        """The synthetic acceptance lengths the posted arms list, before they are validated:
        what the experiment form's time limit counts as servers beside the arms."""
        texts = (form.data.get(form.add_prefix("synthetic_sweep"), "") for form in self.forms)
        return sum(1 for text in texts for item in re.split(r"[,;]", str(text)) if item.strip())


# formset_factory makes a subclass of the formset class it is given; its stub says only BaseFormSet.
ArmFormSet = cast(
    type[BaseArmFormSet],
    forms.formset_factory(
        ArmForm,
        formset=BaseArmFormSet,
        extra=0,
        min_num=1,
        max_num=MAX_ARMS,
        # A posted TOTAL_FORMS above this builds no more forms than this (and is refused).
        absolute_max=MAX_ARMS,
        validate_max=True,
        can_delete=True,
    ),
)
ARM_FORMSET_PREFIX = "arms"
