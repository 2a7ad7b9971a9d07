"""The results on the experiment page: the selectors' aggregates against hand-made cases,
what the page shows (verdicts, warnings, definitions, tables equal to the stored values),
its query budget, and the downloads."""

import csv
import io
import json
import statistics
from html.parser import HTMLParser

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from experiments.analysis.services import experiment_analyse
from experiments.models import Arm, Experiment, ExperimentAnalysis, RequestRecord, Run, RunSummary, SpeedupEstimate
from experiments.results import block as results
from experiments.results import block_selectors, selectors
from tests.factories import (
    SEEDED_BLOCKS,
    ArmFactory,
    EnvironmentSnapshotFactory,
    ExperimentFactory,
    RequestRecordFactory,
    RunFactory,
    RunSummaryFactory,
    seed_calibration,
    seed_finished_experiment,
    seeded_output,
)

pytestmark = pytest.mark.django_db

DOWNLOADS = ["summaries_csv", "summaries_json", "requests_csv", "requests_json"]


def _two_arms(**fields) -> tuple[Experiment, object, object]:
    experiment = ExperimentFactory(concurrency_levels=[1, 4], repetitions=2, **fields)
    baseline = ArmFactory(experiment=experiment, baseline=True, position=0)
    arm = ArmFactory(experiment=experiment, position=1, label="n-gram k=4")
    return experiment, baseline, arm


def _summary(arm, level, repetition, status=Run.Status.SUCCEEDED, **fields) -> RunSummary:
    run = RunFactory(arm=arm, concurrency=level, repetition=repetition, status=status)
    return RunSummaryFactory(run=run, **fields)


def _cells(experiment):
    arms = block_selectors.arm_styles(experiment=experiment)
    return {(c.arm.label, c.level): c for c in block_selectors.summary_cells(experiment=experiment, arms=arms)}


class _Tables(HTMLParser):
    """The rows of every <table id=…> as lists of each cell's data-value (or its text)."""

    def __init__(self):
        super().__init__()
        self.tables, self._table, self._cell = {}, None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and attrs.get("id"):
            self._table = self.tables.setdefault(attrs["id"], [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = [attrs.get("data-value"), ""]

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            value, text = self._cell
            self._table[-1].append(value if value is not None else text.strip())
            self._cell = None
        elif tag == "table":
            self._table = None


def _tables(html: str) -> dict[str, list[list[str]]]:
    parser = _Tables()
    parser.feed(html)
    return parser.tables


def _page(client, experiment):
    response = client.get(reverse("experiments:detail", args=[experiment.pk]))
    assert response.status_code == 200
    return response.text


def _download(client, experiment, name):
    response = client.get(reverse(f"experiments:{name}", args=[experiment.pk]))
    assert response.status_code == 200
    return response, b"".join(response.streaming_content).decode()


# ---------------------------------------------------------------- selectors


def test_summary_cells_average_the_repetitions_with_their_range():
    experiment, baseline, arm = _two_arms()
    _summary(arm, 1, 1, tpot_p50_ms=10.0, output_throughput=100.0, spec_num_drafts=10, spec_num_accepted_tokens=15)
    _summary(arm, 1, 2, tpot_p50_ms=14.0, output_throughput=120.0, spec_num_drafts=30, spec_num_accepted_tokens=25)
    _summary(arm, 1, 3, status=Run.Status.FAILED, tpot_p50_ms=1000.0)  # a failed run does not count
    _summary(baseline, 4, 1, tpot_p50_ms=20.0, goodput=None)

    cells = _cells(experiment)

    cell = cells[("n-gram k=4", 1)]
    assert cell.runs == 2
    assert cell.spread["tpot_p50_ms"] == results.Spread(12.0, 10.0, 14.0)
    assert cell.spread["output_throughput"] == results.Spread(110.0, 100.0, 120.0)
    assert (cell.drafts, cell.accepted, cell.acceptance_length) == (40, 40, 2.0)
    assert cells[("baseline", 4)].spread["goodput"] == results.Spread(None, None, None)
    assert list(cells) == [("baseline", 4), ("n-gram k=4", 1)]  # arm position, then level


def test_acceptance_by_position_pools_the_counters_over_runs():
    experiment, baseline, arm = _two_arms()
    _summary(arm, 1, 1, spec_num_drafts=10, spec_accepted_per_pos=[5, 3, 1])
    _summary(arm, 4, 1, spec_num_drafts=6, spec_accepted_per_pos=[3, 1, 0])
    _summary(baseline, 1, 1, spec_num_drafts=None, spec_accepted_per_pos=[])

    [pooled] = block_selectors.acceptance_by_position(
        experiment=experiment, arms=block_selectors.arm_styles(experiment=experiment)
    )

    assert (pooled.arm.label, pooled.drafts, pooled.accepted) == ("n-gram k=4", 16, [8, 4, 1])
    assert pooled.unconditional == [0.5, 0.25, 0.0625]
    assert pooled.conditional == [0.5, 0.5, 0.25]


def test_no_results_before_a_run_succeeded():
    experiment, baseline, _ = _two_arms(status=Experiment.Status.RUNNING)
    RunFactory(arm=baseline, status=Run.Status.RUNNING)

    assert block_selectors.results_for_experiment(experiment=experiment) is None


def test_arms_keep_their_colour_and_the_baseline_is_grey():
    experiment, _, _ = _two_arms()
    ArmFactory(experiment=experiment, position=2, label="draft k=3", method="draft_model", params={"model": "/m"})

    colours = [(arm.label, arm.colour) for arm in block_selectors.arm_styles(experiment=experiment)]

    assert colours == [
        ("baseline", results.BASELINE_COLOUR), ("n-gram k=4", results.ARM_COLOURS[0]),
        ("draft k=3", results.ARM_COLOURS[1]),
    ]  # fmt: skip


def test_warnings_come_from_the_settings_until_the_analysis_holds_them_all():
    experiment = seed_finished_experiment(
        workload_kind=Experiment.WorkloadKind.SYNTHETIC, prompt_set="", synthetic_input_len=64, temperature=0.5,
        ignore_eos=True,
    )  # fmt: skip
    before = selectors.experiment_warnings(experiment=experiment)
    after = selectors.experiment_warnings(experiment=experiment, analysis=experiment.analysis)

    assert len(before) == 3
    assert after == experiment.analysis.warnings
    assert after[:3] == before
    assert sum("ynthetic" in w for w in after) == 1
    assert sum("ignore_eos" in w for w in after) == 1
    assert "temperature 0.5" in before[-1]


# ---------------------------------------------------------------- the page


@pytest.fixture
def finished(db):
    return seed_finished_experiment(slo_tpot_ms=20.0, temperature=0.7)


def test_page_shows_verdicts_warnings_protocol_and_definitions(logged_in_client, finished):
    html = _page(logged_in_client, finished)

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

    assert "<dd>4 GPUs per server</dd>" in _page(logged_in_client, finished)


def test_latency_and_throughput_tables_hold_the_stored_values(logged_in_client, finished):
    tables = _tables(_page(logged_in_client, finished))
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
    tables = _tables(_page(logged_in_client, finished))
    rows = tables["table-stream"][1:]
    assert len(rows) == 3 * 2 * SEEDED_BLOCKS  # arms x levels x blocks
    # The seeded streams kept pace with the engine: every request checked, none distorted.
    for _label, _level, _block, checked, distorted, late, stalled, bursts, span_p50, _span_p05, flag in rows:
        assert (checked, distorted, late, stalled, bursts, flag) == ("20", "0", "0", "0", "0", "")
        assert float(span_p50) == pytest.approx(1.0)

    baseline = finished.runs.get(arm__label="baseline", concurrency=4, repetition=2)
    RunSummary.objects.filter(run=baseline).update(stream_distorted=2)
    experiment_analyse(experiment=finished)
    html = _page(logged_in_client, finished)
    flagged = [row for row in _tables(html)["table-stream"][1:] if row[-1]]
    assert flagged == [["baseline", "4", "2", "20", "2", "0", "0", "0", *flagged[0][8:]]]
    assert "distorted: no client TPOT/TTFT verdict" in flagged[0][10]
    assert "did not reach the client as the engine made them" in html
    assert "more than 5% of its requests distorted" in html


def test_speedup_and_acceptance_tables_hold_the_stored_values(logged_in_client, finished):
    tables = _tables(_page(logged_in_client, finished))

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
    html = _page(logged_in_client, experiment)
    tables = _tables(html)

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
    html = _page(logged_in_client, finished)
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
            _page(logged_in_client, experiment)
        return [query["sql"] for query in captured]

    small = queries(seed_finished_experiment(requests=3, repetitions=1))
    large = queries(seed_finished_experiment(requests=12, repetitions=3))

    assert len(large) == len(small) > 5, (len(small), len(large))
    assert not any(RequestRecord._meta.db_table in sql for sql in large)


def test_a_running_experiment_shows_its_summaries_without_the_analysis(logged_in_client):
    experiment, baseline, arm = _two_arms(status=Experiment.Status.RUNNING)
    _summary(baseline, 1, 1, tpot_p50_ms=20.0)
    RunFactory(arm=arm, concurrency=1, status=Run.Status.RUNNING)

    html = _page(logged_in_client, experiment)

    assert "once the experiment has finished" in html
    assert 'id="table-latency"' in html
    assert 'id="chart-tpot"' in html
    assert 'id="verdicts"' not in html
    assert 'id="chart-speedup"' not in html


def test_no_results_block_before_any_run_succeeded(logged_in_client):
    experiment, baseline, _ = _two_arms(status=Experiment.Status.QUEUED)
    RunFactory(arm=baseline)

    html = _page(logged_in_client, experiment)

    assert 'id="results"' not in html
    assert "chart.umd.min.js" not in html


# ---------------------------------------------------------------- downloads


@pytest.mark.parametrize("name", DOWNLOADS)
def test_downloads_need_a_login(client, name):
    url = reverse(f"experiments:{name}", args=[1])

    response = client.get(url)

    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))


def test_summaries_csv_has_one_row_per_run_with_every_summary_column(logged_in_client, finished):
    response, body = _download(logged_in_client, finished, "summaries_csv")

    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="experiment-{finished.pk}-summaries.csv"'
    rows = list(csv.DictReader(io.StringIO(body)))
    summary_columns = [f.name for f in RunSummary._meta.concrete_fields if f.name not in ("id", "run")]
    columns = ["run_id", "arm", "method", "concurrency", "repetition", "synthetic_acceptance_length", "run_status"]
    assert list(rows[0]) == [*columns, *summary_columns]
    assert len(rows) == RunSummary.objects.filter(run__experiment=finished).count() == 3 * 2 * SEEDED_BLOCKS
    first = RunSummary.objects.select_related("run__arm").get(run_id=rows[0]["run_id"])
    assert (rows[0]["arm"], rows[0]["concurrency"], rows[0]["repetition"]) == ("baseline", "1", "1")
    assert float(rows[0]["tpot_p50_ms"]) == first.tpot_p50_ms
    assert rows[0]["spec_accepted_per_pos"] == "[]"  # the baseline has none
    draft = next(row for row in rows if row["arm"] == "draft k=3")
    stored = RunSummary.objects.get(run_id=draft["run_id"])
    assert json.loads(draft["spec_accepted_per_pos"]) == stored.spec_accepted_per_pos


def test_summaries_json_matches_the_csv(logged_in_client, finished):
    _, csv_body = _download(logged_in_client, finished, "summaries_csv")
    response, body = _download(logged_in_client, finished, "summaries_json")

    assert response["Content-Type"] == "application/json"
    rows = json.loads(body)
    csv_rows = list(csv.DictReader(io.StringIO(csv_body)))
    assert [row["run_id"] for row in rows] == [int(row["run_id"]) for row in csv_rows]
    assert list(rows[0]) == list(csv_rows[0])
    assert rows[0]["goodput"] == RunSummary.objects.get(run_id=rows[0]["run_id"]).goodput


def test_requests_csv_streams_every_request_with_its_cell(logged_in_client, finished):
    response, body = _download(logged_in_client, finished, "requests_csv")

    assert response.streaming
    assert response["Content-Disposition"] == f'attachment; filename="experiment-{finished.pk}-requests.csv"'
    rows = list(csv.DictReader(io.StringIO(body)))
    assert len(rows) == RequestRecord.objects.filter(run__experiment=finished).count() == 3 * 2 * SEEDED_BLOCKS * 20
    columns = ["run_id", "arm", "method", "concurrency", "repetition", "synthetic_acceptance_length", "prompt_index"]
    assert list(rows[0])[:7] == columns
    record = RequestRecord.objects.get(run_id=rows[-1]["run_id"], prompt_index=rows[-1]["prompt_index"])
    assert rows[-1]["arm"] == "draft k=3"
    assert float(rows[-1]["tpot_ms"]) == record.tpot_ms
    assert json.loads(rows[-1]["spec_accepted_per_step"]) == record.spec_accepted_per_step
    assert json.loads(rows[-1]["chunk_times_ms"]) == record.chunk_times_ms


def test_requests_json_streams_the_same_rows(logged_in_client, finished):
    response, body = _download(logged_in_client, finished, "requests_json")

    assert response.streaming
    assert response["Content-Type"] == "application/json"
    rows = json.loads(body)
    assert len(rows) == 3 * 2 * SEEDED_BLOCKS * 20
    assert {row["arm"] for row in rows} == {"baseline", "n-gram k=4", "draft k=3"}
    assert rows[0]["spec_accepted_per_step"] is None
    assert rows[-1]["spec_proposed_per_step"][0] == 3
    # Output token ids are stored packed and downloaded as lists of ids.
    first = rows[0]
    assert first["output_token_ids"] == seeded_output(Arm(method="baseline"), first["prompt_index"], 32)


def test_downloads_of_an_experiment_without_rows_are_empty_but_well_formed(logged_in_client):
    experiment, _, _ = _two_arms()

    assert json.loads(_download(logged_in_client, experiment, "requests_json")[1]) == []
    assert _download(logged_in_client, experiment, "summaries_csv")[1].startswith("run_id,arm,method,")


def test_downloads_of_a_missing_experiment_are_404(logged_in_client):
    RequestRecordFactory()

    assert logged_in_client.get(reverse("experiments:requests_csv", args=[999])).status_code == 404


def test_greedy_page_shows_the_verdict_grid_and_output_fidelity(logged_in_client):
    experiment = seed_finished_experiment(temperature=0.0)
    html = _page(logged_in_client, experiment)
    tables = _tables(html)
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


@pytest.mark.parametrize("name", DOWNLOADS)
def test_downloads_hold_only_their_own_experiments_rows(logged_in_client, name):
    mine = seed_finished_experiment(requests=4, seed=1)
    other = seed_finished_experiment(requests=5, seed=2)
    _, body = _download(logged_in_client, mine, name)
    if name.endswith("json"):
        run_ids = {row["run_id"] for row in json.loads(body)}
    else:
        run_ids = {int(row["run_id"]) for row in csv.DictReader(io.StringIO(body))}
    assert run_ids == set(mine.runs.values_list("id", flat=True))
    assert not run_ids & set(other.runs.values_list("id", flat=True))


def test_protocol_shows_one_server_command_per_arm_whatever_port_each_server_took():
    experiment, baseline, arm = _two_arms()
    replicate = ArmFactory(experiment=experiment, baseline=True, position=2, label="replicate", is_replicate=True)
    command = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m", "--port"]
    for block, port in ((1, "8100"), (2, "8231")):
        for each in (baseline, arm, replicate):
            run = RunFactory(arm=each, repetition=block, status=Run.Status.SUCCEEDED)
            EnvironmentSnapshotFactory(run=run, server_command=[*command, port, "--seed", "0"])

    rows = {row.arm.label: row for row in selectors.experiment_arms(experiment=experiment)}

    assert rows["baseline"].server_commands == [
        "python -m vllm.entrypoints.openai.api_server --model /m --port '<port>' --seed 0"
    ]
    assert rows["replicate"].speculative_config_json == ""  # plain decoding, like the baseline
    assert rows["n-gram k=4"].speculative_config_json.startswith('{"method": "ngram"')


def test_the_per_request_tpot_speedup_is_shown_where_it_differs_from_the_pooled_one(logged_in_client, finished):
    # Outputs of equal length: the two TPOT speedups agree, and only their definitions are shown.
    html = _page(logged_in_client, finished)
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
    rows = _tables(_page(logged_in_client, finished))["table-tpot-estimands"][1:]
    assert [row[:3] for row in rows] == [[r["arm"], str(r["level"]), r["metric_name"]] for r in differing]
    for row, stored in zip(rows, differing, strict=True):
        assert [float(row[3]), float(row[4])] == [stored["pooled"]["point"], stored["per_request"]["point"]]
