"""Request rows keep their four number lists packed in bytea (experiments/measurement/packed.py) instead
of PostgreSQL arrays: new columns, every existing row converted in batches, the arrays
dropped and the new columns renamed. Reversible: going back refills the arrays from the
packed bytes. The values are unchanged both ways (float64 keeps a float8's 8 bytes; the
integers fit uint32 and uint16)."""

from django.db import migrations

import experiments.models.fields

BATCH = 5000
# The list columns, with their packed element type; "<name>_packed" is the new column.
LISTS = {
    "chunk_times_ms": "float64",
    "chunk_tokens": "uint32",
    "spec_accepted_per_step": "uint16",
    "spec_proposed_per_step": "uint16",
}


def _copy_columns(apps, names: dict[str, str]) -> None:
    """Copy every row's lists from one column of each pair to the other, BATCH rows at a time."""
    record = apps.get_model("experiments", "RequestRecord")
    last_id = 0
    while rows := list(record.objects.filter(id__gt=last_id).order_by("id").only("id", *names)[:BATCH]):
        for row in rows:
            for source, target in names.items():
                setattr(row, target, getattr(row, source))
        record.objects.bulk_update(rows, list(names.values()))
        last_id = rows[-1].id


def pack_lists(apps, schema_editor):
    _copy_columns(apps, {name: f"{name}_packed" for name in LISTS})


def unpack_lists(apps, schema_editor):
    _copy_columns(apps, {f"{name}_packed": name for name in LISTS})


def _packed(element: str, **kwargs) -> experiments.models.fields.PackedArrayField:
    return experiments.models.fields.PackedArrayField(element=element, **kwargs)


class Migration(migrations.Migration):
    dependencies = [
        ("experiments", "0020_request_run_index_dropped"),
    ]

    operations = [
        migrations.AddField(
            model_name="requestrecord",
            name="chunk_times_ms_packed",
            field=_packed("float64", default=list, help_text="Arrival of each content chunk after send."),
        ),
        migrations.AddField(
            model_name="requestrecord",
            name="chunk_tokens_packed",
            field=_packed("uint32", default=list),
        ),
        migrations.AddField(
            model_name="requestrecord", name="spec_accepted_per_step_packed", field=_packed("uint16", null=True)
        ),
        migrations.AddField(
            model_name="requestrecord", name="spec_proposed_per_step_packed", field=_packed("uint16", null=True)
        ),
        migrations.RunPython(pack_lists, unpack_lists),
        migrations.RemoveField(model_name="requestrecord", name="chunk_times_ms"),
        migrations.RemoveField(model_name="requestrecord", name="chunk_tokens"),
        migrations.RemoveField(model_name="requestrecord", name="spec_accepted_per_step"),
        migrations.RemoveField(model_name="requestrecord", name="spec_proposed_per_step"),
        *(
            migrations.RenameField(model_name="requestrecord", old_name=f"{name}_packed", new_name=name)
            for name in LISTS
        ),
    ]
