"""The experiment form's workload: what each run sends (built-in, uploaded or synthetic prompts,
their input lengths, the output length, how many prompts a level measures) and how it samples."""

from django import forms

from experiments.definition.forms.fields import drop_errors
from experiments.form_kit import model_choice_field
from experiments.models import Experiment, UploadedPromptSet
from experiments.prompts import catalog
from experiments.prompts.input_lengths import parse_length_distribution

# A level is reached and held only with several requests per slot: with fewer, the run
# spends most of its time ramping up and draining, below its nominal concurrency.
PROMPTS_PER_SLOT = 4


class WorkloadFields(forms.Form):
    """The workload's fields and their rules; `_clean_workload` keeps what the chosen kind uses."""

    workload_kind = forms.ChoiceField(
        choices=Experiment.WorkloadKind.choices,
        initial=Experiment.WorkloadKind.BUILTIN,
        widget=forms.RadioSelect,
        label="Workload",
    )
    endpoint = forms.ChoiceField(
        choices=Experiment.Endpoint.choices,
        initial=Experiment.Endpoint.COMPLETIONS,
        required=False,
        widget=forms.RadioSelect,
        help_text="Chat sends each prompt (or an uploaded set's messages) through the model's chat template; "
        "a model without one gets specdash's plain template.",
    )
    prompt_set = forms.ChoiceField(choices=catalog.prompt_set_choices, required=False)
    uploaded_prompt_set = forms.ModelChoiceField(
        queryset=UploadedPromptSet.objects.none(),
        required=False,
        label="Uploaded prompt set",
        help_text="A set from the Prompt sets page, at one version.",
    )
    synthetic_input_len = forms.IntegerField(
        min_value=1, max_value=1_048_576, required=False, label="Input length (tokens)"
    )
    input_lengths = forms.CharField(
        max_length=200,
        required=False,
        label="Input lengths (words)",
        help_text=(
            "Optional. Synthetic: instead of one length, 16-256 (uniform) or 16:3, 128:5, 1024:2 (length:weight). "
            "Uploaded set: a length or a range (100-400) sends only the set's prompts of that many words."
        ),
    )
    max_tokens = forms.IntegerField(min_value=1, max_value=1_048_576, initial=128, label="Output length (max_tokens)")
    num_prompts = forms.IntegerField(
        min_value=1,
        max_value=10_000,
        initial=32,
        label="Prompts per level",
        help_text=f"Measured requests per concurrency level and repetition, each a different prompt: at least "
        f"{PROMPTS_PER_SLOT} × the highest concurrency level. Every run sends the same ones.",
    )
    ignore_eos = forms.BooleanField(
        required=False, label="ignore_eos", help_text="Always generate max_tokens; distorts acceptance."
    )

    temperature = forms.FloatField(min_value=0.0, max_value=2.0, initial=0.0)
    top_p = forms.FloatField(initial=1.0, label="Top-p")
    seed = forms.IntegerField(min_value=0, max_value=2**31 - 1, initial=0)

    def _offer_prompt_sets(self, user) -> None:
        """The uploaded sets `user` may send."""
        prompt_sets = UploadedPromptSet.objects.visible_to(user).defer("items").select_related("team")
        prompt_set_field = model_choice_field(self, "uploaded_prompt_set")
        prompt_set_field.queryset = prompt_sets
        if prompt_sets.values("team").distinct().count() > 1:
            # Two teams may each have a "traffic v1": the choice names the team then.
            # Django calls label_from_instance on the field, so this field's own one names the team.
            prompt_set_field.label_from_instance = lambda obj: f"{obj} ({obj.team.name})"  # type: ignore[method-assign]

    def clean_endpoint(self) -> str:
        """Nothing chosen (a post from before the choice existed) means completions."""
        return self.cleaned_data["endpoint"] or Experiment.Endpoint.COMPLETIONS

    def clean_input_lengths(self) -> str:
        text = self.cleaned_data["input_lengths"].strip()
        if text:
            try:
                parse_length_distribution(text)
            except ValueError as error:
                raise forms.ValidationError(str(error)) from None
        return text

    def clean_top_p(self):
        top_p = self.cleaned_data["top_p"]
        if not 0 < top_p <= 1:
            raise forms.ValidationError("Top-p must be greater than 0 and at most 1.")
        return top_p

    def _clean_workload(self, cleaned) -> None:
        """The chosen kind's rules; the fields the other kinds use are emptied."""
        if cleaned.get("workload_kind") == Experiment.WorkloadKind.SYNTHETIC:
            self._clean_synthetic(cleaned)
        elif cleaned.get("workload_kind") == Experiment.WorkloadKind.BUILTIN:
            self._clean_builtin(cleaned)
        elif cleaned.get("workload_kind") == Experiment.WorkloadKind.UPLOADED:
            self._clean_uploaded(cleaned)
        if cleaned.get("workload_kind") != Experiment.WorkloadKind.UPLOADED:
            drop_errors(self, ["uploaded_prompt_set"])
            cleaned["uploaded_prompt_set"] = None
        if cleaned.get("workload_kind") not in (Experiment.WorkloadKind.SYNTHETIC, Experiment.WorkloadKind.UPLOADED):
            drop_errors(self, ["input_lengths"])
            cleaned["input_lengths"] = ""

    def _clean_synthetic(self, cleaned):
        drop_errors(self, ["prompt_set"])
        cleaned["prompt_set"] = ""
        cleaned["prompt_set_hash"] = ""
        shortest = self._distribution_bounds(cleaned)
        input_len = cleaned.get("synthetic_input_len")
        if input_len is None and "synthetic_input_len" not in self.errors:
            self.add_error("synthetic_input_len", "Synthetic prompts need an input length.")
        count = (cleaned.get("warmup_requests") or 0) + (cleaned.get("num_prompts") or 0)
        shortest = shortest or input_len
        if shortest is not None and count > catalog.synthetic_capacity(shortest):
            self.add_error(
                "input_lengths" if cleaned.get("input_lengths") else "synthetic_input_len",
                f"Only {catalog.synthetic_capacity(shortest)} distinct prompts of {shortest} word(s) exist; "
                f"the warm-up and measured requests need {count}.",
            )

    def _distribution_bounds(self, cleaned) -> int | None:
        """With a distribution, the input length recorded (and checked against the model length)
        is its longest; returns its shortest, which bounds how many distinct prompts exist."""
        if not cleaned.get("input_lengths"):
            return None
        distribution = parse_length_distribution(cleaned["input_lengths"])
        drop_errors(self, ["synthetic_input_len"])
        cleaned["synthetic_input_len"] = distribution.longest
        return distribution.shortest

    def _clean_builtin(self, cleaned):
        drop_errors(self, ["synthetic_input_len"])
        cleaned["synthetic_input_len"] = None
        if not cleaned.get("prompt_set"):
            self.add_error("prompt_set", "Choose a prompt set.")
            return
        cleaned["prompt_set_hash"] = catalog.prompt_set_hash(cleaned["prompt_set"])
        warmup, measured = cleaned.get("warmup_requests"), cleaned.get("num_prompts")
        if warmup is not None and measured is not None:
            shortfall = catalog.prompt_set_shortfall(cleaned["prompt_set"], warmup=warmup, measured=measured)
            if shortfall:
                self.add_error("num_prompts", shortfall)

    def _clean_uploaded(self, cleaned):
        """An uploaded set is named in the experiment as "name vN" with its hash."""
        drop_errors(self, ["prompt_set", "synthetic_input_len"])
        cleaned["synthetic_input_len"] = None
        prompt_set = cleaned.get("uploaded_prompt_set")
        if prompt_set is None:
            if "uploaded_prompt_set" not in self.errors:
                self.add_error("uploaded_prompt_set", "Choose an uploaded prompt set.")
            return
        team = cleaned.get("team")
        if team is not None and prompt_set.team_id != team.pk:
            self.add_error(
                "uploaded_prompt_set",
                f"The prompt set “{prompt_set}” belongs to the team “{prompt_set.team.name}”, the experiment to "
                f"“{team.name}”: upload it to that team too.",
            )
            return
        cleaned["prompt_set"], cleaned["prompt_set_hash"] = str(prompt_set)[:64], prompt_set.sha256
        try:
            available = len(catalog.uploaded_selection(prompt_set, cleaned.get("input_lengths", "")))
        except ValueError as error:
            self.add_error("input_lengths", str(error))
            return
        of_length = f" of {cleaned['input_lengths']} words" if cleaned.get("input_lengths") else ""
        warmup, measured = cleaned.get("warmup_requests"), cleaned.get("num_prompts")
        if warmup is not None and measured is not None and warmup + measured > available:
            self.add_error(
                "input_lengths" if of_length else "num_prompts",
                f"The prompt set “{prompt_set}” has {available} prompts{of_length}, but {warmup} warm-up and "
                f"{measured} measured requests need {warmup + measured} distinct ones (no prompt is sent twice in a "
                "run). Lower the prompts per level or the warm-up requests.",
            )

    def _check_prompts_per_level(self, levels: list[int] | None, measured: int | None):
        if not levels or measured is None:
            return
        needed = PROMPTS_PER_SLOT * max(levels)
        if measured < needed:
            self.add_error(
                "num_prompts",
                f"At least {PROMPTS_PER_SLOT} × the highest concurrency level ({max(levels)}) = {needed} prompts, "
                f"so that the level is reached and held (got {measured}).",
            )

    def _check_fits_model_len(self, cleaned):
        max_tokens, max_model_len = cleaned.get("max_tokens"), cleaned.get("max_model_len")
        if max_tokens is None or max_model_len is None:
            return
        if cleaned.get("workload_kind") == Experiment.WorkloadKind.SYNTHETIC:
            input_len = cleaned.get("synthetic_input_len")
            if input_len is not None and max_tokens + input_len > max_model_len:
                self.add_error(
                    "max_tokens",
                    f"max_tokens ({max_tokens}) plus the input length ({input_len}) must fit in the "
                    f"max model length ({max_model_len}).",
                )
        elif cleaned.get("prompt_set"):
            prompt_len = self._longest_prompt_words(cleaned)
            if max_tokens + prompt_len > max_model_len:
                self.add_error(
                    "max_tokens",
                    f"max_tokens ({max_tokens}) plus the longest prompt used (at least {prompt_len} tokens, one per "
                    f"word) must fit in the max model length ({max_model_len}).",
                )

    @staticmethod
    def _longest_prompt_words(cleaned) -> int:
        count = (cleaned.get("warmup_requests") or 0) + (cleaned.get("num_prompts") or 0)
        uploaded = cleaned.get("uploaded_prompt_set")
        if uploaded is not None:
            selection = catalog.uploaded_selection(uploaded, cleaned.get("input_lengths", ""))[:count]
            return max((len(uploaded.items[index]["prompt"].split()) for index in selection), default=0)
        return catalog.longest_prompt_words(cleaned["prompt_set"], count)
