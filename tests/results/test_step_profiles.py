"""The profile section's figures (experiments/results/step_profiles.py) against hand-computed cases,
and profiled intervals left out of every statistic."""

import json
import re

import pytest
from django.urls import reverse

from experiments.analysis.services import experiment_analyse
from experiments.execution import services as execution
from experiments.measurement.engine.trace_shares import TraceSummary
from experiments.models import ExperimentAnalysis, ProfiledInterval, SpeedupEstimate
from experiments.results import step_profiles
from experiments.results.block_selectors import results_for_experiment
from tests.factories import seed_finished_experiment

pytestmark = pytest.mark.django_db


def _summary(proposing: float, verifying: float, sampling: float, total: float = 100.0) -> TraceSummary:
    summary = TraceSummary(steps=20, total_ms=total)
    summary.phase_ms.update(
        proposing=proposing, verifying=verifying, sampling=sampling, other=total - proposing - verifying - sampling
    )
    summary.scope_ms["gpu_model_runner: forward"] = verifying
    return summary


def test_a_phase_is_its_share_times_the_measured_step():
    row = step_profiles.ProfileRow(
        arm_id=1, level=4, requests=4, steps=20, profiled_ms=100.0,
        shares={"proposing": 0.25, "verifying": 0.5, "sampling": 0.05, "other": 0.2}, step_ms=30.0,
    )  # fmt: skip
    # 30 ms × 0.25, × 0.5, × 0.05, × 0.2
    assert row.phase_ms == pytest.approx({"proposing": 7.5, "verifying": 15.0, "sampling": 1.5, "other": 6.0})
    assert row.percent["verifying"] == pytest.approx(50.0)
    assert step_profiles.ProfileRow(1, 4, 4, 20, 100.0, row.shares, step_ms=None).phase_ms is None


def test_rows_take_the_stored_interval_and_the_step_accounting():
    experiment = seed_finished_experiment(repetitions=2, requests=6)
    arm = experiment.arms.get(method="ngram")
    execution.profiled_interval_record(
        experiment=experiment, arm=arm, level=4, summary=_summary(10, 60, 5), requests=4, completed=4,
        trace_path="profiles/x.gz", trace_bytes=10,
    )  # fmt: skip
    execution.profiled_interval_record(experiment=experiment, arm=arm, level=1, requests=4, error="OSError: no trace")
    stored = ProfiledInterval.objects.get(arm=arm, concurrency=4)
    assert (stored.share_proposing, stored.share_verifying, stored.share_sampling, stored.share_other) == (
        pytest.approx(0.10), pytest.approx(0.60), pytest.approx(0.05), pytest.approx(0.25),
    )  # fmt: skip
    assert stored.top_events == [[pytest.approx(0.6), "gpu_model_runner: forward"]]

    step_rows = [{"arm_id": arm.id, "level": 4, "step_ms": 40.0}, {"arm_id": arm.id, "level": 1, "step_ms": 20.0}]
    failed, profiled = step_profiles.profile_rows(experiment=experiment, step_rows=step_rows)
    assert (failed.level, failed.shares, failed.phase_ms, failed.error) == (1, None, None, "OSError: no trace")
    assert profiled.phase_ms == pytest.approx({"proposing": 4.0, "verifying": 24.0, "sampling": 2.0, "other": 10.0})


def test_profiled_intervals_are_left_out_of_every_statistic():
    experiment = seed_finished_experiment(repetitions=3, requests=6)
    before = results_for_experiment(experiment=experiment).chart_data()
    speedups_before = list(SpeedupEstimate.objects.filter(experiment=experiment).values_list("point", flat=True))
    for arm in experiment.arms.all():
        for level in experiment.concurrency_levels:
            execution.profiled_interval_record(
                experiment=experiment, arm=arm, level=level, summary=_summary(30, 30, 30), requests=4, completed=4
            )
    experiment_analyse(experiment=experiment)
    assert results_for_experiment(experiment=experiment).chart_data() == before
    assert list(SpeedupEstimate.objects.filter(experiment=experiment).values_list("point", flat=True)) == (
        speedups_before
    )
    assert ExperimentAnalysis.objects.get(experiment=experiment).verdicts


def test_the_page_shows_the_profile_with_its_definitions(client, user):
    experiment = seed_finished_experiment(repetitions=2, requests=6, owner=user, profile_intervals=True)
    arm = experiment.arms.get(method="ngram")
    execution.profiled_interval_record(experiment=experiment, arm=arm, level=1, summary=_summary(10, 60, 5), requests=4)
    client.force_login(user)
    html = client.get(f"/experiments/{experiment.pk}/").text
    for canvas_or_table in ('id="table-profile"', 'id="chart-step-time"', 'id="chart-capacity"'):
        assert canvas_or_table in html
    for term in ("Proposing (%)", "Verifying (%)", "Sampling (%)", "Other (%)", "Step (ms)", "Profiled time"):
        assert f"<dt>{term}</dt>" in html
    assert 'data-value="60.0"' in html  # verifying, in percent
    assert "with one profiled interval per arm and level" in html  # in the protocol


def test_the_api_gives_the_pages_profiles(client, user):
    experiment = seed_finished_experiment(repetitions=2, requests=6, owner=user, profile_intervals=True)
    arm = experiment.arms.get(method="ngram")
    execution.profiled_interval_record(experiment=experiment, arm=arm, level=1, summary=_summary(10, 60, 5), requests=4)
    execution.profiled_interval_record(experiment=experiment, arm=arm, level=4, requests=4, error="OSError: no trace")
    client.force_login(user)
    html = client.get(f"/experiments/{experiment.pk}/").text
    page = json.loads(re.search(r'<script id="profile-data" type="application/json">(.*?)</script>', html, re.S)[1])

    body = client.get(reverse("api:experiment-results", args=[experiment.pk])).json()

    assert body["profiles"] == page["profiles"]
    profiled, failed = body["profiles"]
    assert profiled["shares"] == pytest.approx({"proposing": 0.10, "verifying": 0.60, "sampling": 0.05, "other": 0.25})
    assert (failed["level"], failed["shares"], failed["error"]) == (4, None, "OSError: no trace")


def test_a_trace_not_split_shows_its_steps_and_why_not_zeros(client, user):
    experiment = seed_finished_experiment(repetitions=2, requests=6, owner=user, profile_intervals=True)
    arm = experiment.arms.get(method="ngram")
    unsplit = TraceSummary(steps=20, total_ms=80.0)  # steps, no phase scope: vLLM's V2 runner
    execution.profiled_interval_record(
        experiment=experiment, arm=arm, level=1, summary=unsplit, requests=4, error=unsplit.not_split_reason
    )
    (row,) = step_profiles.profile_rows(experiment=experiment, step_rows=[])
    assert (row.not_split, row.shares, row.percent, row.steps, row.profiled_ms) == (True, None, None, 20, 80.0)
    client.force_login(user)
    html = client.get(f"/experiments/{experiment.pk}/").text
    assert "<dt>Not split</dt>" in html
    table = html[html.index('id="table-profile"') :]
    assert "not split on this model runner: the traces hold 20 engine steps" in table
    assert "not profiled:" not in table
    assert 'data-value="80.0"' in table  # the profiled time, shown
    assert 'data-value="0.0"' not in table  # no share shown as zero
