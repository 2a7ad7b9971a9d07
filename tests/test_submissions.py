"""A write sent twice stores once (experiments/submissions.py): a form posted again with the
key its page rendered, an API call retried with the same Idempotency-Key, and twins that
arrive together; a write that fails leaves its key free."""

import re
import threading

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.urls import reverse

from experiments import submissions
from experiments.models import Comment, Experiment, Submission
from tests.api_helpers import SMALL_SPEC, token_client
from tests.factories import ExperimentFactory, UserFactory, form_data

pytestmark = pytest.mark.django_db

KEY = re.compile(r'name="submission_key" value="([^"]+)"')


def _key(page) -> str:
    keys = KEY.findall(page.text)
    assert len(keys) >= 1, "the page renders no submission key"
    return keys[0]


@pytest.mark.parametrize(
    "url",
    [
        reverse("experiments:create"),
        reverse("experiments:import"),
        reverse("experiments:prompt_sets"),
        reverse("experiments:decision_new"),
    ],
)
def test_every_page_that_writes_renders_a_fresh_key(logged_in_client, url):
    first, second = _key(logged_in_client.get(url)), _key(logged_in_client.get(url))
    assert first != second
    assert submissions.key_problem(first) is None


def test_the_experiment_form_sent_twice_stores_one_experiment(logged_in_client, celery_dispatch):
    data = form_data() | {"submission_key": _key(logged_in_client.get(reverse("experiments:create")))}
    first = logged_in_client.post(reverse("experiments:create"), data)
    again = logged_in_client.post(reverse("experiments:create"), data)

    experiment = Experiment.objects.get()
    assert first.url == again.url == reverse("experiments:detail", args=[experiment.pk])
    said = [str(message) for message in get_messages(again.wsgi_request)]
    assert any("sent twice" in message for message in said), said


def test_two_forms_are_two_experiments_and_a_form_without_a_key_is_written_as_it_comes(
    logged_in_client, celery_dispatch
):
    for _ in range(2):
        key = _key(logged_in_client.get(reverse("experiments:create")))
        logged_in_client.post(reverse("experiments:create"), form_data() | {"submission_key": key})
    logged_in_client.post(reverse("experiments:create"), form_data())
    logged_in_client.post(reverse("experiments:create"), form_data())
    assert Experiment.objects.count() == 4


def test_a_refused_form_keeps_no_claim_and_its_key_still_works(logged_in_client, celery_dispatch):
    key = _key(logged_in_client.get(reverse("experiments:create")))
    refused = logged_in_client.post(reverse("experiments:create"), form_data(name="") | {"submission_key": key})
    assert refused.status_code == 400
    assert not Submission.objects.exists()
    logged_in_client.post(reverse("experiments:create"), form_data() | {"submission_key": key})
    assert Experiment.objects.count() == 1


def test_a_comment_sent_twice_is_one_comment(logged_in_client, user):
    experiment = ExperimentFactory(owner=user)
    page = logged_in_client.get(reverse("experiments:detail", args=[experiment.pk]))
    data = {"body": "seen it", "submission_key": _key(page)}
    for _ in range(2):
        logged_in_client.post(reverse("experiments:comment", args=[experiment.pk]), data)
    assert Comment.objects.filter(experiment=experiment).count() == 1


def test_a_key_is_the_users_own(celery_dispatch):
    alice, bob = UserFactory(), UserFactory()

    def write() -> str:
        return f"/experiments/{Experiment.objects.count()}/"

    assert submissions.submission_once(user=alice, key="same", write=write) == ("/experiments/0/", True)
    assert submissions.submission_once(user=bob, key="same", write=write) == ("/experiments/0/", True)
    assert submissions.submission_once(user=alice, key="same", write=write) == ("/experiments/0/", False)
    assert Submission.objects.count() == 2


def test_a_write_that_fails_takes_its_claim_with_it(user):
    def fails() -> str:
        ExperimentFactory(owner=user)
        raise RuntimeError("the write broke half-way")

    with pytest.raises(RuntimeError):
        submissions.submission_once(user=user, key="k", write=fails)
    assert not Submission.objects.exists()
    assert not Experiment.objects.exists()
    assert submissions.submission_once(user=user, key="k", write=lambda: "/done/") == ("/done/", True)


@pytest.mark.django_db(transaction=True)
def test_twins_that_arrive_together_write_once(user):
    """Two connections claim one key at once: the unique index makes the second wait for the
    first's commit, then it finds the first's row and writes nothing."""
    writes, answers, inside = [], [], threading.Event()

    def write() -> str:
        inside.set()
        writes.append(1)
        threading.Event().wait(0.5)  # the twin arrives while this write is open
        return "/first/"

    def send():
        try:
            answers.append(submissions.submission_once(user=user, key="twin", write=write))
        finally:
            connection.close()

    first = threading.Thread(target=send)
    first.start()
    assert inside.wait(10)
    second = threading.Thread(target=send)
    second.start()
    first.join(10)
    second.join(10)
    assert writes == [1]
    assert sorted(answers) == [("/first/", False), ("/first/", True)]


SPEC = SMALL_SPEC | {"name": "retried", "prompt_set": "code_edit"}


def test_the_api_replays_a_retried_submission(user, celery_dispatch):
    client = token_client(user)
    headers = {"Idempotency-Key": "retry-1"}
    first = client.post(reverse("api:experiments"), SPEC, content_type="application/json", headers=headers)
    again = client.post(reverse("api:experiments"), SPEC, content_type="application/json", headers=headers)
    other = client.post(reverse("api:experiments"), SPEC, content_type="application/json")

    assert (first.status_code, again.status_code, other.status_code) == (201, 200, 201), first.content
    assert first.json()["id"] == again.json()["id"] != other.json()["id"]
    assert Experiment.objects.count() == 2


@pytest.mark.parametrize("key", ["", "k" * 65, "clé", "tab\there"])
def test_the_api_refuses_a_key_it_cannot_keep(user, key):
    response = token_client(user).post(
        reverse("api:experiments"), SPEC, content_type="application/json", headers={"Idempotency-Key": key}
    )
    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["detail"]
    assert not Experiment.objects.exists()
