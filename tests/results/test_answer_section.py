"""The answer at the top of the experiment page: per level what to deploy, and behind it each
primary cell's word for the service (the objective's joint word), with the primary metric's own
word beside it where the two differ."""

import re
from html import unescape

import pytest
from django.urls import reverse

from tests.factories import seed_finished_experiment

pytestmark = pytest.mark.django_db


def _reasons(client, experiment) -> list[str]:
    html = client.get(reverse("experiments:detail", args=[experiment.pk])).text
    section = html.split('<section class="card answer" id="answer">')[1].split("</section>")[0]
    reasons = re.findall(r'<ul class="answer-reasons">(.*?)</ul>', section, re.S)
    return [re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", "", li))).strip()
            for block in reasons for li in re.findall(r"<li>(.*?)</li>", block, re.S)]  # fmt: skip


def _set_joint(experiment, word: str, guards: list) -> None:
    analysis = experiment.analysis
    for cell in analysis.series["question"]["cells"]:
        cell["joint"] = {**(cell.get("joint") or {}), "word": word, "sentence": word, "guards": guards}
    analysis.save()


GUARD = {"label": "Output throughput", "figure": "0.64×", "blocks": 3, "status": "worse", "margin_percent": "5%"}


def test_the_answer_gives_each_cell_its_word_for_the_service(logged_in_client):
    experiment = seed_finished_experiment()
    cells = experiment.analysis.series["question"]["cells"]
    _set_joint(experiment, "costs", [GUARD])
    reasons = _reasons(logged_in_client, experiment)
    assert reasons
    for reason in reasons:
        assert reason.startswith("costs ")
    faster = next(c for c in cells if c["outcome"] == "faster")
    assert any(f"{faster['arm']}, {faster['figure']} (faster on " in reason for reason in reasons)


def test_without_guards_the_primary_word_is_not_repeated(logged_in_client):
    experiment = seed_finished_experiment()
    _set_joint(experiment, "pays", [])  # the primary metric alone: "pays" is its "faster"
    reasons = _reasons(logged_in_client, experiment)
    assert reasons
    assert all(reason.startswith("pays ") and " alone)" not in reason for reason in reasons)
    analysis = experiment.analysis
    for cell in analysis.series["question"]["cells"]:
        cell.pop("joint", None)  # an analysis stored before objectives: the primary word
    analysis.save()
    assert any(reason.startswith("faster ") for reason in _reasons(logged_in_client, experiment))
