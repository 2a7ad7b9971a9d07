import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0015_run_worker_name"),
    ]

    operations = [
        migrations.AddField(
            model_name="experiment",
            name="profile_intervals",
            field=models.BooleanField(
                default=False,
                help_text="After each arm's measured runs, one short extra interval per level under vLLM's torch "
                "profiler (experiments/measurement/trace_shares.py); left out of every statistic.",
            ),
        ),
        migrations.CreateModel(
            name="ProfiledInterval",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("concurrency", models.PositiveIntegerField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("worker_host", models.CharField(blank=True, max_length=255)),
                ("requests", models.PositiveIntegerField(help_text="Requests sent while the profiler ran.")),
                ("completed", models.PositiveIntegerField(default=0)),
                ("duration_s", models.FloatField(null=True)),
                (
                    "trace_path",
                    models.CharField(
                        blank=True,
                        help_text="The gzipped trace on the worker host, relative to its data folder.",
                        max_length=500,
                    ),
                ),
                ("trace_bytes", models.PositiveBigIntegerField(null=True)),
                ("steps", models.PositiveIntegerField(help_text="Engine steps found in the trace.", null=True)),
                (
                    "profiled_ms",
                    models.FloatField(help_text="From the first step's start to the last one's end: the shares' denominator.", null=True),
                ),
                ("share_proposing", models.FloatField(null=True)),
                ("share_verifying", models.FloatField(null=True)),
                ("share_sampling", models.FloatField(null=True)),
                ("share_other", models.FloatField(null=True)),
                (
                    "top_events",
                    models.JSONField(blank=True, default=list, help_text="[share, name] of the heaviest event names."),
                ),
                ("error", models.TextField(blank=True)),
                (
                    "arm",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="profiled_intervals",
                        to="experiments.arm",
                    ),
                ),
                (
                    "experiment",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="profiled_intervals",
                        to="experiments.experiment",
                    ),
                ),
            ],
            options={
                "ordering": ["arm__position", "concurrency"],
                "constraints": [
                    models.UniqueConstraint(fields=("arm", "concurrency"), name="profiled_interval_unique_cell")
                ],
            },
        ),
    ]
