"""Security settings: login throttling, the Content-Security-Policy, HTTPS switches,
`check --deploy` under production-like settings, error logging, a read-only admin."""

import base64
import hashlib
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from unittest import mock

import pytest
from django.conf import settings
from django.test import Client, override_settings
from django.urls import reverse

from experiments.models import Experiment, RequestRecord, Run
from tests.factories import PASSWORD, RequestRecordFactory, UserFactory, seed_finished_experiment

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- login throttling


def _try_login(client: Client, username: str, password: str):
    return client.post(reverse("login"), {"username": username, "password": password})


@override_settings(AXES_ENABLED=True, AXES_FAILURE_LIMIT=5)
def test_after_five_wrong_passwords_even_the_right_one_is_refused(user):
    client = Client()
    for _ in range(4):
        assert _try_login(client, user.username, "wrong").status_code == 200
    assert _try_login(client, user.username, "wrong").status_code == 429

    response = _try_login(client, user.username, PASSWORD)

    assert response.status_code == 429
    assert "Too many failed logins" in response.text
    assert "_auth_user_id" not in client.session


@override_settings(AXES_ENABLED=True, AXES_FAILURE_LIMIT=5)
def test_the_lockout_is_for_that_username_only_and_a_success_resets_the_count(user):
    other = UserFactory(username="bob")
    client = Client()
    for _ in range(4):
        _try_login(client, user.username, "wrong")
    assert _try_login(client, user.username, PASSWORD).status_code == 302
    for _ in range(5):
        _try_login(Client(), other.username, "wrong")

    assert _try_login(Client(), user.username, PASSWORD).status_code == 302
    assert _try_login(Client(), other.username, PASSWORD).status_code == 429


# ---------------------------------------------------------------- Content-Security-Policy


def _csp(response) -> dict[str, list[str]]:
    directives = (part.strip().split() for part in response["Content-Security-Policy"].split(";") if part.strip())
    return {name: values for name, *values in directives}


def test_every_page_has_a_policy_without_inline_scripts(logged_in_client):
    csp = _csp(logged_in_client.get(reverse("experiments:list")))

    assert csp["script-src"] == ["'self'"]
    assert csp["object-src"] == ["'none'"]
    assert csp["frame-ancestors"] == ["'none'"]
    assert "'unsafe-inline'" not in csp["style-src"]


def _style_hash(value: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(value.encode()).digest()).decode() + "'"


def test_the_experiment_page_allows_exactly_its_inline_styles_and_runs_no_inline_script(logged_in_client):
    experiment = seed_finished_experiment(owner=UserFactory(username="owner"))

    response = logged_in_client.get(reverse("experiments:detail", args=[experiment.pk]))

    styles = set(re.findall(r'style="([^"]*)"', response.text))
    assert styles, "the results show arm swatches"
    allowed = _csp(response)["style-src"]
    assert "'unsafe-hashes'" in allowed
    assert {_style_hash(style) for style in styles} <= set(allowed)
    inline_scripts = re.findall(r"<script(?![^>]*\bsrc=)([^>]*)>", response.text)
    assert inline_scripts
    assert all('type="application/json"' in attributes for attributes in inline_scripts)


# ---------------------------------------------------------------- HTTPS and check --deploy

PRODUCTION_ENV = {
    "DJANGO_SETTINGS_MODULE": "specdash.settings",
    "SPECDASH_SECRET_KEY": "p" * 20 + uuid.uuid4().hex + "q" * 20,
    "SPECDASH_DEBUG": "false",
    "SPECDASH_HTTPS": "true",
    "SPECDASH_HSTS_PRELOAD": "true",
    "SPECDASH_BEHIND_PROXY": "true",
    "SPECDASH_ALLOWED_HOSTS": "specdash.example.com",
}


def _manage(*args: str, env: dict) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SPECDASH_HTTPS", "SPECDASH_HSTS", "DJANGO_"))}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=clean | env, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_is_clean_under_production_like_settings():
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_names_what_is_missing_without_https():
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV | {"SPECDASH_HTTPS": "false"})

    assert result.returncode != 0
    for check in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert check in result.stderr + result.stdout


PRINT_HTTPS = (
    "from django.conf import settings as s; print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, "
    "s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, s.SECURE_PROXY_SSL_HEADER)"
)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "False False False 0 None"),
        ({"SPECDASH_HTTPS": "true"}, "True True True 31536000 None"),
        (
            {"SPECDASH_HTTPS": "true", "SPECDASH_HSTS_SECONDS": "600", "SPECDASH_BEHIND_PROXY": "yes"},
            "True True True 600 ('HTTP_X_FORWARDED_PROTO', 'https')",
        ),
    ],
)
def test_https_settings_are_switched_by_the_environment(env, expected):
    result = _manage("shell", "-c", PRINT_HTTPS, env=PRODUCTION_ENV | {"SPECDASH_HTTPS": "false"} | env | {
        "SPECDASH_BEHIND_PROXY": env.get("SPECDASH_BEHIND_PROXY", "false")
    })  # fmt: skip

    assert result.stdout.strip().splitlines()[-1] == expected, result.stderr


def test_a_malformed_https_switch_stops_start_up_naming_it():
    result = _manage("check", env=PRODUCTION_ENV | {"SPECDASH_HTTPS": "sometimes"})

    assert result.returncode != 0
    assert "SPECDASH_HTTPS must be true or false" in result.stderr


# ---------------------------------------------------------------- error logging


def _log_after(offset: int) -> str:
    with open(settings.LOG_DIR / "errors.log", encoding="utf-8") as log:
        log.seek(offset)
        return log.read()


def _log_size() -> int:
    path = settings.LOG_DIR / "errors.log"
    return path.stat().st_size if path.exists() else 0


def test_a_server_error_is_logged_with_its_traceback_to_the_data_folder(user):
    client = Client(raise_request_exception=False)
    client.force_login(user)
    experiment = seed_finished_experiment(owner=user, requests=8, repetitions=1)
    marker = f"boom-{uuid.uuid4().hex}"
    before = _log_size()

    with mock.patch("experiments.results.views.selectors.experiment_arms", side_effect=RuntimeError(marker)):
        assert client.get(reverse("experiments:detail", args=[experiment.pk])).status_code == 500

    logged = _log_after(before)
    assert "Internal Server Error" in logged
    assert "Traceback" in logged
    assert marker in logged


def test_security_messages_are_logged_to_the_data_folder(logged_in_client):
    host = f"evil-{uuid.uuid4().hex[:8]}.example"
    before = _log_size()

    assert logged_in_client.get("/", HTTP_HOST=host).status_code == 400

    assert f"Invalid HTTP_HOST header: '{host}'" in _log_after(before)


# ---------------------------------------------------------------- the admin is read-only


@pytest.fixture
def admin_client(client):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def test_the_admin_cannot_delete_a_running_experiment_or_request_rows(admin_client):
    request = RequestRecordFactory(run__status=Run.Status.RUNNING)
    experiment = request.run.experiment
    Experiment.objects.filter(id=experiment.id).update(status=Experiment.Status.RUNNING)

    for url in (
        reverse("admin:experiments_experiment_delete", args=[experiment.pk]),
        reverse("admin:experiments_requestrecord_delete", args=[request.pk]),
        reverse("admin:experiments_run_delete", args=[request.run.pk]),
    ):
        assert admin_client.post(url, {"post": "yes"}).status_code == 403
    bulk = {"action": "delete_selected", "_selected_action": [experiment.pk], "post": "yes"}
    admin_client.post(reverse("admin:experiments_experiment_changelist"), bulk)

    assert Experiment.objects.filter(id=experiment.id).exists()
    assert RequestRecord.objects.filter(id=request.id).exists()
