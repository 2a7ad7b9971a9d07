"""The admin (experiments/admin.py): the tables are listed read mostly; an experiment may be
renamed but its protocol not changed."""

import pytest
from django.urls import reverse

from tests.factories import RequestRecordFactory, RunSummaryFactory, UserFactory, experiment_with_arms

pytestmark = pytest.mark.django_db


ADMIN_MODELS = [
    "experiment", "arm", "run", "runsummary", "requestrecord", "environmentsnapshot", "speedupestimate",
    "experimentanalysis",
]  # fmt: skip


@pytest.mark.parametrize("model", ADMIN_MODELS)
def test_admin_lists_the_tables_read_mostly(client, model):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    RunSummaryFactory()
    RequestRecordFactory()

    assert client.get(reverse(f"admin:experiments_{model}_changelist")).status_code == 200
    assert client.get(reverse(f"admin:experiments_{model}_add")).status_code == 403


def test_admin_may_rename_an_experiment_but_not_change_its_protocol(client):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    experiment = experiment_with_arms(name="old name")

    page = client.get(reverse("admin:experiments_experiment_change", args=[experiment.pk]))

    assert 'name="name"' in page.text
    assert 'name="target_model"' not in page.text
    assert 'name="concurrency_levels"' not in page.text
