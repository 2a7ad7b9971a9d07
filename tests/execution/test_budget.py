"""A running experiment's device-minute budget changed by its owner (experiments/execution/services.py
experiment_budget_set, the page's Budget form) and read by the worker before each next block
(experiments/lifecycle.experiment_block_add)."""

import pytest
from django.test import Client
from django.urls import reverse

from experiments import lifecycle
from experiments.execution import services as execution
from experiments.models import Experiment, IllegalTransition
from tests.analysis.test_continuation import _experiment
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_the_worker_reads_the_budget_as_it_stands_before_each_block():
    experiment = _experiment(blocks=3)  # 30 device-minutes for 3 blocks; the next about 7.5 more
    worker_copy = Experiment.objects.get(id=experiment.id)  # what the worker read when it started
    execution.experiment_budget_set(experiment=experiment, minutes=35)
    assert not lifecycle.experiment_block_add(experiment=worker_copy)
    assert worker_copy.max_device_minutes == 35
    execution.experiment_budget_set(experiment=experiment, minutes=45)
    assert lifecycle.experiment_block_add(experiment=worker_copy)


def test_an_ended_experiment_s_budget_is_refused():
    experiment = _experiment(blocks=3)
    Experiment.objects.filter(id=experiment.id).update(status=Experiment.Status.FINISHED)
    with pytest.raises(IllegalTransition):
        execution.experiment_budget_set(experiment=experiment, minutes=50)
    experiment.refresh_from_db()
    assert experiment.max_device_minutes is None


def test_the_owner_sets_it_on_the_page_others_may_not(client):
    experiment = _experiment(blocks=3)
    url = reverse("experiments:budget", args=[experiment.id])
    client.force_login(experiment.owner)
    page = client.get(reverse("experiments:detail", args=[experiment.id])).content.decode()
    assert 'id="budget"' in page
    response = client.post(url, {"max_device_minutes": "40"})
    assert response.status_code == 302
    experiment.refresh_from_db()
    assert experiment.max_device_minutes == 40
    # Refused values change nothing, and say why.
    response = client.post(url, {"max_device_minutes": "0"}, follow=True)
    assert "Budget not changed" in response.content.decode()
    experiment.refresh_from_db()
    assert experiment.max_device_minutes == 40
    # Empty: no budget.
    client.post(url, {"max_device_minutes": ""})
    experiment.refresh_from_db()
    assert experiment.max_device_minutes is None

    other = UserFactory(username="mallory")
    client.force_login(other)
    # A teammate who is not its owner (nor staff) may read the page but not change the budget.
    assert client.post(url, {"max_device_minutes": "5"}).status_code == 403
    experiment.refresh_from_db()
    assert experiment.max_device_minutes is None


def test_the_budget_form_needs_a_login_and_csrf(client):
    experiment = _experiment(blocks=3)
    url = reverse("experiments:budget", args=[experiment.id])
    response = client.post(url, {"max_device_minutes": "40"})
    assert response.status_code == 302
    assert "/login/" in response["Location"]
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(experiment.owner)
    assert strict.post(url, {"max_device_minutes": "40"}).status_code == 403
    experiment.refresh_from_db()
    assert experiment.max_device_minutes is None
