"""What a team states about one of its serving services (a ServiceProfile): the model and
hardware it runs on, the concurrency it sees (a range, or a daily curve of 24 hourly
concurrencies), its SLOs and its mix of prompt categories. The profile's page recommends what
to run per concurrency band from the team's experiments (experiments/service_profiles/)."""

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q

from experiments.models.analysis import SpeedupEstimate
from experiments.models.base import TeamQuerySet, team_field


class ServiceProfile(models.Model):
    service = models.SlugField(max_length=100, help_text="The service, as its decisions name it (Decision.service).")
    team = team_field()
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    target_model = models.CharField(max_length=500, help_text="As the experiments name it (Experiment.target_model).")
    worker_queue = models.CharField(max_length=64, help_text="The hardware, as the experiments' worker queue.")
    metric = models.CharField(
        max_length=32, choices=SpeedupEstimate.Metric.choices, default=SpeedupEstimate.Metric.SERVER_TPOT,
        help_text="The question's metric: experiments asking about another are not compared with these.",
    )  # fmt: skip
    # Either a range or a daily curve (the constraint below).
    concurrency_low = models.PositiveIntegerField(null=True, blank=True)
    concurrency_high = models.PositiveIntegerField(null=True, blank=True)
    daily_concurrency = ArrayField(
        models.PositiveIntegerField(), default=list, blank=True, help_text="Expected concurrency of hours 0–23."
    )
    slo_ttft_ms = models.FloatField(null=True, blank=True)
    slo_tpot_ms = models.FloatField(null=True, blank=True)
    slo_e2e_ms = models.FloatField(null=True, blank=True)
    category_mix = models.JSONField(default=dict, blank=True, help_text="{category: share}, shares summing to 1.")

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["service"]
        constraints = [
            models.UniqueConstraint(fields=["team", "service"], name="service_profile_one_per_service"),
            models.CheckConstraint(
                condition=Q(
                    concurrency_low__gte=1, concurrency_high__gte=models.F("concurrency_low"), daily_concurrency__len=0
                )
                | Q(concurrency_low__isnull=True, concurrency_high__isnull=True, daily_concurrency__len=24),
                name="service_profile_range_or_curve",
            ),
        ]

    def __str__(self):
        return f"service profile {self.service}"

    @property
    def concurrency_range(self) -> tuple[int, int]:
        """The lowest and highest concurrency the service sees: the range, or the curve's."""
        if self.daily_concurrency:
            return min(self.daily_concurrency), max(self.daily_concurrency)
        low, high = self.concurrency_low, self.concurrency_high
        assert low is not None, "a profile without a curve has a range (service_profile_range_or_curve)"
        assert high is not None, "a profile without a curve has a range (service_profile_range_or_curve)"
        return low, high

    @property
    def slos(self) -> dict[str, float]:
        """The SLOs set, by metric (experiments/measurement/deploy/service_bands.SLO_METRICS)."""
        limits = {"TTFT": self.slo_ttft_ms, "TPOT": self.slo_tpot_ms, "E2E": self.slo_e2e_ms}
        return {metric: limit for metric, limit in limits.items() if limit is not None}
