"""What vLLM decided for each run's server (workers/server/engine_report.py): model runner, async
scheduling, CUDA graphs and the KV cache's size in tokens, with the log lines they came from.
Runs stored before keep blank and null values: their servers' logs were never read."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0027_boundary"),
    ]

    operations = [
        migrations.AddField(
            model_name="environmentsnapshot",
            name="async_scheduling",
            field=models.BooleanField(help_text="Whether vLLM scheduled asynchronously.", null=True),
        ),
        migrations.AddField(
            model_name="environmentsnapshot",
            name="cuda_graphs",
            field=models.CharField(
                blank=True,
                help_text="off, or the CUDA graph mode vLLM captured (FULL_AND_PIECEWISE, ...).",
                max_length=32,
            ),
        ),
        migrations.AddField(
            model_name="environmentsnapshot",
            name="engine_log_lines",
            field=models.JSONField(
                blank=True, default=dict, help_text="Per field above, the line of vLLM's log it was read from."
            ),
        ),
        migrations.AddField(
            model_name="environmentsnapshot",
            name="kv_cache_tokens",
            field=models.PositiveBigIntegerField(help_text="The KV cache's size in tokens.", null=True),
        ),
        migrations.AddField(
            model_name="environmentsnapshot",
            name="model_runner",
            field=models.CharField(blank=True, help_text="vLLM's model runner: V1 or V2.", max_length=8),
        ),
    ]
