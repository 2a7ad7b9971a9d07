"""Step accounting as the analysis stores it (experiments/analysis/series.py), the experiment page
shows it and the API returns it, on the hand-made records of tests/measurement/engine/test_steps.py."""

import math
from html import unescape

import pytest
from django.urls import reverse

from experiments.analysis.services import experiment_analyse
from experiments.measurement.engine import steps
from experiments.measurement.stats import latency
from experiments.models import Arm, Experiment
from tests.api_helpers import token_client
from tests.factories import ArmFactory, ExperimentFactory, RequestRecordFactory, RunSummaryFactory
from tests.measurement.engine.test_steps import BASE, NGRAM, RECORDS, _rows


def _stored_experiment():
    """RECORDS as request rows of a finished experiment, plus a failed request that would
    change every figure if it counted."""
    experiment = ExperimentFactory(concurrency_levels=[1], repetitions=2, status=Experiment.Status.FINISHED)
    arms = {
        BASE: ArmFactory(experiment=experiment, baseline=True, position=0),
        NGRAM: ArmFactory(experiment=experiment, position=1, label="n-gram k=4", method=Arm.Method.NGRAM),
    }
    runs = {}
    for number, record in enumerate(RECORDS):
        key = (record.arm, record.block)
        if key not in runs:
            runs[key] = RunSummaryFactory(
                run__arm=arms[record.arm], run__concurrency=1, run__repetition=record.block
            ).run
        RequestRecordFactory(
            run=runs[key], prompt_index=number, output_tokens=record.output_tokens, ttft_ms=record.ttft_ms,
            e2e_ms=record.e2e_ms, tpot_ms=latency.tpot_ms(record.ttft_ms, record.e2e_ms, record.output_tokens),
            spec_accepted_per_step=record.accepted_per_step,
        )  # fmt: skip
    RequestRecordFactory(
        run=runs[(NGRAM, 2)], prompt_index=99, e2e_ms=9000.0, spec_accepted_per_step=[], error="read timeout"
    )
    return experiment, arms


@pytest.fixture
def stored(db):
    experiment, arms = _stored_experiment()
    analysis = experiment_analyse(experiment=experiment)
    return experiment, arms, analysis.series["step_accounting"]


def test_the_analysis_stores_the_accounting_without_failed_requests(stored):
    _, arms, accounting = stored
    rows = {row["arm_id"]: row for row in accounting["rows"]}
    arm, base = rows[arms[NGRAM].id], rows[arms[BASE].id]
    assert (arm["blocks"], arm["requests"], arm["steps"]) == (2, 3, 15)
    assert arm["step_ms"] == pytest.approx(18.0)
    assert arm["relative_cost"]["block_ratios"] == pytest.approx([1.35, 1.2])
    assert arm["margin"]["point"] == pytest.approx(math.sqrt(1.875 / 1.35 * 10 / 7 / 1.2))
    assert (base["steps"], base["relative_cost"]) == (25, None)
    assert accounting["sentences"] == [
        {"arm_id": arms[NGRAM].id, "text": steps.sentence("n-gram k=4", [_rows()[(NGRAM, 1)]])}
    ]


def test_the_page_shows_the_accounting(stored, logged_in_client):
    experiment, _, accounting = stored
    html = logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).content.decode()
    table = html[html.index('id="table-steps"') :]
    for row in accounting["rows"]:
        for value in (row["steps"], row["tokens_per_step"], row["step_ms"]):
            assert f'data-value="{value!r}"' in table
    arm = next(row for row in accounting["rows"] if row["margin"])
    cost, margin = arm["relative_cost"], arm["margin"]
    assert f'data-tsv="{cost["point"]!r}\t{cost["lo"]!r}\t{cost["hi"]!r}"' in table
    assert f'data-value="{margin["point"]!r}"' in table
    assert unescape(accounting["sentences"][0]["text"]) in unescape(html)
    assert "Relative cost</dt>" in html


def test_the_api_returns_the_same_numbers(stored, user):
    experiment, _, accounting = stored
    body = token_client(user).get(reverse("api:experiment-results", args=[experiment.pk])).json()
    assert body["series"]["step_accounting"] == accounting
