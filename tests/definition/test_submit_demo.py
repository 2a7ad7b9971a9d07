"""The demo experiment that `./dev up` submits: the block design with its A/A replicate,
within the rules the form applies to everyone else's experiments."""

import pytest
from django.core.management import call_command

from experiments.definition.forms import ExperimentForm
from experiments.management.commands.submit_demo import DEMO_NAME, demo_fields
from experiments.models import Arm, Experiment
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _as_posted(fields: dict) -> dict:
    """The demo's model fields as the browser would post them."""
    data = {name: value for name, value in fields.items() if name != "prompt_set_hash"}
    data["concurrency_levels"] = ", ".join(map(str, fields["concurrency_levels"]))
    data["equivalence_margin"] = Experiment._meta.get_field("equivalence_margin").default * 100
    for checkbox in ("server_per_block", "aa_replicate", "draft_calibration", "profile_intervals"):
        data[checkbox] = "on" if fields[checkbox] else ""
    return data


def test_the_demo_passes_the_forms_rules():
    form = ExperimentForm(_as_posted(demo_fields()), user=UserFactory())

    assert form.is_valid(), form.errors


def test_the_demo_runs_baseline_replicate_ngram_draft_and_calibration_in_three_blocks(
    celery_dispatch, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        call_command("submit_demo", owner=UserFactory(username="demo-owner").username)

    experiment = Experiment.objects.get(name=DEMO_NAME)
    arms = list(experiment.arms.order_by("position"))
    assert [(arm.method, arm.is_replicate, arm.is_calibration, arm.num_speculative_tokens) for arm in arms] == [
        (Arm.Method.BASELINE, False, False, None),
        (Arm.Method.BASELINE, True, False, None),
        (Arm.Method.NGRAM, False, False, 4),
        (Arm.Method.DRAFT_MODEL, False, False, 4),
        (Arm.Method.BASELINE, False, True, None),
    ]
    # At most 4 blocks, added until settled: the first 3 are queued at submission.
    assert (experiment.repetitions, experiment.sequential, experiment.server_per_block) == (4, True, True)
    assert (experiment.temperature, experiment.primary_metric, experiment.primary_levels) == (0.0, "server_tpot", [])
    assert (experiment.draft_calibration, experiment.profile_intervals) == (True, True)
    assert experiment.prompt_set == "code_edit"
    assert experiment.runs.count() == 5 * 3 * len(experiment.concurrency_levels)
    celery_dispatch.assert_called_once_with(args=[experiment.id], queue="cpu")
