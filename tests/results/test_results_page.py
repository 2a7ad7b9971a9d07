"""The results on the experiment page (experiments/results/views.py and its templates): verdicts,
warnings, definitions, tables equal to the stored values, the charts' data and its query budget."""

import json
import statistics

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from experiments.analysis.services import experiment_analyse
from experiments.models import Experiment, ExperimentAnalysis, RequestRecord, Run, RunSummary, SpeedupEstimate
from experiments.results import block as results
from tests.factories import (
    SEEDED_BLOCKS,
    RunFactory,
    seed_calibration,
    seed_finished_experiment,
)
from tests.results.helpers import DOWNLOADS, html_tables, page_html, run_summary, two_arms

pytestmark = pytest.mark.django_db


def test_page_shows_verdicts_warnings_protocol_and_definitions(logged_in_client, finished):
    html = page_html(logged_in_client, finished)

    for verdict in finished.analysis.verdicts:
        assert verdict["text"] in html
    assert "Sampling at temperature 0.7" in html
    assert html.index('id="verdicts"') < html.index('id="protocol"') < html.index('id="results"')
    assert "0.32.0" in html
    assert "CPU only: AMD EPYC 7B13, 2 cores" in html
    # A CPU server uses no GPU: one "GPU per server" would misread the protocol.
    assert "<dd>1 (no tensor parallelism)</dd>" in html
    assert "GPU per server" not in html
    assert "--speculative-config" in html
    assert "/models/draft" in html
    for definition in (
        "request sent → first streamed chunk with content",
        "(E2E − TTFT) / (output tokens − 1)",
        "accepted_at_pos[i] / drafts",
        "accepted_at_pos[i] / accepted_at_pos[i − 1]",
        "so the raw gap between chunks is not a per-token latency",
        "1 + Σ<sub>i</sub> a<sub>0</sub>·a<sub>1</sub>·…·a<sub>i</sub>",
        "the draft model's step time / the baseline's step time at the same level",
        "Student's t-interval on the mean log block ratio",
        "the geometric mean of the block ratios",
        "vLLM's per-request accepted counts where they account for every step",
        "it equals τ for methods that draft on every step",
        "sum of the requests' E2E latencies / measured duration",
        "requests meeting every SLO set (TPOT ≤ 20 ms)",
    ):
        assert definition in html
    assert "Sampled at temperature 0.7: outputs are not expected to match, so fidelity is not compared." in html
    assert 'id="results-data"' in html
    assert "js/experiment_results.js" in html
    for name in DOWNLOADS:
        assert reverse(f"experiments:{name}", args=[finished.pk]) in html


def test_the_protocol_names_the_gpus_a_tensor_parallel_server_uses(logged_in_client, finished):
    Experiment.objects.filter(pk=finished.pk).update(tensor_parallel_size=4)

    assert "<dd>4 GPUs per server</dd>" in page_html(logged_in_client, finished)


def test_latency_and_throughput_tables_hold_the_stored_values(logged_in_client, finished):
    tables = html_tables(page_html(logged_in_client, finished))
    summaries = RunSummary.objects.filter(run__experiment=finished).select_related("run__arm")

    engine_columns = [column for column in results.LATENCY_COLUMNS if column.startswith("server_")]
    client_columns = [column for column in results.LATENCY_COLUMNS if column not in engine_columns]
    for table, columns in (("table-latency", client_columns), ("table-engine-latency", engine_columns)):
        assert len(tables[table]) == 1 + 3 * 2  # heading, 3 arms x 2 levels
        for row in tables[table][1:]:
            label, level, runs, *means = row
            cell = [s for s in summaries if s.run.arm.label == label and s.run.concurrency == int(level)]
            assert int(runs) == len(cell) == SEEDED_BLOCKS
            expected = [statistics.fmean(getattr(s, column) for s in cell) for column in columns]
            assert [float(m) for m in means] == pytest.approx(expected, rel=1e-12)
    assert len(engine_columns) == 3

    throughput = tables["table-throughput"]
    for label, level, _, output, requests, goodput, achieved, flag in throughput[1:]:
        cell = [s for s in summaries if s.run.arm.label == label and s.run.concurrency == int(level)]
        assert float(output) == pytest.approx(statistics.fmean(s.output_throughput for s in cell), rel=1e-12)
        assert float(requests) == pytest.approx(statistics.fmean(s.request_throughput for s in cell), rel=1e-12)
        assert float(goodput) == pytest.approx(statistics.fmean(s.goodput for s in cell), rel=1e-12)
        assert float(achieved) == pytest.approx(statistics.fmean(s.achieved_concurrency for s in cell), rel=1e-12)
        assert flag == ""


def test_the_stream_table_holds_each_runs_checks_and_flags_a_distorted_one(logged_in_client, finished):
    tables = html_tables(page_html(logged_in_client, finished))
    rows = tables["table-stream"][1:]
    assert len(rows) == 3 * 2 * SEEDED_BLOCKS  # arms x levels x blocks
    # The seeded streams kept pace with the engine: every request checked, none distorted.
    for _label, _level, _block, checked, distorted, late, stalled, bursts, span_p50, _span_p05, flag in rows:
        assert (checked, distorted, late, stalled, bursts, flag) == ("20", "0", "0", "0", "0", "")
        assert float(span_p50) == pytest.approx(1.0)

    baseline = finished.runs.get(arm__label="baseline", concurrency=4, repetition=2)
    RunSummary.objects.filter(run=baseline).update(stream_distorted=2)
    experiment_analyse(experiment=finished)
    html = page_html(logged_in_client, finished)
    flagged = [row for row in html_tables(html)["table-stream"][1:] if row[-1]]
    assert flagged == [["baseline", "4", "2", "20", "2", "0", "0", "0", *flagged[0][8:]]]
    assert "distorted: no client TPOT/TTFT verdict" in flagged[0][10]
    assert "did not reach the client as the engine made them" in html
    assert "more than 5% of its requests distorted" in html


def test_speedup_and_acceptance_tables_hold_the_stored_values(logged_in_client, finished):
    tables = html_tables(page_html(logged_in_client, finished))

    speedup = tables["table-speedup"]
    assert len(speedup) == 1 + 2 * 2  # heading, 2 speculative arms x 2 levels
    for label, level, blocks, server_tpot, tpot, e2e, throughput, failed in speedup[1:]:
        stored = {
            s.metric: s
            for s in SpeedupEstimate.objects.filter(experiment=finished, arm__label=label, concurrency=int(level))
        }
        shown = [float(server_tpot), float(tpot), float(e2e), float(throughput)]
        assert shown == [stored[metric].point for metric in ("server_tpot", "tpot", "e2e", "output_throughput")]
        assert int(blocks) == SEEDED_BLOCKS
        assert failed == "0"

    acceptance = tables["table-acceptance"]
    assert [row[:2] for row in acceptance[1:]] == [["n-gram k=4", str(i)] for i in range(4)] + [
        ["draft k=3", str(i)] for i in range(3)
    ]
    ngram = RunSummary.objects.filter(run__experiment=finished, run__arm__label="n-gram k=4")
    drafts = sum(s.spec_num_drafts for s in ngram)
    position_0 = sum(s.spec_accepted_per_pos[0] for s in ngram)
    assert acceptance[1][2:5] == [str(position_0), str(drafts), repr(position_0 / drafts)]

    # No calibration arm: E and the measurement are shown, c and the prediction are not.
    predicted = finished.analysis.series["predicted"]
    rows = tables["table-predicted"][1:]
    assert len(rows) == sum(len(series["points"]) for series in predicted.values())
    draft = next(row for row in rows if row[0] == "draft k=3")
    point = predicted[str(finished.arms.get(label="draft k=3").id)]["points"][0]
    assert float(draft[3]) == point["tokens_per_step"]
    assert (draft[4], draft[5], draft[6], draft[8]) == ("", point["cost_source"], "", "")
    assert draft[5].startswith("not measured: no calibration arm")
    assert float(draft[7]) == point["measured"]
    assert "table-calibration" not in tables


def test_the_page_shows_the_measured_draft_cost_and_the_prediction(logged_in_client):
    experiment = seed_calibration(seed_finished_experiment())
    calibration = experiment.arms.get(is_calibration=True)
    analysis = ExperimentAnalysis.objects.get(experiment=experiment)
    html = page_html(logged_in_client, experiment)
    tables = html_tables(html)

    draft_id = experiment.arms.get(label="draft k=3").id
    points = analysis.series["predicted"][str(draft_id)]["points"]
    rows = [row for row in tables["table-predicted"][1:] if row[0] == "draft k=3"]
    for row, point in zip(rows, points, strict=True):
        # c as stored; the prediction is E / (3c + 1) from the figures in the same row.
        assert float(row[4]) == point["cost_ratio"]
        assert row[5] == "measured at this level by the calibration arm"
        assert float(row[6]) == pytest.approx(float(row[3]) / (3 * float(row[4]) + 1), rel=1e-12)
        assert row[8] in ("agree", "part")
    calibration_rows = tables["table-calibration"][1:]
    assert [row[:2] for row in calibration_rows] == [[calibration.label, "1"], [calibration.label, "4"]]
    for row in calibration_rows:
        # c = draft step / baseline step, the two columns beside it.
        assert float(row[6]) == pytest.approx(float(row[4]) / float(row[5]), rel=1e-9)
    # The calibration arm is no arm of the comparison: not in the legend's tables or the verdicts.
    assert all(row[0] != calibration.label for row in tables["table-speedup"][1:])
    assert analysis.series["predicted"][str(draft_id)]["sentence"] in html.replace("&#x27;", "'")
    assert "with each draft model served alone to measure its cost" in html


def test_chart_data_carries_the_series_of_every_chart(logged_in_client, finished):
    html = page_html(logged_in_client, finished)
    start = html.index('<script id="results-data" type="application/json">') + len(
        '<script id="results-data" type="application/json">'
    )
    data = json.loads(html[start : html.index("</script>", start)])

    assert [arm["label"] for arm in data["arms"]] == ["baseline", "n-gram k=4", "draft k=3"]
    assert data["levels"] == [1, 4]
    assert len(data["cells"]) == 6
    assert data["has_slos"]
    assert {s["metric"] for s in data["speedups"]} == {"server_tpot", "tpot", "e2e", "output_throughput"}
    assert len(data["break_even"]) == 2 * 4  # speculative arms x verdict metrics
    stored = ExperimentAnalysis.objects.get(experiment=finished).series
    for key in ("tpot_cdf", "acceptance_length_cdf", "along_output", "predicted"):
        assert data[key] == stored[key]


def test_the_page_reads_a_fixed_number_of_queries_and_never_the_requests(logged_in_client):
    def queries(experiment):
        with CaptureQueriesContext(connection) as captured:
            page_html(logged_in_client, experiment)
        return [query["sql"] for query in captured]

    small = queries(seed_finished_experiment(requests=3, repetitions=1))
    large = queries(seed_finished_experiment(requests=12, repetitions=3))

    assert len(large) == len(small) > 5, (len(small), len(large))
    assert not any(RequestRecord._meta.db_table in sql for sql in large)


def test_a_running_experiment_shows_its_summaries_without_the_analysis(logged_in_client):
    experiment, baseline, arm = two_arms(status=Experiment.Status.RUNNING)
    run_summary(baseline, 1, 1, tpot_p50_ms=20.0)
    RunFactory(arm=arm, concurrency=1, status=Run.Status.RUNNING)

    html = page_html(logged_in_client, experiment)

    assert "once the experiment has finished" in html
    assert 'id="table-latency"' in html
    assert 'id="chart-tpot"' in html
    assert 'id="verdicts"' not in html
    assert 'id="chart-speedup"' not in html


def test_no_results_block_before_any_run_succeeded(logged_in_client):
    experiment, baseline, _ = two_arms(status=Experiment.Status.QUEUED)
    RunFactory(arm=baseline)

    html = page_html(logged_in_client, experiment)

    assert 'id="results"' not in html
    assert "chart.umd.min.js" not in html


def test_greedy_page_shows_the_verdict_grid_and_output_fidelity(logged_in_client):
    experiment = seed_finished_experiment(temperature=0.0)
    html = page_html(logged_in_client, experiment)
    tables = html_tables(html)
    # The draft arm's output differs from the baseline's for prompt 0 in every block.
    fidelity = {(row[0], row[1]): row for row in tables["table-fidelity"][1:]}
    _, _, compared, identical, share, prompts, differing, divergence, p, _ = fidelity[("draft k=3", "1")]
    assert (int(compared), int(identical)) == (SEEDED_BLOCKS * 20, SEEDED_BLOCKS * 19)
    assert float(share) == pytest.approx(19 / 20)
    assert (int(prompts), int(differing)) == (20, 1)  # the test's unit: prompt 0 differs, whatever the blocks
    assert float(divergence) == 5.0
    assert p == ""  # no replicate to compare with
    assert fidelity[("n-gram k=4", "4")][3] == str(SEEDED_BLOCKS * 20)
    # The grid: one table per verdict metric, arms as rows and the levels as columns.
    assert [row[0] for row in tables["grid-tpot"]] == ["Arm · concurrency →", "n-gram k=4", "draft k=3"]
    stored = SpeedupEstimate.objects.get(experiment=experiment, arm__label="n-gram k=4", concurrency=1, metric="tpot")
    assert f'data-outcome="{stored.outcome}"' in html
    assert 'id="grid-e2e"' in html
    assert 'id="grid-output_throughput"' in html


def test_the_per_request_tpot_speedup_is_shown_where_it_differs_from_the_pooled_one(logged_in_client, finished):
    # Outputs of equal length: the two TPOT speedups agree, and only their definitions are shown.
    html = page_html(logged_in_client, finished)
    assert "total decode time / total decode tokens" in html
    assert 'id="table-tpot-estimands"' not in html
    # The baseline's first five prompts become long (256 decode tokens) and three times slower a
    # token: pooled per token they weigh far more than one request each.
    long_prompts = RequestRecord.objects.filter(
        run__experiment=finished, run__arm__label="baseline", prompt_index__lt=5
    )
    long_prompts.update(output_tokens=257, tpot_ms=F("tpot_ms") * 3, server_tpot_ms=F("server_tpot_ms") * 3)
    estimands = experiment_analyse(experiment=finished).series["tpot_estimands"]
    differing = [row for row in estimands["cells"] if row["differs"]]
    assert estimands["differing"] == len(differing) > 0
    rows = html_tables(page_html(logged_in_client, finished))["table-tpot-estimands"][1:]
    assert [row[:3] for row in rows] == [[r["arm"], str(r["level"]), r["metric_name"]] for r in differing]
    for row, stored in zip(rows, differing, strict=True):
        assert [float(row[3]), float(row[4])] == [stored["pooled"]["point"], stored["per_request"]["point"]]
