"""Teams (experiments/teams.py): experiments, uploaded prompt sets and decisions belong to a
Django group. Everything that existed before, and every user, goes to the default team
"everyone", so an install that had no teams keeps working as one team."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

DEFAULT_TEAM = "everyone"  # experiments.teams.DEFAULT_TEAM when this was written
TEAM_MODELS = ("experiment", "uploadedpromptset", "decision")


def team_field(*, null: bool):
    return models.ForeignKey(
        help_text="Its members see it.",
        null=null,
        on_delete=django.db.models.deletion.PROTECT,
        related_name="+",
        to="auth.group",
    )


def everything_to_the_default_team(apps, schema_editor):
    team, _ = apps.get_model("auth", "Group").objects.get_or_create(name=DEFAULT_TEAM)
    for model in TEAM_MODELS:
        apps.get_model("experiments", model).objects.update(team=team)
    app_label, model_name = settings.AUTH_USER_MODEL.split(".")
    user_ids = apps.get_model(app_label, model_name).objects.values_list("pk", flat=True)
    team.user_set.add(*user_ids)
    # Fire the deferred foreign-key checks now: PostgreSQL refuses the ALTER TABLE that
    # follows in this transaction while trigger events are pending.
    schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("experiments", "0012_input_lengths"),
    ]

    operations = [
        *(migrations.AddField(model_name=model, name="team", field=team_field(null=True)) for model in TEAM_MODELS),
        migrations.RunPython(everything_to_the_default_team, migrations.RunPython.noop),
        *(migrations.AlterField(model_name=model, name="team", field=team_field(null=False)) for model in TEAM_MODELS),
        migrations.RemoveConstraint(model_name="uploadedpromptset", name="prompt_set_version_unique"),
        migrations.AddConstraint(
            model_name="uploadedpromptset",
            constraint=models.UniqueConstraint(fields=("team", "name", "version"), name="prompt_set_version_unique"),
        ),
        migrations.RemoveConstraint(model_name="decision", name="decision_one_final_per_service"),
        migrations.AddConstraint(
            model_name="decision",
            constraint=models.UniqueConstraint(
                condition=models.Q(("state", "final")),
                fields=("team", "service"),
                name="decision_one_final_per_service",
            ),
        ),
    ]
