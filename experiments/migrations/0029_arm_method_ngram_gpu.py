from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0028_engine_report"),
    ]

    operations = [
        migrations.AlterField(
            model_name="arm",
            name="method",
            field=models.CharField(
                choices=[
                    ("baseline", "Baseline (no speculation)"),
                    ("ngram", "n-gram lookup"),
                    ("ngram_gpu", "n-gram lookup on the GPU"),
                    ("draft_model", "Draft model"),
                    ("eagle", "EAGLE"),
                    ("eagle3", "EAGLE-3"),
                    ("mtp", "MTP"),
                    ("suffix", "Suffix decoding"),
                ],
                max_length=16,
            ),
        ),
    ]
