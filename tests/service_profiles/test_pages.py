"""The service profile pages: a profile made and changed through the form, its recommendation
per concurrency band from the team's experiments, and "propose as a decision" filling the one
decision form; the logged-out and CSRF rules. The team rules are in tests/teams/."""

import re
from html import unescape

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from experiments.measurement.deploy import service_bands
from experiments.models import Decision, Experiment, RunSummary, ServiceProfile
from tests.factories import ServiceProfileFactory, seed_finished_experiment
from tests.results.test_recommendation_page import _set_words

pytestmark = pytest.mark.django_db

NGRAM, DRAFT = 1, 2  # the seeded arms' positions


def _profile_data(**changes) -> dict:
    return {"service": "chat", "target_model": str(settings.SPECDASH_MODELS_DIR / "target"),
            "worker_queue": "cpu", "metric": "server_tpot", "concurrency_low": "1", "concurrency_high": "16",
            "daily_concurrency": "", "category_mix": "", **changes}  # fmt: skip


def _page(client, profile) -> str:
    return client.get(reverse("experiments:service_profile", args=[profile.pk])).text


def _rows(page: str) -> list[tuple[str, str]]:
    return re.findall(r'<tr data-word="([^"]+)">\s*<td class="band-span">([^<]+)</td>', page)


def _propose_url(page: str) -> str:
    return unescape(page.split('id="service-propose" href="')[1].split('"')[0])


def _seeded(words, **fields) -> Experiment:
    experiment = seed_finished_experiment(**fields)
    _set_words(experiment, words)
    return experiment


FASTER_NGRAM = {(NGRAM, 1): ("faster", 1.4), (NGRAM, 4): ("faster", 1.2), (DRAFT, 1): ("slower", 0.9),
                (DRAFT, 4): ("slower", 0.8)}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "args"),
    [("service_profiles", []), ("service_profile_new", []), ("service_profile", [1]), ("service_profile_edit", [1])],
)
def test_pages_need_a_login(client, name, args):
    url = reverse(f"experiments:{name}", args=args)
    response = client.get(url)
    assert response.status_code == 302
    assert response.url == f"{reverse('login')}?next={url}"


def test_posts_need_the_csrf_token(user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    profile = ServiceProfileFactory(owner=user)
    data = _profile_data(service="other")
    assert client.post(reverse("experiments:service_profile_new"), data).status_code == 403
    assert client.post(reverse("experiments:service_profile_edit", args=[profile.pk]), data).status_code == 403
    assert ServiceProfile.objects.get().service == profile.service


def test_a_profile_made_through_the_form_is_stored_normalised(logged_in_client):
    curve, mix = "0-7: 2\n8-17: 24\n18-23: 6", "chat: 0.6, code_edit: 0.4"
    data = _profile_data(
        concurrency_low="", concurrency_high="", slo_tpot_ms="50", daily_concurrency=curve, category_mix=mix
    )
    response = logged_in_client.post(reverse("experiments:service_profile_new"), data)
    profile = ServiceProfile.objects.get()
    assert response.url == reverse("experiments:service_profile", args=[profile.pk])
    assert profile.daily_concurrency == [2] * 8 + [24] * 10 + [6] * 6
    assert (profile.concurrency_range, profile.slos) == ((2, 24), {"TPOT": 50.0})
    assert profile.category_mix == {"chat": 0.6, "code_edit": 0.4}
    assert "0-7: 2, 8-17: 24, 18-23: 6" in _page(logged_in_client, profile)


def test_a_refused_form_says_why_and_stores_nothing(logged_in_client):
    data = _profile_data(concurrency_low="32", concurrency_high="8", category_mix="chat: 0.5, code_edit: 0.4")
    response = logged_in_client.post(reverse("experiments:service_profile_new"), data)
    assert response.status_code == 400
    page = unescape(response.text)
    assert "The highest concurrency (8) is below the lowest (32)." in page
    assert "The shares sum to 0.9; they must sum to 1." in page
    assert not ServiceProfile.objects.exists()


def test_a_second_profile_for_a_service_is_refused(logged_in_client, user):
    ServiceProfileFactory(service="chat", owner=user)
    data = _profile_data()
    response = logged_in_client.post(reverse("experiments:service_profile_new"), data)
    assert response.status_code == 400
    assert "The team already has a profile for the service “chat”." in unescape(response.text)


def test_a_member_changes_the_profile(logged_in_client, user):
    profile = ServiceProfileFactory(service="chat", owner=user, concurrency_low=1, concurrency_high=4)
    form = logged_in_client.get(reverse("experiments:service_profile_edit", args=[profile.pk])).context["form"]
    assert (form.initial["concurrency_high"], form.initial["daily_concurrency"]) == (4, "")
    data = _profile_data(target_model=profile.target_model, concurrency_high="64", slo_e2e_ms="900")
    response = logged_in_client.post(reverse("experiments:service_profile_edit", args=[profile.pk]), data)
    assert response.url == reverse("experiments:service_profile", args=[profile.pk])
    profile.refresh_from_db()
    assert (profile.concurrency_range, profile.slos) == ((1, 64), {"E2E": 900.0})


def test_the_page_recommends_per_band_and_does_not_guess_beyond_the_measured_levels(logged_in_client, user):
    experiment = _seeded(FASTER_NGRAM, owner=user)
    profile = ServiceProfileFactory(owner=user, concurrency_low=1, concurrency_high=16)
    page = _page(logged_in_client, profile)
    assert _rows(page) == [("run arm", "1–4"), ("not measured", "5–16")]
    section = unescape(page.split('id="service-bands"')[1])
    assert "run <strong>n-gram k=4</strong>" in section
    assert f'#{experiment.pk}</a> n-gram k=4: <span class="outcome-faster">faster</span> 1.40×' in section
    assert "measured at 1, 4; the concurrencies between take the answer of both neighbours" in section
    assert "above the highest measured level, 4" in section


def test_propose_fills_the_decision_form_and_submitting_it_proposes_the_decision(logged_in_client, user):
    experiment = _seeded(FASTER_NGRAM, owner=user)
    profile = ServiceProfileFactory(service="chat", owner=user, concurrency_low=1, concurrency_high=4)
    url = _propose_url(_page(logged_in_client, profile))
    form = logged_in_client.get(url).context["form"]
    ngram = experiment.arms.get(position=NGRAM)
    assert form.initial["evidence"] == [experiment.pk]
    assert (form.initial["service"], form.initial["kind"], int(form.initial["arm"])) == ("chat", "deploy", ngram.pk)
    assert (int(form.initial["max_concurrency"]), form.initial["metric"]) == (4, "server_tpot")
    rationale = form.initial["rationale"]
    assert "service profile chat per concurrency band (1–4: run n-gram k=4" in rationale
    assert f"#{experiment.pk} faster 1.40× at 1, #{experiment.pk} faster 1.20× at 4" in rationale
    assert not Decision.objects.exists()

    data = {name: form.initial[name] for name in ("service", "kind", "arm", "max_concurrency", "metric", "rationale")}
    logged_in_client.post(url, {**data, "evidence": [experiment.pk]})
    decision = Decision.objects.get()
    assert (decision.service, decision.kind, decision.arm, decision.max_concurrency) == ("chat", "deploy", ngram, 4)
    assert list(decision.evidence.all()) == [experiment]


def test_every_band_settled_without_speculation_proposes_not_deploying(logged_in_client, user):
    _seeded({(p, level): ("slower", 0.9) for p in (NGRAM, DRAFT) for level in (1, 4)}, owner=user)
    profile = ServiceProfileFactory(owner=user, concurrency_low=1, concurrency_high=4)
    page = _page(logged_in_client, profile)
    assert _rows(page) == [("no speculation", "1–4")]
    assert logged_in_client.get(_propose_url(page)).context["form"].initial["kind"] == "do_not_deploy"


def test_an_arm_above_the_slo_is_not_run_and_the_page_says_so(logged_in_client, user):
    experiment = _seeded(FASTER_NGRAM, owner=user)
    ngram_runs = RunSummary.objects.filter(run__arm__position=NGRAM, run__experiment=experiment)
    ngram_runs.filter(run__concurrency=4).update(tpot_p90_ms=80.0)
    RunSummary.objects.filter(run__experiment=experiment).exclude(run__arm__position=NGRAM).update(tpot_p90_ms=10.0)
    ngram_runs.filter(run__concurrency=1).update(tpot_p90_ms=10.0)
    profile = ServiceProfileFactory(owner=user, concurrency_low=1, concurrency_high=4, slo_tpot_ms=50)
    page = unescape(_page(logged_in_client, profile))
    assert _rows(page) == [("run arm", "1"), ("not measured", "2–3"), ("no speculation", "4")]
    assert "breaks TPOT p90 80.0 ms > 50 ms: not run here" in page
    assert "Plain decoding breaks" not in page


def test_evidence_is_the_teams_finished_measured_experiments_on_the_model_queue_and_metric(logged_in_client, user):
    used = _seeded(FASTER_NGRAM, owner=user)
    elsewhere = [
        _seeded(FASTER_NGRAM, owner=user, worker_queue="h100"),
        _seeded(FASTER_NGRAM, owner=user, target_model="/models/other"),
        _seeded(FASTER_NGRAM, owner=user, source=Experiment.Source.IMPORTED),
    ]
    other_metric = _seeded(FASTER_NGRAM, owner=user)
    Experiment.objects.filter(pk=other_metric.pk).update(primary_metric="e2e")
    unfinished = _seeded(FASTER_NGRAM, owner=user)
    Experiment.objects.filter(pk=unfinished.pk).update(status=Experiment.Status.RUNNING)
    profile = ServiceProfileFactory(owner=user, concurrency_low=1, concurrency_high=4)
    response = logged_in_client.get(reverse("experiments:service_profile", args=[profile.pk]))
    assert [e.pk for e in response.context["cited"]] == [used.pk]
    assert [e.pk for e in response.context["other_metric"]] == [other_metric.pk]
    assert all(e.pk not in {c.pk for c in response.context["cited"]} for e in [*elsewhere, unfinished])


def test_a_mix_unlike_the_experiments_prompts_is_warned_about(logged_in_client, user):
    experiment = _seeded(FASTER_NGRAM, owner=user)  # the built-in chat set
    profile = ServiceProfileFactory(owner=user, category_mix={"chat": 0.5, "code_edit": 0.5})
    page = unescape(_page(logged_in_client, profile))
    assert f"#{experiment.pk} measured chat 100%; the service's mix is chat 50%, code_edit 50%." in page


def test_per_category_results_give_a_mix_weighted_estimate(logged_in_client, user):
    experiment = _seeded(FASTER_NGRAM, owner=user)
    ngram = experiment.arms.get(position=NGRAM)
    series = experiment.analysis.series
    series["by_category"] = [
        {"group": "chat", "prompts": 12, "cells": [{"arm_id": ngram.pk, "level": 1, "point": 1.5}]},
        {"group": "code_edit", "prompts": 8, "cells": [{"arm_id": ngram.pk, "level": 1, "point": 1.1}]},
    ]
    experiment.analysis.save()
    profile = ServiceProfileFactory(owner=user, category_mix={"chat": 0.6, "code_edit": 0.4})
    page = unescape(_page(logged_in_client, profile))
    # 1.5 ** 0.6 * 1.1 ** 0.4 = 1.325; the experiment's own mix is the same 60/40: no warning.
    assert "mix-weighted engine TPOT speedup ≈ 1.32× (estimate)" in page
    assert 'id="mix-warnings"' not in page


def test_the_proposals_kinds_are_the_decisions():
    assert {service_bands.DEPLOY, service_bands.DO_NOT_DEPLOY, service_bands.NEEDS_MORE_DATA} == set(Decision.Kind)
