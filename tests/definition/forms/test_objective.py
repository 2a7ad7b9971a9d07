"""The experiment form's service objective (experiments/definition/forms/objective.py): a
preset sets the primary metric and the guards, custom takes the ticked ones, and what cannot be
tested is refused by name; a clone shows the objective again."""

import pytest

from experiments.definition import prefill
from experiments.definition import services as definition
from experiments.definition.forms.experiment import protocol_is_valid
from tests.definition.forms.helpers import bind
from tests.factories import UserFactory, form_data

pytestmark = pytest.mark.django_db

SLO = {"slo_e2e_ms": "5000"}


def _stored(**posted):
    form, arms = bind(form_data(**posted))
    assert protocol_is_valid(form, arms), form.errors
    fields = form.experiment_fields()
    return fields["objective"], fields["primary_metric"], fields["guards"]


def test_the_interactive_preset_guards_e2e_and_throughput_at_five_percent():
    assert _stored(objective="interactive") == (
        "interactive", "server_tpot",
        [{"metric": "e2e", "margin": 0.05}, {"metric": "output_throughput", "margin": 0.05}],
    )  # fmt: skip


def test_the_shared_preset_guards_goodput_only_with_an_slo_and_takes_the_margin_given():
    assert _stored(objective="shared")[2] == [{"metric": "e2e_p95", "margin": 0.05}]
    assert _stored(objective="shared", guard_margin="10", **SLO) == (
        "shared",
        "e2e",
        [{"metric": "e2e_p95", "margin": 0.1}, {"metric": "goodput", "margin": 0.1}],
    )


def test_custom_takes_the_primary_and_the_guards_ticked_but_never_the_primary_as_its_own_guard():
    assert _stored(objective="custom", primary_metric="e2e", guard_metrics=["e2e", "ttft"]) == (
        "custom",
        "e2e",
        [{"metric": "ttft", "margin": 0.05}],
    )


def test_the_primary_metric_alone_has_no_guards():
    assert _stored(objective="", primary_metric="tpot") == ("", "tpot", [])


@pytest.mark.parametrize(
    ("posted", "field", "message"),
    [
        ({"objective": "interactive", "primary_metric": "e2e"}, "primary_metric", "rests on Engine-timed TPOT"),
        ({"objective": "custom", "guard_metrics": []}, "guard_metrics", "Tick at least one guard"),
        ({"objective": "custom", "guard_metrics": ["goodput"]}, "guard_metrics", "set an SLO first"),
        ({"objective": "interactive", "guard_margin": "60"}, "guard_margin", "less than 50"),
        ({"objective": "fastest"}, "objective", "Select a valid choice"),
    ],
)
def test_what_cannot_be_tested_is_refused_by_name(posted, field, message):
    form, arms = bind(form_data(**posted))
    assert not protocol_is_valid(form, arms)
    assert any(message in error for error in form.errors[field]), form.errors


def test_a_clone_shows_the_objective_again(celery_dispatch):
    form, arms = bind(form_data(objective="custom", primary_metric="e2e", guard_metrics=["ttft"], guard_margin="8"))
    assert protocol_is_valid(form, arms), form.errors
    experiment = definition.experiment_create(owner=UserFactory(), arms=arms.arm_specs(), **form.experiment_fields())

    data = prefill.experiment_data(experiment)

    assert (data["objective"], data["guard_metrics"], data["guard_margin"]) == ("custom", ["ttft"], 8.0)
    assert experiment.question.guards[0].margin == pytest.approx(0.08)
