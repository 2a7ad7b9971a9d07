"""An experiment on a fleet (issue 38): its blocks as the unit of dispatch, and the workers that
took part or were passed over.

A Block is one repetition of the randomised block design (its runs share `Run.repetition ==
number`): every arm of it runs back to back on the one worker that claimed it, so that a block
ratio compares arms measured on one host and GPU. Blocks of one experiment run in parallel on
the workers of its queue whose hardware class matches (experiments/execution/hardware_class.py);
a block lost with its worker is queued again whole, once, then failed with the reason
(experiments/execution/block_claims.py). Experiments stored before blocks were dispatched have no
Block rows: one worker holds the whole experiment (Experiment.lease_owner), as it always did.
"""

from typing import Self

from django.db import models

from experiments.models.definition import Experiment


class BlockQuerySet(models.QuerySet):
    def open(self) -> Self:
        """Blocks not done yet: queued, or claimed by a worker (in flight)."""
        return self.filter(status__in=Block.OPEN_STATUSES)


class Block(models.Model):
    """One block of an experiment whose blocks are dispatched one by one."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    OPEN_STATUSES = (Status.QUEUED, Status.RUNNING)
    # A block lost with its worker is queued again this many times, then failed.
    MAX_ATTEMPTS = 2

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="blocks")
    number = models.PositiveSmallIntegerField(help_text="The block, 1-based: its runs' repetition.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    created_at = models.DateTimeField(auto_now_add=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    worker_name = models.CharField(max_length=255, blank=True, help_text="Celery node name of the worker that ran it.")
    worker_host = models.CharField(max_length=255, blank=True)
    gpu_ids = models.CharField(
        max_length=64, blank=True, help_text="CUDA_VISIBLE_DEVICES of that worker; empty on a CPU host."
    )
    # The claiming worker process (host:pid:node, as Experiment.lease_owner) and its beat: a beat
    # older than SPECDASH_HEARTBEAT_STALE_S means the worker died, and the reaper takes the block back.
    lease_owner = models.CharField(max_length=255, blank=True)
    lease_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0, help_text="Times a worker claimed it.")
    look_order = models.PositiveSmallIntegerField(
        null=True, blank=True,
        help_text="Its place among the experiment's blocks in the order they completed: the sequential looks' order.",
    )  # fmt: skip
    error = models.TextField(blank=True, help_text="What became of its earlier attempts, and why it failed.")

    objects = BlockQuerySet.as_manager()

    class Meta:
        ordering = ["experiment", "number"]
        constraints = [
            models.UniqueConstraint(fields=["experiment", "number"], name="block_unique_number"),
            models.UniqueConstraint(fields=["experiment", "look_order"], name="block_unique_look_order"),
        ]
        indexes = [models.Index(fields=["status", "lease_at"], name="block_status_lease_idx")]

    def __str__(self):
        return f"block {self.number} of experiment {self.experiment_id}"

    @property
    def is_open(self) -> bool:
        return self.status in self.OPEN_STATUSES


class FleetWorker(models.Model):
    """A worker that took an experiment's task: it took part (claimed a block), or it was passed
    over because its hardware class differs from the experiment's (`reason` says how)."""

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="fleet_workers")
    worker_name = models.CharField(max_length=255)
    worker_host = models.CharField(max_length=255, blank=True)
    gpu_ids = models.CharField(max_length=64, blank=True)
    hardware = models.JSONField(default=dict, help_text="Its hardware class (experiments/execution/hardware_class.py).")
    took_part = models.BooleanField(default=False)
    reason = models.TextField(blank=True, help_text="Why it was passed over; empty when it took part.")
    first_seen_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["experiment", "first_seen_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["experiment", "worker_name"], name="fleet_worker_unique_name"),
        ]

    def __str__(self):
        return f"{self.worker_name} on experiment {self.experiment_id}"
