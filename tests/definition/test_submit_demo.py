"""The demo experiment that `./dev up` submits: the block design with its A/A replicate,
within the rules the form applies to everyone else's experiments."""

from unittest import mock

import pytest
from django.core.management import call_command

from experiments.definition.forms.experiment import ExperimentForm
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
    # The interactive objective: the form's guards are the ones the demo stores.
    assert form.experiment_fields()["guards"] == demo_fields()["guards"]
    assert [g["metric"] for g in demo_fields()["guards"]] == ["e2e", "output_throughput"]


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
    # One message per queued block (issue 38): each idle worker of the queue can claim one.
    assert celery_dispatch.call_args_list == [mock.call(args=[experiment.id], queue="cpu")] * experiment.blocks.count()


def test_the_search_demo_passes_the_forms_rules_and_queues_its_first_block(celery_dispatch):
    from experiments.management.commands.submit_demo import SEARCH_DEMO_NAME, search_demo_fields

    owner = UserFactory(username="demo-owner")
    fields = search_demo_fields(owner)
    posted = _as_posted(fields) | {
        "concurrency_levels": "", "uploaded_prompt_set": fields["uploaded_prompt_set"].pk, "ignore_eos": "on",
        "sequential": "on", "max_device_minutes": "40", "worthwhile_gain": "20",
    }  # fmt: skip
    form = ExperimentForm(posted, user=owner, speculative_arms=1, draft_arms=1)
    assert form.is_valid(), form.errors
    assert form.cleaned_data["concurrency_levels"] == [1, 32]

    call_command("submit_demo", owner=owner.username, search=True)
    experiment = Experiment.objects.get(name=SEARCH_DEMO_NAME)
    assert (experiment.search_low, experiment.search_high, experiment.search_resolution) == (1, 32, 2.0)
    assert experiment.worthwhile_gain == 0.2
    assert experiment.uploaded_prompt_set.prompt_count == 130
    assert [(arm.method, arm.num_speculative_tokens) for arm in experiment.arms.order_by("position")] == [
        (Arm.Method.BASELINE, None), (Arm.Method.DRAFT_MODEL, 10),
    ]  # fmt: skip
    assert set(experiment.runs.values_list("repetition", "concurrency")) == {(1, 1), (1, 32)}
