"""The shapes of an experiment's results (GET …/results/): per-cell spreads, speedups, the
question's words and guards, the break-even search, verdicts, acceptance, capacity, profiles,
acceptance sweeps and stream fidelity. As serializers.py's: the schema is generated from them
and the answers are their output (payloads.results_payload)."""

from functools import partial

from rest_framework import serializers

from experiments.api.serializers import ArmSerializer, Serializer, numbers
from experiments.measurement.engine import stream_fidelity
from experiments.models import Experiment

SpreadSerializer = numbers("Spread", ("mean", "min", "max"), partial(serializers.FloatField, allow_null=True), {})


# Reads a results.block.Cell.
class SummaryCellSerializer(Serializer):
    arm_id = serializers.IntegerField(source="arm.id")
    level = serializers.IntegerField()
    runs = serializers.IntegerField(help_text="Succeeded runs (blocks) the spread is over.")
    metrics = serializers.DictField(
        child=SpreadSerializer(), source="spread", help_text="Run-summary column: mean, min, max."
    )
    drafts = serializers.IntegerField(allow_null=True)
    accepted = serializers.IntegerField(allow_null=True)
    acceptance_length = serializers.FloatField(allow_null=True, help_text="τ = 1 + accepted / drafts.")
    tokens_per_step = serializers.FloatField(allow_null=True)
    low_concurrency = serializers.BooleanField()


# Reads a SpeedupEstimate.
class SpeedupSerializer(Serializer):
    arm_id = serializers.IntegerField()
    level = serializers.IntegerField(source="concurrency")
    metric = serializers.CharField()
    point = serializers.FloatField(allow_null=True, help_text="Above 1 the arm is better.")
    ci_low = serializers.FloatField(allow_null=True)
    ci_high = serializers.FloatField(allow_null=True)
    outcome = serializers.CharField(help_text="faster, slower, equivalent, inconclusive, or why there is no call.")
    n_blocks = serializers.IntegerField(source="n_repetitions")
    n_pairs = serializers.IntegerField()
    block_ratios = serializers.ListField(child=serializers.FloatField())
    note = serializers.CharField()
    failed_arm = serializers.IntegerField()
    failed_baseline = serializers.IntegerField()
    primary = serializers.BooleanField(
        help_text="A cell of the experiment's question: its word holds the family-wise error at 5 % (docs/verdicts.md)."
    )
    confidence = serializers.FloatField(
        help_text="The confidence of ci_low..ci_high: 0.95, or for a primary cell the level its word was tested at."
    )
    p_value = serializers.FloatField(allow_null=True, help_text="A primary cell's t-test p-value at its deciding look.")
    equivalence_low = serializers.FloatField(allow_null=True, help_text="A primary cell's equivalence interval.")
    equivalence_high = serializers.FloatField(allow_null=True)


class GuardSerializer(Serializer):
    metric = serializers.CharField()
    # The serializer metaclass pops declared fields off the class, so this shadows no attribute.
    label = serializers.CharField()  # type: ignore[assignment]
    margin = serializers.FloatField(
        help_text="How much worse it may be (a fraction): its interval must lie above 1 − this."
    )
    margin_percent = serializers.CharField()
    status = serializers.CharField(help_text="non-inferior, worse or not shown.")
    figure = serializers.CharField(help_text="Its speedup [interval] at the look that fixed it.")
    change = serializers.CharField(help_text="The same as a change against the baseline: -12 % [-20 %, -4 %].")
    blocks = serializers.IntegerField()
    confidence = serializers.FloatField(
        help_text="The two-sided level of its interval; its lower end is the one-sided test."
    )
    implied = serializers.BooleanField(
        help_text="A guard because the arm queued or was preempted where the baseline was not (or the reverse)."
    )


class JointWordSerializer(Serializer):
    word = serializers.CharField(
        help_text="For the service: pays, costs, not worth it, open, inconclusive, or why there is no call."
    )
    sentence = serializers.CharField(help_text="Why, naming the guard that blocked it.")
    primary_outcome = serializers.CharField(help_text="The primary metric's own word.")
    guards = GuardSerializer(many=True)
    blocked_by = serializers.CharField(
        help_text="The guard that keeps the arm from paying; empty when it pays or none does."
    )


class DeclaredGuardSerializer(Serializer):
    metric = serializers.CharField()
    # The serializer metaclass pops declared fields off the class, so this shadows no attribute.
    label = serializers.CharField()  # type: ignore[assignment]
    in_sentence = serializers.CharField(help_text="The label as a sentence has it (its acronyms kept).")
    margin = serializers.FloatField()
    margin_percent = serializers.CharField()


class ObjectiveSerializer(Serializer):
    name = serializers.CharField(help_text="interactive, shared, capacity, custom; empty: the primary metric alone.")
    # The serializer metaclass pops declared fields off the class, so this shadows no attribute.
    label = serializers.CharField()  # type: ignore[assignment]
    explanation = serializers.CharField()
    primary = serializers.CharField()
    primary_label = serializers.CharField()
    primary_in_sentence = serializers.CharField(help_text="The primary metric as a sentence has it.")
    guards = DeclaredGuardSerializer(many=True)


class ServiceBreakEvenSerializer(Serializer):
    arm_id = serializers.IntegerField()
    arm = serializers.CharField()
    state = serializers.CharField(help_text="pays at every level, pays at no level, stops paying or not settled.")
    below = serializers.IntegerField(allow_null=True, help_text="The highest level that pays, below `above`.")
    above = serializers.IntegerField(allow_null=True, help_text="The next level, settled as not paying.")
    sentence = serializers.CharField()


class QuestionCellSerializer(Serializer):
    arm_id = serializers.IntegerField()
    arm = serializers.CharField()
    level = serializers.IntegerField()
    outcome = serializers.CharField(
        help_text="faster, slower, equivalent, not worth it, open, inconclusive, or why there is no call."
    )
    figure = serializers.CharField()
    confidence = serializers.FloatField()
    confidence_percent = serializers.CharField()
    blocks = serializers.IntegerField(help_text="The blocks the word rests on (up to the look that settled it).")
    p_value = serializers.FloatField(allow_null=True)
    why = serializers.CharField()
    joint = JointWordSerializer(
        required=False,
        help_text="The word for the service's objective (candidate cells of an analysis since objectives).",
    )


class SearchLevelSerializer(Serializer):
    level = serializers.IntegerField()
    entered = serializers.IntegerField(help_text="The block the search first ran this level in.")
    outcome = serializers.CharField()
    figure = serializers.CharField()
    blocks = serializers.IntegerField()


class SearchConfirmationSerializer(Serializer):
    arm_id = serializers.IntegerField()
    arm = serializers.CharField()
    config = serializers.CharField(help_text="The --speculative-config it ran: the derived batch-size schedule of k.")
    levels = SearchLevelSerializer(many=True)
    verdict = serializers.CharField(help_text="confirmed, refuted or not settled.")


class SearchArmSerializer(Serializer):
    arm_id = serializers.IntegerField()
    arm = serializers.CharField()
    state = serializers.CharField(
        help_text="found, pays across the range, pays nowhere in the range, searching or narrowed."
    )
    sentence = serializers.CharField()
    below = serializers.IntegerField(allow_null=True, help_text="The highest level settled faster below `above`.")
    above = serializers.IntegerField(allow_null=True, help_text="The first level settled not faster.")
    crossing = serializers.FloatField(allow_null=True, help_text="Where the points cross 1 between them.")
    faster_above = serializers.ListField(child=serializers.IntegerField())
    levels = SearchLevelSerializer(many=True)
    confirmation = SearchConfirmationSerializer(allow_null=True)
    derived = serializers.CharField(
        allow_null=True, required=False,
        help_text="A found break-even's derived --speculative-config that no confirmation arm ran; null otherwise.",
    )  # fmt: skip
    unconfirmed_because = serializers.CharField(required=False, help_text="Why no confirmation arm ran it.")


class SearchDeviceSerializer(Serializer):
    minutes = serializers.FloatField()
    start_minutes = serializers.FloatField()
    load_minutes = serializers.FloatField()
    search_minutes = serializers.FloatField()
    confirmation_minutes = serializers.FloatField()
    sessions = serializers.IntegerField()
    runs = serializers.IntegerField()
    fixed_runs = serializers.IntegerField()
    fixed_minutes = serializers.FloatField(help_text="About what a fixed grid of the same resolution would spend.")
    saved_minutes = serializers.FloatField()
    mean_start_s = serializers.FloatField()
    mean_run_s = serializers.FloatField()


class SearchSerializer(Serializer):
    low = serializers.IntegerField()
    high = serializers.IntegerField()
    resolution = serializers.FloatField()
    grid = serializers.ListField(child=serializers.IntegerField())
    family_size = serializers.IntegerField()
    arms = SearchArmSerializer(many=True)
    device = SearchDeviceSerializer(allow_null=True)


class QuestionSerializer(Serializer):
    metric = serializers.CharField()
    metric_label = serializers.CharField()
    levels = serializers.ListField(child=serializers.IntegerField())
    sequential = serializers.BooleanField()
    max_blocks = serializers.IntegerField()
    looks = serializers.ListField(child=serializers.IntegerField())
    blocks_run = serializers.IntegerField()
    device_minutes = serializers.FloatField()
    budget = serializers.FloatField(allow_null=True)
    stop = serializers.CharField(help_text="settled, searched, maximum, budget or fixed.")
    stop_sentence = serializers.CharField()
    objective = ObjectiveSerializer(required=False, help_text="The service's objective the experiment declared.")
    service_break_evens = ServiceBreakEvenSerializer(
        many=True, required=False, help_text="Per arm, where it stops paying for the service (its joint words)."
    )
    cells = QuestionCellSerializer(many=True)
    replicate_cells = QuestionCellSerializer(many=True)
    confirmation_cells = QuestionCellSerializer(
        many=True, required=False, help_text="A break-even search's confirmation arms: a family of their own."
    )
    search = SearchSerializer(
        allow_null=True, required=False, help_text="A break-even search's answer; null for listed levels."
    )
    open = serializers.ListField(
        child=serializers.CharField(), help_text="Cells still open, each with about how much more would settle it."
    )


BreakEvenSerializer = numbers(
    "BreakEven",
    ("level", "lo", "hi"),
    partial(serializers.FloatField, allow_null=True),
    {
        "state": serializers.CharField(
            help_text="crosses, pays at every measured level (faster at each), pays at no measured level "
            "(slower at each), not settled or not estimable (docs/verdicts.md, “Break-even”)."
        ),
        "reason": serializers.CharField(
            required=False,
            help_text="Why it is not settled (each level's call: faster, slower, open) or not estimable; "
            "empty otherwise. Absent from analyses stored before the states needed intervals.",
        ),
    },
)


class VerdictSerializer(Serializer):
    arm_id = serializers.IntegerField()
    arm = serializers.CharField()
    replicate = serializers.BooleanField()
    metric = serializers.CharField()
    text = serializers.CharField()
    break_even = BreakEvenSerializer()


# Reads a results.block.PositionAcceptance.
class AcceptanceSerializer(Serializer):
    arm_id = serializers.IntegerField(source="arm.id")
    drafts = serializers.IntegerField()
    accepted = serializers.ListField(child=serializers.IntegerField())
    unconditional = serializers.ListField(child=serializers.FloatField(allow_null=True))
    conditional = serializers.ListField(child=serializers.FloatField(allow_null=True))
    conditional_drafted = serializers.ListField(child=serializers.FloatField(allow_null=True))


CapacityCellSerializer = numbers(
    "CapacityCell",
    ("kv_cache_peak", "kv_cache_mean"),
    partial(serializers.FloatField, allow_null=True, help_text="A fraction: 1 = the whole KV cache."),
    {
        "runs": serializers.IntegerField(
            help_text="Succeeded runs (blocks) that recorded the figures; 0: not recorded."
        ),
        "running_max": serializers.IntegerField(allow_null=True),
        "waiting_max": serializers.IntegerField(allow_null=True),
        "preemptions": serializers.IntegerField(allow_null=True, help_text="Summed over the runs."),
    },
)


class CapacitySerializer(Serializer):
    arm_id = serializers.IntegerField()
    level = serializers.IntegerField()
    arm = CapacityCellSerializer()
    baseline = CapacityCellSerializer(help_text="The baseline at the same level.")
    preempted_alone = serializers.BooleanField(help_text="The arm preempted here and the baseline did not.")
    queued_alone = serializers.BooleanField(help_text="Requests waited in the arm's server here, never the baseline's.")


class ProfileSerializer(Serializer):
    arm = serializers.IntegerField(help_text="The arm's id.")
    level = serializers.IntegerField()
    shares = serializers.DictField(
        child=serializers.FloatField(),
        allow_null=True,
        help_text='Proposing, verifying, sampling and other, fractions summing to 1 (docs/metrics.md "Profiled '
        'intervals"); null when the interval failed.',
    )
    step_ms = serializers.FloatField(allow_null=True, help_text="The measured runs' mean step time at this level.")
    phase_ms = serializers.DictField(
        child=serializers.FloatField(), allow_null=True, help_text="Each share times the measured step time."
    )
    requests = serializers.IntegerField(help_text="Requests sent while the profiler ran.")
    steps = serializers.IntegerField(allow_null=True, help_text="Engine steps in the trace.")
    profiled_ms = serializers.FloatField(allow_null=True, help_text="Time the trace covers.")
    error = serializers.CharField(allow_blank=True, help_text="Why the interval gave no shares, if it did not.")


class SweepLevelSerializer(Serializer):
    level = serializers.IntegerField()
    points = serializers.ListField(
        child=serializers.DictField(child=serializers.FloatField()),
        help_text="Speedup (y) at each synthetic acceptance length (x).",
    )
    break_even = serializers.FloatField(allow_null=True, help_text="The length where the speedup crosses 1.")


class SweepSerializer(Serializer):
    arm = serializers.IntegerField(help_text="The arm's id.")
    # The serializer metaclass pops declared fields off the class, so this shadows no attribute.
    label = serializers.CharField()  # type: ignore[assignment]
    tau = serializers.FloatField(allow_null=True, help_text="The arm's measured mean acceptance length.")
    lengths = serializers.ListField(child=serializers.FloatField())
    levels = SweepLevelSerializer(many=True)
    sentence = serializers.CharField()


STALL, SHARE = f"{stream_fidelity.STALL_STEPS:g}", f"{stream_fidelity.DISTORTED_RUN_SHARE:.0%}"


class StreamRunSerializer(Serializer):
    arm_id = serializers.IntegerField()
    level = serializers.IntegerField()
    block = serializers.IntegerField()
    run_id = serializers.IntegerField()
    checked = serializers.IntegerField(
        allow_null=True, help_text="Requests compared with vLLM's timing; null for runs recorded before it was."
    )
    distorted = serializers.IntegerField(allow_null=True, help_text="Checked requests whose stream was distorted.")
    stalled = serializers.IntegerField(
        allow_null=True, help_text=f"Checked requests that waited over {STALL} engine steps."
    )
    bursts = serializers.IntegerField(allow_null=True, help_text="Checked requests whose decode arrived at once.")
    late_first_tokens = serializers.IntegerField(
        allow_null=True, help_text=f"Checked requests whose first token came over {STALL} engine steps late."
    )
    span_ratio_p50 = serializers.FloatField(allow_null=True, help_text="Median client / engine decode span.")
    span_ratio_p05 = serializers.FloatField(allow_null=True, help_text="5th percentile of the same ratio.")
    flagged = serializers.BooleanField(
        help_text=f"Over {SHARE} of the checked requests distorted: the client's TPOT and TTFT get no verdict here."
    )


# Reads the experiment (`experiment`) and what payloads.results_payload read beside it.
class ResultsSerializer(Serializer):
    experiment_id = serializers.IntegerField(source="experiment.pk")
    status = serializers.ChoiceField(choices=Experiment.Status.choices, source="experiment.status")
    analysed = serializers.BooleanField(help_text="False until the experiment has finished and been analysed.")
    margin = serializers.FloatField(
        source="experiment.equivalence_margin", help_text="The equivalence margin as a fraction."
    )
    levels = serializers.ListField(child=serializers.IntegerField())
    arms = ArmSerializer(many=True)
    summaries = SummaryCellSerializer(many=True)
    speedups = SpeedupSerializer(many=True)
    question = QuestionSerializer(
        allow_null=True, help_text="The experiment's question and where each primary cell stands; null before analysis."
    )
    verdicts = VerdictSerializer(many=True)
    acceptance_by_position = AcceptanceSerializer(many=True)
    fidelity = serializers.ListField(child=serializers.DictField())
    stream_fidelity = StreamRunSerializer(
        many=True, help_text='Per run, its streams against vLLM\'s timing (docs/metrics.md "Stream fidelity").'
    )
    series = serializers.DictField(help_text="The chart series the page draws (CDFs, tokens per step, ...).")
    capacity = CapacitySerializer(many=True, help_text='Per compared arm and level, docs/metrics.md "Capacity".')
    capacity_warnings = serializers.ListField(child=serializers.CharField())
    profiles = ProfileSerializer(
        many=True, help_text="Where a step's time went, per profiled interval (not part of any statistic)."
    )
    acceptance_sweeps = SweepSerializer(
        many=True, help_text="Synthetic acceptance sweeps: speedup against acceptance length (not measurements)."
    )
    warnings = serializers.ListField(child=serializers.CharField())
