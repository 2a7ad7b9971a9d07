"""Property-based tests of the REST API against its OpenAPI schema (schemathesis): whatever
path parameters, query and body a client sends to any operation, the answer is a success or
a clear 4xx (JSON that says what was wrong), never a server error, and a refused submission
writes nothing. Requests carry a valid token; authentication has its own tests."""

import json
from pathlib import Path
from urllib.parse import urlencode

import pytest
import schemathesis
from django.test import Client
from hypothesis import HealthCheck, settings
from rest_framework.authtoken.models import Token
from schemathesis.core import NotSet

from experiments.models import Arm, Experiment, Run
from tests.factories import UserFactory
from tests.phases import examples

pytestmark = [pytest.mark.django_db, pytest.mark.slow(reason="generated: 30 cases an operation from the schema")]

# The committed schema, which tests/api/test_api.py holds equal to the generated one.
schema = schemathesis.openapi.from_path(Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml")


@pytest.fixture
def api(db) -> Client:
    """Django's test client, which keeps the test's database connection open (a WSGI
    request would close it at its end)."""
    token = Token.objects.create(user=UserFactory(username="fuzzer"))
    return Client(headers={"Authorization": f"Token {token.key}"})


def _send(api: Client, case):
    body = case.body
    if isinstance(body, NotSet):
        body = ""
    elif not isinstance(body, str | bytes):
        body = json.dumps(body)
    return api.generic(
        case.method,
        case.formatted_path,
        data=body,
        content_type=case.media_type or "application/json",
        QUERY_STRING=urlencode(case.query or {}, doseq=True),
    )


def _rows() -> tuple[int, int, int]:
    return Experiment.objects.count(), Arm.objects.count(), Run.objects.count()


@schema.parametrize()
@settings(
    max_examples=examples(30),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
def test_every_operation_answers_anything_with_success_or_a_clear_4xx(case, api, celery_dispatch):
    before = _rows()

    response = _send(api, case)

    assert response.status_code < 500, response.content[:500]
    # A path that names no experiment (an id such as "null") is Django's plain 404 page.
    if response.status_code >= 400 and response.status_code != 404:
        assert response["Content-Type"].startswith("application/json"), response.content[:200]
        assert response.json(), "an error says what was wrong"
        if case.method == "POST":
            assert _rows() == before
