"""The experiment form's break-even search: a range and a resolution instead of listed levels
(experiments/definition/forms/), through the form, the create page and the API's spec."""

import pytest
from django.urls import reverse

from experiments.api.submission import spec_from_experiment, submission_from_spec
from experiments.definition import prefill
from experiments.definition import services as definition
from experiments.models import Experiment, Run
from tests.definition.forms.helpers import bind
from tests.factories import UserFactory, form_data

pytestmark = pytest.mark.django_db

SEARCH = {
    "concurrency_levels": "", "search_low": "1", "search_high": "8", "search_resolution": "2", "num_prompts": "32",
}  # fmt: skip


def test_a_range_becomes_a_search_measuring_its_ends_first():
    form, arms = bind(form_data(**SEARCH, repetitions="8"))
    assert form.is_valid(), form.errors
    assert arms.is_valid(), arms.errors
    fields = form.experiment_fields()
    assert fields["concurrency_levels"] == [1, 8]
    assert (fields["search_low"], fields["search_high"], fields["search_resolution"]) == (1, 8, 2.0)


def test_listed_levels_leave_the_search_empty():
    form, _ = bind(form_data(search_resolution="2"))
    assert form.is_valid(), form.errors
    assert form.experiment_fields()["search_resolution"] is None


BAD = {
    "both levels and a range": ({**SEARCH, "concurrency_levels": "1, 4"}, "concurrency_levels"),
    "neither": ({"concurrency_levels": "", "search_low": "", "search_high": ""}, "concurrency_levels"),
    "one end only": ({**SEARCH, "search_high": ""}, "search_high"),
    "upside down": ({**SEARCH, "search_low": "8", "search_high": "2"}, "search_high"),
    "a single level": ({**SEARCH, "search_low": "4", "search_high": "4"}, "search_high"),
    "resolution too fine": ({**SEARCH, "search_resolution": "1.05"}, "search_resolution"),
    "no resolution": ({**SEARCH, "search_resolution": ""}, "search_resolution"),
    "levels that matter": ({**SEARCH, "primary_levels": "8"}, "primary_levels"),
    "a fixed design": ({**SEARCH, "sequential": None}, "sequential"),
    "too few prompts for the top": ({**SEARCH, "num_prompts": "20"}, "num_prompts"),
}


@pytest.mark.parametrize(("overrides", "field"), BAD.values(), ids=BAD.keys())
def test_a_search_that_cannot_run_is_refused_on_its_field(overrides, field):
    form, _ = bind(form_data(**overrides))
    assert not form.is_valid()
    assert field in form.errors, form.errors


def test_the_create_page_stores_a_search_with_its_first_block_only(logged_in_client, celery_dispatch):
    response = logged_in_client.post(reverse("experiments:create"), form_data(**SEARCH, repetitions="8"))
    assert response.status_code == 302, response.context and response.context["form"].errors
    experiment = Experiment.objects.get()
    assert (experiment.search_low, experiment.search_high, experiment.concurrency_levels) == (1, 8, [1, 8])
    assert set(experiment.runs.values_list("repetition", flat=True)) == {1}
    assert set(Run.objects.values_list("concurrency", flat=True)) == {1, 8}


def test_the_api_takes_a_range_without_levels_and_a_re_run_asks_the_range_again(celery_dispatch):
    user = UserFactory(username="bob")
    spec = {
        "name": "up to which concurrency", "target_model": form_data()["target_model"], "dtype": "float32",
        "prompt_set": "chat", "num_prompts": 32, "max_tokens": 16, "search_low": 1, "search_high": 8,
        "search_resolution": 2, "repetitions": 8, "arms": [{"method": "ngram", "num_speculative_tokens": 4}],
    }  # fmt: skip
    submission = submission_from_spec(spec, user=user)
    experiment = definition.experiment_create(owner=user, arms=submission.arms, **submission.fields)
    # Levels the search added are its results: a re-run asks for the range, not for them.
    Experiment.objects.filter(id=experiment.id).update(concurrency_levels=[1, 4, 8])
    experiment.refresh_from_db()
    again = spec_from_experiment(experiment)
    assert again["concurrency_levels"] == []
    assert (again["search_low"], again["search_high"], again["search_resolution"]) == (1, 8, 2.0)
    assert prefill.experiment_data(experiment)["concurrency_levels"] == ""
