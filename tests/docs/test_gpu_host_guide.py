"""docs/gpu-hosts.md's first experiment as the guide writes it: its spec and the pool's settings
read out of the page (so the two cannot drift), submitted to the experiment form as the API and
the CLI submit a spec, and priced by the form's time limit and its estimate; the limit the page
states is the one the form computes, within the broker's 24 h hold, and the CPU pace would not be."""

import json
import re
from pathlib import Path

import pytest

from experiments.api import submission as api
from experiments.definition import cost_estimate
from experiments.definition.forms.experiment import ExperimentForm, experiment_limit_s, protocol_is_valid
from experiments.measurement.planning import device_cost
from experiments.models import Arm
from specdash.env import env_seconds_by_name
from tests.definition.forms.helpers import bind

pytestmark = pytest.mark.django_db

REPO = Path(__file__).resolve().parents[2]
GUIDE = (REPO / "docs" / "gpu-hosts.md").read_text()
WORKER_ENV = (REPO / "deploy" / "systemd" / "worker.env.example").read_text()
UNIT = (REPO / "deploy" / "systemd" / "specdash-worker@.service").read_text()
PACE = ("SPECDASH_SERVER_START_TIMEOUT_S_BY_QUEUE", "SPECDASH_RUN_SECONDS_PER_TOKEN_BY_QUEUE")


def guide_spec() -> dict:
    [block] = re.findall(r"```json\n(.*?)```", GUIDE, flags=re.DOTALL)
    return json.loads(block)


def settings_in(text: str) -> dict[str, str]:
    return dict(re.findall(rf"^({'|'.join(PACE)})=(\S+)$", text, flags=re.MULTILINE))


@pytest.fixture
def guide_settings(settings, monkeypatch):
    """The web server's settings as the guide sets them: the pool's pace, the unit's models folder."""
    for name, value in settings_in(GUIDE).items():
        monkeypatch.setenv(name, value)
        setattr(settings, name, env_seconds_by_name(name))
    settings.SPECDASH_MODELS_DIR = Path(re.search(r"SPECDASH_MODELS_DIR=(\S+)", UNIT)[1])
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 24 * 3600}
    settings.SPECDASH_ALLOW_ANY_MODEL_PATH = False


def _bound(spec: dict):
    """The form and arms bound to what the spec posts, as experiments/api/submission.py binds them."""
    errors: api.Errors = {}
    data = api._posted({k: v for k, v in spec.items() if k != api.ARMS_KEY}, ExperimentForm.base_fields, "", errors)
    data |= api._arms_data(spec[api.ARMS_KEY], errors)
    assert not errors
    return bind(data)


def test_the_guides_pool_settings_are_the_example_files(guide_settings):
    assert set(settings_in(GUIDE)) == set(PACE)
    assert settings_in(GUIDE) == settings_in(WORKER_ENV)


def test_the_form_accepts_the_guides_first_experiment_as_the_api_would(guide_settings, user):
    submission = api.submission_from_spec(guide_spec(), user=user)

    assert submission.fields["worker_queue"] == "h100"
    assert [arm.method for arm in submission.arms] == [Arm.Method.DRAFT_MODEL]


def test_its_time_limit_is_the_one_the_guide_states_and_within_the_brokers_hold(guide_settings, settings):
    form, arms = _bound(guide_spec())
    assert protocol_is_valid(form, arms), (form.errors, arms.errors)
    compared = 2 + bool(form.cleaned_data["aa_replicate"])

    limit_s = experiment_limit_s(form.cleaned_data, arms=compared)
    stated = re.search(r"the form's time limit for it is ([\d.]+) h", GUIDE)
    assert stated
    assert float(stated[1]) == round(limit_s / 3600, 1)
    assert limit_s <= settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]
    # At a CPU host's pace the same experiment is refused.
    settings.SPECDASH_RUN_SECONDS_PER_TOKEN_BY_QUEUE = {}
    at_cpu_pace = experiment_limit_s(form.cleaned_data, arms=compared)
    said = re.search(r"at the\s+CPU pace \(0\.25 s per token\) it would be ([\d.]+) h", GUIDE)
    assert said
    assert float(said[1]) == round(at_cpu_pace / 3600, 1)
    assert at_cpu_pace > settings.CELERY_BROKER_TRANSPORT_OPTIONS["visibility_timeout"]


def test_the_forms_estimate_prices_it_within_the_hold_at_the_pools_stated_bounds(guide_settings):
    form, arms = _bound(guide_spec())
    assert protocol_is_valid(form, arms)

    context = cost_estimate.estimate_context(form, arms)
    plan = cost_estimate.form_plan(form, arms)
    assert context["costs"].step.value == 0.05
    assert device_cost.estimate(plan, context["costs"]).most.minutes <= 24 * 60
