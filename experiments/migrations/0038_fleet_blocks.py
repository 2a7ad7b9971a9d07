"""An experiment's blocks as the unit of dispatch on a fleet, and the workers that took part or were
passed over (issue 38, experiments/models/fleet.py). Experiments stored before have no Block rows:
one worker holds each of them whole, as before."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("experiments", "0037_verdict_method")]

    operations = [
        migrations.CreateModel(
            name="Block",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("number", models.PositiveSmallIntegerField(help_text="The block, 1-based: its runs' repetition.")),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("queued", "Queued"), ("running", "Running"), ("done", "Done"), ("failed", "Failed"),
                            ("cancelled", "Cancelled"),
                        ],
                        default="queued",
                        max_length=16,
                    ),
                ),  # fmt: skip
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("claimed_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "worker_name",
                    models.CharField(blank=True, help_text="Celery node name of the worker that ran it.", max_length=255),
                ),
                ("worker_host", models.CharField(blank=True, max_length=255)),
                (
                    "gpu_ids",
                    models.CharField(
                        blank=True, help_text="CUDA_VISIBLE_DEVICES of that worker; empty on a CPU host.", max_length=64
                    ),
                ),
                ("lease_owner", models.CharField(blank=True, max_length=255)),
                ("lease_at", models.DateTimeField(blank=True, null=True)),
                ("attempts", models.PositiveSmallIntegerField(default=0, help_text="Times a worker claimed it.")),
                (
                    "look_order",
                    models.PositiveSmallIntegerField(
                        blank=True, null=True,
                        help_text="Its place among the experiment's blocks in the order they completed: the sequential "
                        "looks' order.",
                    ),
                ),  # fmt: skip
                (
                    "error",
                    models.TextField(blank=True, help_text="What became of its earlier attempts, and why it failed."),
                ),
                (
                    "experiment",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="blocks", to="experiments.experiment"
                    ),
                ),
            ],
            options={
                "ordering": ["experiment", "number"],
                "indexes": [models.Index(fields=["status", "lease_at"], name="block_status_lease_idx")],
                "constraints": [
                    models.UniqueConstraint(fields=("experiment", "number"), name="block_unique_number"),
                    models.UniqueConstraint(fields=("experiment", "look_order"), name="block_unique_look_order"),
                ],
            },
        ),
        migrations.CreateModel(
            name="FleetWorker",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("worker_name", models.CharField(max_length=255)),
                ("worker_host", models.CharField(blank=True, max_length=255)),
                ("gpu_ids", models.CharField(blank=True, max_length=64)),
                (
                    "hardware",
                    models.JSONField(
                        default=dict, help_text="Its hardware class (experiments/execution/hardware_class.py)."
                    ),
                ),
                ("took_part", models.BooleanField(default=False)),
                ("reason", models.TextField(blank=True, help_text="Why it was passed over; empty when it took part.")),
                ("first_seen_at", models.DateTimeField(auto_now_add=True)),
                ("last_seen_at", models.DateTimeField(auto_now=True)),
                (
                    "experiment",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="fleet_workers",
                        to="experiments.experiment",
                    ),
                ),
            ],
            options={
                "ordering": ["experiment", "first_seen_at", "id"],
                "constraints": [
                    models.UniqueConstraint(fields=("experiment", "worker_name"), name="fleet_worker_unique_name"),
                ],
            },
        ),
    ]
