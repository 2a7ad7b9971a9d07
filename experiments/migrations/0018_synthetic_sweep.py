import django.contrib.postgres.fields
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0017_draft_calibration"),
    ]

    operations = [
        migrations.AddField(
            model_name="arm",
            name="synthetic_sweep",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.FloatField(),
                blank=True,
                default=list,
                help_text="Synthetic mean acceptance lengths to run the arm at besides its real runs; empty: no sweep.",
                size=None,
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="synthetic_acceptance_length",
            field=models.FloatField(
                blank=True,
                help_text="Set on a run of the arm's synthetic acceptance sweep: vLLM accepted drafts at random to "
                "give this mean acceptance length. Such a run is not a measurement of the arm.",
                null=True,
            ),
        ),
        migrations.AlterModelOptions(
            name="run",
            options={"ordering": ["arm__position", "repetition", "concurrency", "synthetic_acceptance_length"]},
        ),
        migrations.RemoveConstraint(
            model_name="run",
            name="run_unique_cell",
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.UniqueConstraint(
                fields=("arm", "concurrency", "repetition", "synthetic_acceptance_length"),
                name="run_unique_cell",
                nulls_distinct=False,
            ),
        ),
    ]
