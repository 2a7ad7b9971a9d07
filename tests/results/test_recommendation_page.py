"""The experiment page's "What to deploy": per level the arm the primary cells' words
recommend, and the derived --speculative-config when one arm pays only at the lower level."""

import json
import re
import shlex
from html import unescape

import pytest
from django.urls import reverse

from experiments.models import Decision, SpeedupEstimate
from tests.factories import seed_finished_experiment

pytestmark = pytest.mark.django_db


def _set_words(experiment, words):
    """Give the stored primary cells these {(arm position, level): (outcome, point)}, as an analysis
    without guards stores them (no joint word: the primary metric's word is the service's)."""
    analysis = experiment.analysis
    question = analysis.series["question"]
    arms = {arm.id: arm.position for arm in experiment.arms.all()}
    for cell in question["cells"]:
        cell["outcome"], point = words[(arms[cell["arm_id"]], cell["level"])]
        cell.pop("joint", None)
        SpeedupEstimate.objects.filter(
            arm_id=cell["arm_id"], concurrency=cell["level"], metric=experiment.primary_metric, primary=True
        ).update(point=point, outcome=cell["outcome"])
    analysis.save()


def _section(client, experiment) -> str:
    html = client.get(reverse("experiments:detail", args=[experiment.pk])).text
    return html.split('id="recommendation"')[1].split("</section>")[0]


def test_an_arm_that_pays_only_at_the_lower_level_gets_a_derived_schedule(logged_in_client):
    experiment = seed_finished_experiment()
    first, second = sorted({c["arm_id"] for c in experiment.analysis.series["question"]["cells"]})
    positions = {arm.id: arm.position for arm in experiment.arms.all()}
    a, b = positions[first], positions[second]
    _set_words(experiment, {(a, 1): ("faster", 1.31), (a, 4): ("slower", 0.9), (b, 1): ("slower", 0.8),
                            (b, 4): ("not worth it", 1.0)})  # fmt: skip
    section = _section(logged_in_client, experiment)
    rows = re.findall(r'<tr data-word="([^"]+)">\s*<td>(\d+)</td>', section)
    assert rows == [("run arm", "1"), ("no speculation", "4")]
    assert "1.31×" in section
    arm = experiment.arms.get(id=first)
    flag, config_json = shlex.split(unescape(section.split('<pre id="recommendation-config">')[1].split("</pre>")[0]))
    assert flag == "--speculative-config"
    config = json.loads(config_json)
    # Levels 1 and 4 part at isqrt(1 * 4) = 2; the top band reaches the highest level measured.
    assert config == {**arm.speculative_config(), "num_speculative_tokens_per_batch_size": [
        [1, 2, arm.num_speculative_tokens], [3, 4, 0]]}  # fmt: skip
    assert "Derived, not measured" in section
    assert "<dt>Undecided</dt>" in section


def test_an_open_level_is_undecided_and_nothing_is_derived(logged_in_client):
    experiment = seed_finished_experiment()
    cells = experiment.analysis.series["question"]["cells"]
    positions = {arm.id: arm.position for arm in experiment.arms.all()}
    a, b = sorted({positions[c["arm_id"]] for c in cells})
    _set_words(experiment, {(a, 1): ("faster", 1.2), (a, 4): ("inconclusive", 1.01), (b, 1): ("slower", 0.9),
                            (b, 4): ("slower", 0.9)})  # fmt: skip
    section = _section(logged_in_client, experiment)
    assert re.findall(r'<tr data-word="([^"]+)">', section) == ["run arm", "undecided"]
    assert "--speculative-config" not in section


def test_propose_fills_the_decision_form_from_the_recommendation(logged_in_client):
    experiment = seed_finished_experiment()
    first, second = sorted({c["arm_id"] for c in experiment.analysis.series["question"]["cells"]})
    positions = {arm.id: arm.position for arm in experiment.arms.all()}
    a, b = positions[first], positions[second]
    _set_words(experiment, {(a, 1): ("faster", 1.31), (a, 4): ("slower", 0.9), (b, 1): ("slower", 0.8),
                            (b, 4): ("slower", 0.9)})  # fmt: skip
    section = _section(logged_in_client, experiment)
    url = unescape(section.split('id="recommendation-propose" href="')[1].split('"')[0])
    form = logged_in_client.get(url).context["form"]
    assert form.initial["evidence"] == [experiment.pk]
    assert (form.initial["kind"], int(form.initial["arm"]), int(form.initial["max_concurrency"])) == (
        "deploy", first, 1,
    )  # fmt: skip
    assert f"From experiment #{experiment.pk}'s recommendation" in form.initial["rationale"]
    assert "num_speculative_tokens_per_batch_size" in form.initial["rationale"]
    # One click fills the form; nothing is written until it is submitted.
    assert not Decision.objects.exists()


def test_all_levels_settled_without_a_faster_arm_propose_not_deploying(logged_in_client):
    experiment = seed_finished_experiment()
    positions = sorted({arm.position for arm in experiment.arms.filter(id__in=[
        c["arm_id"] for c in experiment.analysis.series["question"]["cells"]])})  # fmt: skip
    _set_words(experiment, {(p, level): ("slower", 0.9) for p in positions for level in (1, 4)})
    section = _section(logged_in_client, experiment)
    url = unescape(section.split('id="recommendation-propose" href="')[1].split('"')[0])
    assert logged_in_client.get(url).context["form"].initial["kind"] == "do_not_deploy"
