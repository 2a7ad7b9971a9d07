"""What the runs measured, derived once when the experiment ends
(experiments/analysis/services.py): a SpeedupEstimate of each arm over the baseline per level
and metric, with its interval and verdict, and the ExperimentAnalysis that holds the verdicts,
chart series and warnings the experiment page shows beyond the run summaries."""

from django.contrib.postgres.fields import ArrayField
from django.db import models

from experiments.models.arm import Arm
from experiments.models.definition import Experiment


class SpeedupEstimate(models.Model):
    """Speedup of one arm over the baseline at one concurrency level, with its interval.
    Above 1 always means the arm is better. Computed once when the experiment ends."""

    class Metric(models.TextChoices):
        SERVER_TPOT = "server_tpot", "Engine-timed TPOT"
        TPOT = "tpot", "TPOT"
        E2E = "e2e", "End-to-end latency"
        E2E_P95 = "e2e_p95", "End-to-end latency, p95"
        TTFT = "ttft", "TTFT"
        OUTPUT_THROUGHPUT = "output_throughput", "Output throughput"
        REQUEST_THROUGHPUT = "request_throughput", "Request throughput"
        GOODPUT = "goodput", "Goodput"

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="speedups")
    arm = models.ForeignKey(Arm, on_delete=models.CASCADE, related_name="speedups")
    concurrency = models.PositiveIntegerField()
    metric = models.CharField(max_length=32, choices=Metric.choices)
    point = models.FloatField(null=True)
    ci_low = models.FloatField(null=True)
    ci_high = models.FloatField(null=True)
    n_pairs = models.PositiveIntegerField(default=0)
    n_repetitions = models.PositiveIntegerField(default=0, help_text="Blocks with a ratio.")
    note = models.CharField(max_length=200, blank=True)
    outcome = models.CharField(
        max_length=32, blank=True, help_text="The verdict word (experiments/measurement/stats/verdicts.py)."
    )
    word = models.CharField(
        max_length=32, blank=True,
        help_text="A primary cell's word for the service's objective: pays, costs, not worth it, open, inconclusive "
        "(experiments/measurement/stats/objective.py); empty elsewhere and in analyses from before objectives.",
    )  # fmt: skip
    block_ratios = ArrayField(models.FloatField(), default=list, help_text="The speedup measured in each block.")
    failed_baseline = models.PositiveIntegerField(default=0)
    failed_arm = models.PositiveIntegerField(default=0)
    # A primary cell (the experiment's question) is decided by experiments/measurement/stats/sequential.py:
    # its interval is at `confidence` (adjusted for the family and the looks) and rests on the
    # blocks up to the look that settled it; the other cells' words are unadjusted, at 95 %.
    primary = models.BooleanField(default=False)
    confidence = models.FloatField(default=0.95)
    p_value = models.FloatField(null=True, blank=True)
    equivalence_low = models.FloatField(null=True, blank=True)
    equivalence_high = models.FloatField(null=True, blank=True)
    # On the block model (Experiment.verdict_method) a settled primary cell's point and interval
    # account for the look it stopped at (experiments/measurement/stats/stopping.py): the interval at
    # 95 % conditional on the stop; `plain_*` keep the plain estimate and its interval at `confidence`.
    stopping_aware = models.BooleanField(
        default=False, help_text="The point and interval account for the look the cell stopped at."
    )
    plain_point = models.FloatField(
        null=True, blank=True, help_text="The plain estimate, where the shown one accounts for the stop."
    )
    plain_low = models.FloatField(null=True, blank=True)
    plain_high = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["arm__position", "metric", "concurrency"]
        constraints = [
            models.UniqueConstraint(fields=["arm", "concurrency", "metric"], name="speedup_unique_cell"),
        ]

    def __str__(self):
        return f"{self.arm} {self.metric} @ {self.concurrency}"

    def chart_point(self) -> dict:
        """The estimate as the pages' chart scripts read it."""
        return {
            "arm": self.arm_id,
            "level": self.concurrency,
            "metric": self.metric,
            "point": self.point,
            "lo": self.ci_low,
            "hi": self.ci_high,
            "outcome": self.outcome,
        }


class ExperimentAnalysis(models.Model):
    """What the experiment page shows beyond the run summaries: verdicts and chart series,
    derived from the recorded requests once, when the experiment ends."""

    experiment = models.OneToOneField(Experiment, on_delete=models.CASCADE, related_name="analysis")
    computed_at = models.DateTimeField(auto_now=True)
    verdicts = models.JSONField(default=list)
    series = models.JSONField(default=dict)
    warnings = models.JSONField(default=list)
    fidelity = models.JSONField(default=list)

    def __str__(self):
        return f"analysis of {self.experiment}"
