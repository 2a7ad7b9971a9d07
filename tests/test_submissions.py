"""A write sent twice stores once (experiments/submissions.py): a form posted again with the
key its page rendered, an API call retried with the same Idempotency-Key, and twins that
arrive together; a write that fails leaves its key free."""

import re
import threading
from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.urls import reverse
from django.utils import timezone

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


def _once(user, key: str, write, *, door: str = "/door/", kind: str = Submission.Kind.FORM, fingerprint: str = "f"):
    return submissions.submission_once(user=user, kind=kind, door=door, key=key, fingerprint=fingerprint, write=write)


def test_a_key_is_the_users_own_for_one_kind_and_one_door(celery_dispatch):
    alice, bob = UserFactory(), UserFactory()
    writes = iter(range(100))

    def write() -> str:
        return f"/written/{next(writes)}/"

    assert _once(alice, "same", write) == ("/written/0/", True)
    assert _once(bob, "same", write) == ("/written/1/", True)
    assert _once(alice, "same", write, door="/other/") == ("/written/2/", True)
    assert _once(alice, "same", write, kind=Submission.Kind.API) == ("/written/3/", True)
    assert _once(alice, "same", write) == ("/written/0/", False)
    assert Submission.objects.count() == 4


def test_the_same_key_with_other_content_is_refused_and_writes_nothing(user):
    assert _once(user, "k", lambda: "/first/", fingerprint="a") == ("/first/", True)
    with pytest.raises(submissions.KeyReused):
        _once(user, "k", lambda: pytest.fail("a reused key wrote"), fingerprint="b")
    assert _once(user, "k", lambda: "/never/", fingerprint="a") == ("/first/", False)


def test_a_key_is_forgotten_after_its_lifetime(user):
    assert _once(user, "k", lambda: "/first/") == ("/first/", True)
    Submission.objects.update(created_at=timezone.now() - submissions.LIFETIME - timedelta(seconds=1))
    assert _once(user, "k", lambda: "/second/") == ("/second/", True)
    assert Submission.objects.get().location == "/second/"


def test_a_fingerprint_is_of_the_values_not_their_spelling():
    assert submissions.body_fingerprint({"a": 1, "b": [1, 2]}) == submissions.body_fingerprint({"b": [1, 2], "a": 1})
    assert submissions.body_fingerprint({"a": 1}) != submissions.body_fingerprint({"a": 2})


def test_a_write_that_fails_takes_its_claim_with_it(user):
    def fails() -> str:
        ExperimentFactory(owner=user)
        raise RuntimeError("the write broke half-way")

    with pytest.raises(RuntimeError):
        _once(user, "k", fails)
    assert not Submission.objects.exists()
    assert not Experiment.objects.exists()
    assert _once(user, "k", lambda: "/done/") == ("/done/", True)


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
            answers.append(_once(user, "twin", write))
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


def test_a_form_sent_again_with_other_values_is_a_409_that_stores_nothing(logged_in_client, celery_dispatch):
    """The page used again after its first submission (the browser's back button, an edit, a
    second send): its key says "sent before" and its values say "not a retry"."""
    key = _key(logged_in_client.get(reverse("experiments:create")))
    logged_in_client.post(reverse("experiments:create"), form_data(name="first") | {"submission_key": key})
    again = logged_in_client.post(reverse("experiments:create"), form_data(name="edited") | {"submission_key": key})

    assert again.status_code == 409
    assert "sent before with other values" in again.text
    assert list(Experiment.objects.values_list("name", flat=True)) == ["first"]
