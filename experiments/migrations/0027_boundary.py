"""The group-sequential boundary an experiment's looks use. Experiments already stored ran
their looks on Pocock's boundary and keep it; new ones get the alpha-spending boundary
(docs/verdicts.md, "The question")."""

from django.db import migrations, models

CHOICES = [
    ("spending-3", "alpha spending, ρ = 3 (close to O'Brien–Fleming)"),
    ("pocock", "Pocock (one level at every look)"),
]
HELP = (
    "The group-sequential boundary the looks use (experiments/measurement/sequential.py); "
    "experiments run before the spending boundary keep Pocock's when their looks are replayed."
)


class Migration(migrations.Migration):
    dependencies = [("experiments", "0026_server_settings")]

    operations = [
        migrations.AddField(
            model_name="experiment",
            name="boundary",
            field=models.CharField(choices=CHOICES, default="pocock", editable=False, help_text=HELP, max_length=16),
        ),
        migrations.AlterField(
            model_name="experiment",
            name="boundary",
            field=models.CharField(
                choices=CHOICES, default="spending-3", editable=False, help_text=HELP, max_length=16
            ),
        ),
    ]
