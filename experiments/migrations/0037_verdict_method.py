"""Issue 36: the test an experiment's looks use (experiments already stored ran their looks on
each cell's t and keep it when they are replayed; new ones get the block model, docs/verdicts.md,
"The block model"), a primary cell's plain estimate beside the one that accounts for the stop,
and the host's state over each run (experiments/measurement/engine/host_load.py)."""

from django.db import migrations, models

CHOICES = [
    ("block-model", "block model: pooled spread, estimates that account for the stop"),
    ("per-cell-t", "each cell's t on its own blocks"),
]
HELP = (
    "The test of the looks (experiments/measurement/stats/sequential.py, block_decisions.py); "
    "experiments run before the block model keep the per-cell t when their looks are replayed."
)


class Migration(migrations.Migration):
    dependencies = [("experiments", "0036_kv_cache_memory_bytes")]

    operations = [
        migrations.AddField(
            model_name="experiment",
            name="verdict_method",
            field=models.CharField(
                choices=CHOICES, default="per-cell-t", editable=False, help_text=HELP, max_length=16
            ),
        ),
        migrations.AlterField(
            model_name="experiment",
            name="verdict_method",
            field=models.CharField(
                choices=CHOICES, default="block-model", editable=False, help_text=HELP, max_length=16
            ),
        ),
        migrations.AddField(
            model_name="runsummary",
            name="host_foreign_cpu",
            field=models.FloatField(
                blank=True,
                null=True,
                help_text="Share of the host's CPU time other processes took during the run (1 = every core).",
            ),
        ),
        migrations.AddField(
            model_name="runsummary",
            name="host_steal",
            field=models.FloatField(
                blank=True, null=True, help_text="Share of the host's CPU time stolen by the hypervisor."
            ),
        ),
        migrations.AddField(
            model_name="runsummary",
            name="host_load",
            field=models.FloatField(
                blank=True, null=True, help_text="The host's 1-minute load average at the run's end."
            ),
        ),
        migrations.AddField(
            model_name="runsummary",
            name="host_memory_stall",
            field=models.FloatField(
                blank=True, null=True, help_text="Share of the run's time some task waited for memory (pressure stall)."
            ),
        ),
        migrations.AddField(
            model_name="runsummary",
            name="host_gpu_foreign",
            field=models.FloatField(
                blank=True,
                null=True,
                help_text="GPU utilisation by other processes at the run's end (1 = busy); null without a GPU.",
            ),
        ),
        migrations.AddField(
            model_name="runsummary",
            name="host_cores",
            field=models.PositiveIntegerField(blank=True, null=True, help_text="The host's online CPUs."),
        ),
        migrations.AddField(
            model_name="speedupestimate",
            name="stopping_aware",
            field=models.BooleanField(
                default=False, help_text="The point and interval account for the look the cell stopped at."
            ),
        ),
        migrations.AddField(
            model_name="speedupestimate",
            name="plain_point",
            field=models.FloatField(
                blank=True, null=True, help_text="The plain estimate, where the shown one accounts for the stop."
            ),
        ),
        migrations.AddField(
            model_name="speedupestimate", name="plain_low", field=models.FloatField(blank=True, null=True)
        ),
        migrations.AddField(
            model_name="speedupestimate", name="plain_high", field=models.FloatField(blank=True, null=True)
        ),
    ]
