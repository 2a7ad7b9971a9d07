"""What people make of the results: a Comment on an experiment; a Decision for a named
service, with the DecisionEvidence it cites (verdicts as they stood) and the DecisionEvent
log of every change to it; and the HistoryVisit behind the history's "since your last
visit" notices."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from experiments.models.analysis import SpeedupEstimate
from experiments.models.arm import Arm
from experiments.models.base import TeamQuerySet, team_field
from experiments.models.definition import Experiment


class Comment(models.Model):
    """A remark on an experiment: plain text, kept as written (no edits, no deletes)."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="comments")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    body = models.TextField(max_length=5000)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self):
        return f"comment by {self.author} on {self.experiment}"


class Decision(models.Model):
    """What the team decided for a named service, and the evidence it rests on.

    Proposed by one user, final once another approves it. Every change is a DecisionEvent;
    a final decision is never edited, only superseded by the next final one for its service.
    """

    class Kind(models.TextChoices):
        DEPLOY = "deploy", "Deploy"
        DO_NOT_DEPLOY = "do_not_deploy", "Do not deploy"
        NEEDS_MORE_DATA = "needs_more_data", "Needs more data"

    class State(models.TextChoices):
        PROPOSED = "proposed", "Proposed"
        FINAL = "final", "Final"
        REJECTED = "rejected", "Rejected"
        WITHDRAWN = "withdrawn", "Withdrawn"
        SUPERSEDED = "superseded", "Superseded"

    service = models.SlugField(max_length=100, help_text="The serving service it decides for, e.g. chat.")
    team = team_field()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    arm = models.ForeignKey(Arm, null=True, blank=True, on_delete=models.PROTECT, related_name="decisions")
    # What vLLM takes as --speculative-config for that arm, copied when the decision is written.
    speculative_config = models.JSONField(null=True, blank=True)
    max_concurrency = models.PositiveIntegerField(null=True, blank=True)
    metric = models.CharField(
        max_length=32, choices=SpeedupEstimate.Metric.choices, default=SpeedupEstimate.Metric.TPOT
    )
    rationale = models.TextField(max_length=5000)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PROPOSED)
    version = models.PositiveIntegerField(default=1, help_text="Goes up with every edit; an approval names it.")
    proposed_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    proposed_at = models.DateTimeField(auto_now_add=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    supersedes = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="superseded_by"
    )
    flagged_at = models.DateTimeField(null=True, blank=True)
    flag_reason = models.TextField(blank=True)
    flag_experiment = models.ForeignKey(Experiment, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    evidence = models.ManyToManyField(Experiment, through="DecisionEvidence", related_name="decisions")

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["-proposed_at", "-id"]
        constraints = [
            # Each team decides for its own services.
            models.UniqueConstraint(
                fields=["team", "service"], condition=Q(state="final"), name="decision_one_final_per_service"
            ),
            models.CheckConstraint(
                condition=~Q(kind="deploy") | Q(arm__isnull=False, max_concurrency__gte=1),
                name="decision_deploy_names_arm_and_concurrency",
            ),
        ]

    def __str__(self):
        return f"decision #{self.pk} for {self.service}"

    @property
    def is_open(self) -> bool:
        return self.state == self.State.PROPOSED

    @property
    def headline(self) -> str:
        """The decision in one line, e.g. "Deploy EAGLE-3 k=3 up to concurrency 16"."""
        arm = f" {self.arm.label}" if self.arm is not None else ""
        limit = f" up to concurrency {self.max_concurrency}" if self.max_concurrency else ""
        if self.kind == self.Kind.DEPLOY:
            return f"Deploy{arm}{limit}"
        if self.kind == self.Kind.DO_NOT_DEPLOY:
            return f"Do not deploy{arm or ' speculative decoding'}{limit}"
        return f"Needs more data{' on' + arm if arm else ''}{limit}"

    @property
    def is_flagged(self) -> bool:
        return self.flagged_at is not None and self.state == self.State.FINAL


class DecisionEvidence(models.Model):
    """An experiment a decision cites, with its verdicts as they stood when cited."""

    decision = models.ForeignKey(Decision, on_delete=models.PROTECT, related_name="citations")
    experiment = models.ForeignKey(Experiment, on_delete=models.PROTECT, related_name="citations")
    verdicts = models.JSONField(default=list)

    class Meta:
        ordering = ["decision", "experiment"]
        constraints = [
            models.UniqueConstraint(fields=["decision", "experiment"], name="evidence_cited_once"),
        ]

    def __str__(self):
        return f"{self.experiment} cited by {self.decision}"

    @property
    def verdicts_by_arm(self) -> list[tuple[str, list[dict]]]:
        """The kept verdicts grouped by arm, levels in order."""
        arms: dict[str, list[dict]] = {}
        for cell in self.verdicts:
            arms.setdefault(cell["arm"], []).append(cell)
        return [(arm, sorted(cells, key=lambda c: c["level"])) for arm, cells in arms.items()]


class DecisionEvent(models.Model):
    """One change of a decision: who, when, what. Written by experiments/decisions/services.py only."""

    class Action(models.TextChoices):
        PROPOSED = "proposed", "proposed"
        EDITED = "edited", "edited"
        APPROVED = "approved", "approved"
        REJECTED = "rejected", "rejected"
        WITHDRAWN = "withdrawn", "withdrew"
        SUPERSEDED = "superseded", "superseded"
        FLAGGED = "flagged", "flagged for review"
        FLAG_DISMISSED = "flag_dismissed", "dismissed the flag"

    decision = models.ForeignKey(Decision, on_delete=models.PROTECT, related_name="events")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
        help_text="Empty for specdash itself (a contradicting experiment).",
    )  # fmt: skip
    at = models.DateTimeField(auto_now_add=True)
    action = models.CharField(max_length=16, choices=Action.choices)
    version = models.PositiveIntegerField(help_text="The decision's version after the change.")
    changes = models.JSONField(default=dict, help_text="field: [before, after]")
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self):
        return f"{self.decision} {self.action}"


class HistoryVisit(models.Model):
    """When a user last looked at the history, for the "since your last visit" notices.

    A visit is a run of page views less than experiments.review.notifications.VISIT_GAP apart:
    paging and filtering do not end it, so the notices stay until the user comes back later."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="history_visit")
    seen_at = models.DateTimeField(help_text="The latest history page view.")
    previous_seen_at = models.DateTimeField(null=True, blank=True, help_text="The last view of the visit before.")

    def __str__(self):
        return f"{self.user}'s last visit"
