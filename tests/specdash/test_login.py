"""Logging in and out (specdash/urls.py, Django's auth views): every page needs a login, an
htmx poll without a session sends the whole page to the login, CSRF is enforced."""

import re

import pytest
from django.test import Client
from django.urls import reverse

from experiments.models import Experiment
from tests.factories import PASSWORD, UserFactory, form_data

pytestmark = pytest.mark.django_db

HTMX = {"HX-Request": "true"}


@pytest.mark.parametrize(("name", "args"), [("list", []), ("create", []), ("detail", [1]), ("progress", [1])])
def test_pages_need_a_login(client, name, args):
    url = reverse(f"experiments:{name}", args=args)

    response = client.get(url)

    assert response.status_code == 302
    assert response.url == f"{reverse('login')}?next={url}"


def test_an_htmx_poll_without_a_session_sends_the_whole_page_to_login(client):
    url = reverse("experiments:progress", args=[1])

    response = client.get(url, headers=HTMX)

    assert response.status_code == 204
    assert response.headers["HX-Redirect"] == f"{reverse('login')}?next={url}"


def test_login_page_and_logging_in(client):
    UserFactory(username="bob")

    assert client.get(reverse("login")).status_code == 200
    response = client.post(reverse("login"), {"username": "bob", "password": PASSWORD})

    assert response.status_code == 302
    assert response.url == reverse("experiments:list")


def test_login_refuses_a_wrong_password(client):
    UserFactory(username="bob")

    response = client.post(reverse("login"), {"username": "bob", "password": "wrong"})

    assert response.status_code == 200
    assert "_auth_user_id" not in client.session


def test_logout_is_a_post(logged_in_client):
    page = logged_in_client.get(reverse("experiments:list"))
    assert re.search(r'<form[^>]*method="post"[^>]*action="/logout/"', page.text)

    response = logged_in_client.post(reverse("logout"))

    assert response.status_code == 302
    assert "_auth_user_id" not in logged_in_client.session


def test_csrf_is_enforced(user, celery_dispatch):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)

    refused = client.post(reverse("experiments:create"), form_data())
    assert refused.status_code == 403

    page = client.get(reverse("experiments:create"))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    accepted = client.post(reverse("experiments:create"), {**form_data(), "csrfmiddlewaretoken": token})
    assert accepted.status_code == 302
    assert Experiment.objects.count() == 1
