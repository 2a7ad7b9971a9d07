"""The experiment form's question and design: the concurrency levels or a break-even search's
range, the primary metric and the levels that matter, blocks (added until settled or not), the
margin, the gain worth deploying, the budget, and the extra arms and intervals an experiment may
run (A/A replicate, profiles, the draft's calibration)."""

from django import forms

from experiments.definition.forms.fields import drop_errors, model_checkbox, model_default, parsed
from experiments.form_kit import PRIMARY_METRIC_CHOICES
from experiments.measurement.planning.planner import MIN_RESOLUTION, SearchRange
from experiments.rules.number_lists import MAX_CONCURRENCY, MAX_CONCURRENCY_LEVELS, parse_concurrency_levels

MAX_MARGIN_PERCENT = 50
MAX_BLOCKS = 20


def measured_levels_at_most(cleaned: dict) -> list[int]:
    """The levels an experiment may measure: the listed ones; for a break-even search, as many
    of its grid's lowest levels (the slowest to run) as it may measure per arm."""
    low, high, resolution = cleaned.get("search_low"), cleaned.get("search_high"), cleaned.get("search_resolution")
    if low is None or high is None or resolution is None or low >= high:
        return cleaned["concurrency_levels"]
    search = SearchRange(low, high, resolution)
    return list(search.grid()[: search.family_size])


class QuestionFields(forms.Form):
    """The question's and the design's fields and their rules."""

    concurrency_levels = forms.CharField(
        required=False,
        initial="1, 4, 8",
        help_text=f"Comma-separated, 1 to {MAX_CONCURRENCY}, at most {MAX_CONCURRENCY_LEVELS}. Empty with a "
        "break-even search below.",
    )
    search_low = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_CONCURRENCY, label="Search from",
        help_text="Break-even search, instead of listed levels: the lowest concurrency of the range. The search "
        "measures the range's two ends, then places levels between the last one the arm is settled faster at "
        "and the first it is not, until they are neighbours on the grid.",
    )  # fmt: skip
    search_high = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_CONCURRENCY, label="Search up to",
        help_text="The highest concurrency of the range.",
    )  # fmt: skip
    search_resolution = forms.FloatField(
        required=False, min_value=MIN_RESOLUTION, max_value=MAX_CONCURRENCY, initial=2.0, label="Resolution",
        help_text="The largest ratio between neighbouring levels of the search's grid: 2 places levels at 1, 2, 4, "
        "8, … and finds the break-even within a factor of 2.",
    )  # fmt: skip
    primary_metric = forms.ChoiceField(
        choices=PRIMARY_METRIC_CHOICES,
        required=False,
        initial=model_default("primary_metric"),
        label="Primary metric",
        help_text="The speedup the verdict rests on: its cells get words with the family-wise error held at 5 %. "
        "The other metrics show estimates, their words unadjusted. A preset objective sets it (another one than "
        "the default asks for a custom objective).",
    )
    primary_levels = forms.CharField(
        required=False,
        label="Levels that matter",
        help_text="Comma-separated concurrency levels from those above whose cells are the question; "
        "empty: every level.",
    )
    repetitions = forms.IntegerField(
        min_value=1,
        max_value=MAX_BLOCKS,
        initial=model_default("repetitions"),
        label="Blocks (at most)",
        help_text="In each block every arm runs once on a freshly started server, the arms in a random order. "
        "With blocks added until settled, the most the experiment may run; else the number it runs. "
        "Fewer than 3 gives estimates without verdicts.",
    )
    sequential = model_checkbox(
        "sequential",
        "Add blocks until settled",
        "Run 3 blocks, then one more at a time while a primary cell is unsettled and the maximum is not "
        "reached; the tests allow for the repeated looks. Unticked: every block runs, one test at the end. "
        "Needs a fresh server for every arm in every block.",
    )
    worthwhile_gain = forms.FloatField(
        required=False,
        initial=model_default("worthwhile_gain") * 100,
        label="Smallest gain worth deploying (%)",
        help_text="An arm shown to gain less than this at a level stops there as not worth it.",
    )
    max_device_minutes = forms.FloatField(
        required=False,
        min_value=1,
        max_value=1_000_000,
        label="Device-minutes (at most)",
        help_text="Optional budget: no block is added once the runs so far and the next block would pass it.",
    )
    server_per_block = model_checkbox(
        "server_per_block",
        "A fresh server for every arm in every block",
        "Unchecked: one server per arm for all blocks, which saves start-up time but leaves the variance between "
        "server starts out of the intervals.",
    )
    aa_replicate = model_checkbox(
        "aa_replicate",
        "A/A replicate",
        "Run the baseline twice. The copy's “speedup” over the baseline is the noise floor: how far an arm moves "
        "with no effect at all.",
    )
    profile_intervals = model_checkbox(
        "profile_intervals",
        "Profile one interval per arm and level",
        "After each arm's measured runs, a few more requests per level under vLLM's torch profiler, to show "
        "where a step's time goes (proposing, verifying, sampling). Left out of every statistic.",
    )
    draft_calibration = model_checkbox(
        "draft_calibration",
        "Measure the draft model's cost",
        "For each draft-model arm, also serve its draft model alone, with plain decoding, at the same levels with "
        "the same prompts. Its step time over the baseline's is the cost ratio c that the predicted speedup "
        "uses; without it the page makes no prediction. Adds one server per draft model and block; it gets no "
        "verdict. Arms of other methods have no draft model to serve.",
    )
    equivalence_margin = forms.FloatField(
        initial=model_default("equivalence_margin") * 100,
        label="Equivalence margin (%)",
        help_text="The smallest speedup worth acting on, in percent: an arm whose interval lies inside "
        "1 ± this margin is called equivalent.",
    )

    def clean_concurrency_levels(self) -> list[int]:
        text = self.cleaned_data["concurrency_levels"]
        return parsed(parse_concurrency_levels, text) if text.strip() else []

    def clean_equivalence_margin(self) -> float:
        """Shown in percent, stored as a fraction (2 → 0.02)."""
        percent = self.cleaned_data["equivalence_margin"]
        if not 0 < percent < MAX_MARGIN_PERCENT:
            raise forms.ValidationError(
                f"The margin must be greater than 0 and less than {MAX_MARGIN_PERCENT} (percent; got {percent:g})."
            )
        return percent / 100

    def clean_primary_metric(self) -> str:
        """Left empty (or not posted by an older client): the engine-timed TPOT."""
        return self.cleaned_data["primary_metric"] or model_default("primary_metric")

    def clean_worthwhile_gain(self) -> float:
        """Shown in percent, stored as a fraction (5 → 0.05); left empty, the model's default."""
        percent = self.cleaned_data["worthwhile_gain"]
        if percent is None:
            return model_default("worthwhile_gain")
        if not 0 < percent < MAX_MARGIN_PERCENT:
            raise forms.ValidationError(
                f"The gain must be greater than 0 and less than {MAX_MARGIN_PERCENT} (percent; got {percent:g})."
            )
        return percent / 100

    def clean_primary_levels(self) -> list[int]:
        text = self.cleaned_data["primary_levels"]
        return parsed(parse_concurrency_levels, text) if text.strip() else []

    def _check_question(self, cleaned):
        """The levels that matter are among the measured ones; blocks are added one at a time
        only where every block starts fresh servers (the arms interleave block by block)."""
        levels, primary = cleaned.get("concurrency_levels"), cleaned.get("primary_levels")
        if levels and primary and not set(primary) <= set(levels):
            missing = ", ".join(str(level) for level in primary if level not in levels)
            self.add_error("primary_levels", f"{missing} is not among the concurrency levels measured.")
        if cleaned.get("sequential") and cleaned.get("server_per_block") is False:
            self.add_error(
                "sequential",
                "Blocks can be added one at a time only with a fresh server for every arm in every block: with one "
                "server per arm the arms do not interleave. Tick the fresh server, or untick this.",
            )

    def _clean_search(self, cleaned) -> None:
        """Listed levels, or a break-even search's range (its ends become the levels measured
        first); never both. A search adds blocks until settled on fresh servers, and chooses its
        own levels, so it has no levels that matter apart from them."""
        low, high = cleaned.get("search_low"), cleaned.get("search_high")
        if low is None and high is None:
            cleaned["search_resolution"] = None
            drop_errors(self, ["search_resolution"])
            if not cleaned.get("concurrency_levels") and "concurrency_levels" not in self.errors:
                self.add_error("concurrency_levels", "Give the concurrency levels, or a range to search below.")
            return
        for name, value in (("search_low", low), ("search_high", high)):
            if value is None and name not in self.errors:
                self.add_error(name, "A break-even search needs both ends of its range.")
        resolution = cleaned.get("search_resolution")
        if resolution is None and "search_resolution" not in self.errors:
            self.add_error("search_resolution", "A break-even search needs a resolution (2: levels 1, 2, 4, …).")
        if cleaned.get("concurrency_levels"):
            self.add_error("concurrency_levels", "Listed levels or a range to search, not both: empty this one.")
        if low is None or high is None or resolution is None:
            return
        if low >= high:
            self.add_error("search_high", f"The range must end above where it starts ({low}).")
            return
        search = SearchRange(low, high, resolution)
        cleaned["concurrency_levels"] = list(search.ends)
        if cleaned.get("primary_levels"):
            self.add_error("primary_levels", "A break-even search chooses its own levels: leave this empty.")
        if not cleaned.get("sequential") or cleaned.get("server_per_block") is False:
            self.add_error(
                "sequential",
                "A break-even search adds blocks one at a time, on a fresh server for every arm in every block: tick "
                "both.",
            )

    def _highest_levels(self, cleaned) -> list[int] | None:
        """The levels the checks of size and time must allow for: the listed ones, or a search's
        whole grid."""
        search = self._search(cleaned)
        return list(search.grid()) if search else cleaned.get("concurrency_levels")

    @staticmethod
    def _search(cleaned) -> SearchRange | None:
        low, high, resolution = cleaned.get("search_low"), cleaned.get("search_high"), cleaned.get("search_resolution")
        if low is None or high is None or resolution is None or low >= high:
            return None
        return SearchRange(low, high, resolution)
