"""The teams of the team tests: red (alice, carol) and blue (bob), and an experiment of red's."""

import pytest
from django.contrib.auth.models import Group

from tests.factories import seed_finished_experiment
from tests.teams.helpers import member


@pytest.fixture
def red():
    return Group.objects.create(name="red")


@pytest.fixture
def blue():
    return Group.objects.create(name="blue")


@pytest.fixture
def alice(red):
    return member("alice", red)


@pytest.fixture
def carol(red):
    return member("carol", red)


@pytest.fixture
def bob(blue):
    """The outsider: in another team."""
    return member("bob", blue)


@pytest.fixture
def experiment(alice, red):
    return seed_finished_experiment(owner=alice, team=red, name="red secret sweep")
