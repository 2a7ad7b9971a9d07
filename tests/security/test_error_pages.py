"""The web server's settings answer a missing page or endpoint without the URL map or the
server's paths: `./dev`'s gunicorn environment loads specdash.settings with DEBUG off (nothing
in the compose file or the images switches it on), and every 404 and 403 under /api/ is JSON."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.urls import Resolver404, reverse

from experiments.api.exceptions import NOT_FOUND, exception_handler

ROOT = Path(__file__).resolve().parents[2]

# In the environment `./dev` starts gunicorn with: the settings, DEBUG, and two answers.
PROBE = """
import json, django
from django.conf import settings
django.setup()
from django.test import Client
client = Client(HTTP_HOST="127.0.0.1")
answers = {path: client.get(path) for path in ("/api/v1/no-such-thing/", "/no-such-page/")}
print(json.dumps({
    "settings": settings.SETTINGS_MODULE, "debug": settings.DEBUG,
    "answers": {path: [r.status_code, r["Content-Type"], r.content.decode()] for path, r in answers.items()},
}))
"""


def _dev_env() -> dict[str, str]:
    """What `./dev env` exports, in a caller's environment without Django's or the tests' settings."""
    caller = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "SPECDASH_DEBUG"))}
    out = subprocess.run([str(ROOT / "dev"), "env"], env=caller, capture_output=True, text=True, timeout=60, check=True)
    exported = dict(line.removeprefix("export ").split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    return caller | exported


def test_the_web_servers_settings_have_debug_off_and_answer_404s_plainly():
    env = _dev_env()
    assert env["DJANGO_SETTINGS_MODULE"] == "specdash.settings"
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    probe = json.loads(result.stdout.splitlines()[-1])

    assert probe["settings"] == "specdash.settings"
    assert probe["debug"] is False
    status, content_type, body = probe["answers"]["/api/v1/no-such-thing/"]
    assert (status, content_type, json.loads(body)) == (404, "application/json", {"detail": NOT_FOUND})
    status, _, page = probe["answers"]["/no-such-page/"]
    assert status in (302, 404)
    for leak in ("URLconf", "urls.py", str(ROOT)):
        assert leak not in page


def test_nothing_deployed_switches_debug_on():
    for path in ["dev", *map(str, (ROOT / "deploy").rglob("*"))]:
        file = ROOT / path
        if file.is_file() and file.suffix not in (".json",):
            assert "SPECDASH_DEBUG" not in file.read_text(errors="replace"), path


def test_a_url_lookups_404_never_reaches_the_body():
    """Django's Resolver404 carries the patterns it tried (with their modules' file paths)."""
    tried = Resolver404({"tried": [["<URLResolver <module 'experiments.urls' from '/srv/x/urls.py'>>"]], "path": "x"})
    response = exception_handler(tried, {})
    assert response is not None
    assert (response.status_code, response.data) == (404, {"detail": NOT_FOUND})


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["get", "post"])
def test_every_403_under_api_is_json(client, method, django_user_model):
    from django.test import Client

    user = django_user_model.objects.create_user("tester", password="x")
    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(user)
    answers = [
        csrf_client.post(reverse("api:token_rotate")),  # a session write without its CSRF token
        getattr(client, method)(reverse("api:experiments")),  # no token, no session
    ]
    for response in answers:
        assert response.status_code in (401, 403)
        assert response["Content-Type"] == "application/json"
        assert response.json()["detail"]
