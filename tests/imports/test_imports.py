"""Import of `vllm bench serve --save-result` files: real files made by vLLM's benchmark client
against the demo target on CPU (scripts/make_bench_fixtures.py), and every kind of bad file."""

import json
from html import unescape
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.urls import reverse

from experiments.imports import bench_files
from experiments.imports.bench_files import BenchFileRefused, bench_file_read, bench_files_read
from experiments.imports.services import arms_from_files
from experiments.models import Arm, Experiment, ExperimentAnalysis, RequestRecord, RunSummary, SpeedupEstimate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_bench"
FILES = sorted(FIXTURES.glob("*.json"))


def _real(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def _bytes(content) -> bytes:
    return json.dumps(content).encode()


def _uploads(pairs) -> list[SimpleUploadedFile]:
    return [SimpleUploadedFile(name, data, content_type="application/json") for name, data in pairs]


def _post(client, pairs, name="bench import", methods=""):
    return client.post(reverse("experiments:import"), {"name": name, "files": _uploads(pairs), "methods": methods})


def _real_pairs() -> list[tuple[str, bytes]]:
    return [(path.name, path.read_bytes()) for path in FILES]


# ---------------------------------------------------------------- real files


def test_the_fixtures_are_real_vllm_bench_serve_files():
    names = [path.name for path in FILES]
    assert names == ["baseline-c1.json", "baseline-c2.json", "ngram-k3-c1.json", "ngram-k3-c2.json"]
    detailed = _real("ngram-k3-c1.json")
    assert detailed["backend"] == "openai"
    assert len(detailed["ttfts"]) == detailed["completed"] + detailed.get("failed", 0)
    assert "ttfts" not in _real("ngram-k3-c2.json")
    assert "spec_decode_acceptance_rate" not in _real("baseline-c1.json")


def test_a_real_file_is_read_with_its_figures():
    read = bench_file_read("ngram-k3-c1.json", (FIXTURES / "ngram-k3-c1.json").read_bytes())
    raw = _real("ngram-k3-c1.json")

    assert (read.level, read.label, read.k) == (1, "ngram k=3", 3)
    assert read.values["median_tpot_ms"] == raw["median_tpot_ms"]
    assert len(read.requests) == raw["completed"]
    assert read.requests[0].ttft_ms == pytest.approx(raw["ttfts"][0] * 1000)
    drafts = raw["spec_decode_num_drafts"]
    assert read.accepted_per_position == [round(r * drafts) for r in raw["spec_decode_per_position_acceptance_rates"]]


def test_files_are_grouped_into_arms_by_label_and_config():
    arms = arms_from_files(bench_files_read(_real_pairs()))

    assert [(arm.label, arm.method, arm.k) for arm in arms] == [
        ("baseline", Arm.Method.BASELINE, None),
        ("ngram k=3", Arm.Method.NGRAM, 3),
    ]
    assert arms[1].params == {"prompt_lookup_min": 2, "prompt_lookup_max": 3}
    assert sorted(file.level for file in arms[1].files) == [1, 2]


@pytest.mark.django_db
def test_importing_the_files_makes_a_read_only_experiment_with_their_numbers(logged_in_client, user):
    response = _post(logged_in_client, _real_pairs())

    experiment = Experiment.objects.get()
    assert response.status_code == 302
    assert response.url == reverse("experiments:detail", args=[experiment.pk])
    assert (experiment.status, experiment.source, experiment.owner) == ("finished", "imported", user)
    assert experiment.concurrency_levels == [1, 2]
    assert experiment.runs.count() == 4
    summary = RunSummary.objects.get(run__arm__label="ngram k=3", run__concurrency=2)
    raw = _real("ngram-k3-c2.json")
    assert summary.output_throughput == raw["output_throughput"]
    assert summary.tpot_p50_ms == raw["median_tpot_ms"]
    assert summary.tpot_p90_ms == raw["p90_tpot_ms"]
    assert summary.e2e_p99_ms == raw["p99_e2el_ms"]
    assert summary.spec_num_drafts == raw["spec_decode_num_drafts"]
    detailed = RequestRecord.objects.filter(run__concurrency=1)
    assert detailed.count() == _real("baseline-c1.json")["completed"] + _real("ngram-k3-c1.json")["completed"]
    assert not RequestRecord.objects.filter(run__concurrency=2).exists()
    throughput = SpeedupEstimate.objects.get(metric="output_throughput", concurrency=2)
    assert throughput.point == pytest.approx(raw["output_throughput"] / _real("baseline-c2.json")["output_throughput"])
    assert throughput.outcome == "too few blocks"


@pytest.mark.django_db
def test_the_page_says_what_an_import_lacks_and_offers_no_rerun(logged_in_client):
    _post(logged_in_client, _real_pairs())
    experiment = Experiment.objects.get()

    html = logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).content.decode()

    assert 'id="imported"' in html
    assert "No per-request acceptance" in html
    assert "No output fidelity" in html
    assert "ngram-k3-c2.json" in html
    assert reverse("experiments:rerun", args=[experiment.pk]) not in html
    assert reverse("experiments:clone", args=[experiment.pk]) not in html


@pytest.mark.django_db
def test_the_command_imports_a_directory(user, capsys):
    call_command("import_bench", str(FIXTURES), owner="alice", name="from a directory")

    experiment = Experiment.objects.get(name="from a directory")
    assert len(experiment.imported_files) == 4
    assert f"imported 4 files as experiment {experiment.pk}" in capsys.readouterr().out


# ---------------------------------------------------------------- bad files: named, nothing stored

GOOD = "baseline-c1.json"


def _bad_cases():
    real = (FIXTURES / GOOD).read_bytes() if (FIXTURES / GOOD).exists() else b"{}"
    content = json.loads(real)
    return [
        ("malformed", b'{"duration": 1,, }', "malformed: not valid JSON at line 1, column 16"),
        ("truncated", real[: len(real) // 2], "(the file ends early: truncated?)"),
        (
            "typed",
            _bytes(content | {"completed": "8"}),
            'typed: “completed” must be a whole number from 0 to 2,147,483,647, not "8".',
        ),
        (
            "negative",
            _bytes(content | {"total_output_tokens": -3}),
            "“total_output_tokens” must be a whole number from 0",
        ),
        ("boolean", _bytes(content | {"duration": True}), "“duration” must be a finite number, not true."),
        ("nan", real.replace(b'"duration": ', b'"duration": NaN, "x": '), "NaN is not a number JSON allows"),
        ("huge", b'{"completed": ' + b"9" * 5000 + b"}", "huge: not valid JSON: Exceeds the limit (4300 digits)"),
        ("latin1", '{"label": "café"}'.encode("latin-1"), "latin1: not UTF-8 text (byte 0xe9 at 14)."),
        ("list", b"[1, 2]", "list: a result file is a JSON object, not a list."),
        ("nul", _bytes(content | {"label": "a\x00b"}), "nul: a NUL character (\\u0000) in a text, which cannot be"),
        ("nul-key", _bytes(content | {"extra": [{"k\x00": 1}]}), "nul-key: a NUL character"),
        ("other", b'{"hello": "world"}', "other: not a vllm bench serve result (missing duration, completed,"),
        ("unbounded", _bytes(content | {"max_concurrency": None}), "unbounded: no max_concurrency."),
        ("ragged", _bytes(content | {"ttfts": [0.1]}), "ragged: the per-request lists differ in length"),
    ]


@pytest.mark.parametrize(("name", "data", "message"), _bad_cases(), ids=[case[0] for case in _bad_cases()])
def test_a_bad_file_is_refused_by_name(name, data, message):
    with pytest.raises(BenchFileRefused) as refused:
        bench_file_read(f"{name}", data)

    assert message in str(refused.value)


@pytest.mark.django_db
def test_a_bad_file_among_good_ones_stores_nothing_and_the_page_names_it(logged_in_client):
    pairs = [*_real_pairs(), ("broken.json", (FIXTURES / GOOD).read_bytes()[:100])]

    response = _post(logged_in_client, pairs)

    assert response.status_code == 400
    assert "broken.json: not valid JSON" in response.content.decode()
    assert not Experiment.objects.exists()
    assert not RunSummary.objects.exists()


@pytest.mark.django_db
def test_an_oversized_file_is_refused_before_it_is_read(logged_in_client, monkeypatch):
    monkeypatch.setattr(bench_files, "MAX_FILE_BYTES", 100)

    response = _post(logged_in_client, [(GOOD, (FIXTURES / GOOD).read_bytes())])

    assert response.status_code == 400
    assert f"{GOOD}: " in response.content.decode()
    assert "more than the 100 a result file may have" in response.content.decode()
    assert not Experiment.objects.exists()


def test_too_many_files_are_refused():
    with pytest.raises(BenchFileRefused, match="at most 64 can be imported at once"):
        bench_files_read([("f.json", b"{}")] * (bench_files.MAX_FILES + 1))


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (["ngram-k3-c1.json"], "Exactly one arm must run without speculation"),
        (["baseline-c1.json", "ngram-k3-c1.json:unlabelled"], "which speculative method is “speculative k=3”?"),
        (["baseline-c1.json", "ngram-k3-c1.json:other-model"], "The files come from different models"),
    ],
)
def test_files_that_cannot_make_arms_are_refused(files, message):
    read = []
    for entry in files:
        name, _, change = entry.partition(":")
        content = _real(name)
        if change == "unlabelled":
            content = {key: value for key, value in content.items() if key not in ("label", "speculative_config")}
        if change == "other-model":
            content["model_id"] = "another/model"
        read.append(bench_file_read(name, _bytes(content)))

    with pytest.raises(BenchFileRefused, match=message.replace("?", r"\?")):
        arms_from_files(read)


@pytest.mark.django_db
def test_the_command_refuses_a_bad_directory_and_stores_nothing(user, tmp_path):
    (tmp_path / "bad.json").write_bytes(b"\xff")

    with pytest.raises(CommandError, match=r"bad.json: not UTF-8 text"):
        call_command("import_bench", str(tmp_path), owner="alice", name="bad")

    assert not Experiment.objects.exists()


# ---------------------------------------------------------------- protocols: files compared must share one

# What vLLM writes only with --save-detailed (it keeps "latencies" and "queue_times" without).
DETAILED_ONLY = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors", "start_times")


def _file(real: str, name: str, **changes) -> tuple[str, bytes]:
    """A real file without its per-request rows, with `changes`."""
    content = {key: value for key, value in _real(real).items() if key not in DETAILED_ONLY}
    return name, _bytes(content | changes)


def _run(prompts: int, output_per_request: int, **changes) -> dict:
    """The figures of a run of `prompts` prompts of 46.5 input tokens and `output_per_request` output tokens."""
    return {
        "num_prompts": prompts, "completed": prompts, "failed": 0, "total_input_tokens": int(prompts * 46.5),
        "total_output_tokens": prompts * output_per_request, **changes,
    }  # fmt: skip


def _refused(response, *messages):
    text = unescape(response.content.decode())
    assert response.status_code == 400, text[:2000]
    for message in messages:
        assert message in text
    assert not Experiment.objects.exists()
    assert not RunSummary.objects.exists()


@pytest.mark.django_db
def test_two_files_of_one_cell_with_different_protocols_are_refused_with_the_difference(logged_in_client):
    """The tester's case: two n-gram files at concurrency 4, 16 prompts of 64 tokens and 32 of 128."""
    pairs = [
        _file("baseline-c2.json", "base-c4.json", max_concurrency=4, **_run(16, 64)),
        _file("ngram-k3-c2.json", "ngram-c4-a.json", max_concurrency=4, date="20261201-100000", **_run(16, 64)),
        _file("ngram-k3-c2.json", "ngram-c4-b.json", max_concurrency=4, date="20261201-110000", **_run(32, 128)),
    ]

    response = _post(logged_in_client, pairs)

    _refused(
        response,
        "ngram-c4-a.json and ngram-c4-b.json, both “ngram k=3” at concurrency 4, differ in protocol: "
        "num_prompts 16 and 32; output tokens a request (mean) 64.0 and 128.0.",
    )


@pytest.mark.django_db
def test_the_command_refuses_a_cell_of_two_protocols(user, tmp_path):
    for name, data in [
        _file("baseline-c2.json", "base.json", **_run(8, 24)),
        _file("ngram-k3-c2.json", "ngram-a.json", date="20261201-100000", **_run(8, 24)),
        _file("ngram-k3-c2.json", "ngram-b.json", date="20261201-110000", **_run(8, 24, total_input_tokens=8 * 200)),
    ]:
        (tmp_path / name).write_bytes(data)

    message = r"ngram-a.json and ngram-b.json.*input tokens a request \(mean\) 46.5 and 200.0"
    with pytest.raises(CommandError, match=message):
        call_command("import_bench", str(tmp_path), owner="alice", name="two protocols")

    assert not Experiment.objects.exists()


@pytest.mark.django_db
def test_an_arm_measured_otherwise_than_the_baseline_at_a_level_is_refused(logged_in_client):
    pairs = [
        _file("baseline-c2.json", "base-c4.json", max_concurrency=4, **_run(16, 64)),
        _file("ngram-k3-c2.json", "ngram-c4.json", max_concurrency=4, **_run(32, 64)),
    ]

    response = _post(logged_in_client, pairs)

    _refused(
        response,
        "ngram-c4.json (“ngram k=3” at concurrency 4) was not measured as the baseline's base-c4.json was: "
        "num_prompts 32, the baseline's 16.",
    )


@pytest.mark.django_db
def test_files_at_different_request_rates_are_refused(logged_in_client):
    pairs = [
        _file("baseline-c1.json", "base-c1.json"),
        _file("ngram-k3-c1.json", "ngram-c1.json"),
        _file("baseline-c2.json", "base-c2.json", request_rate=2.0),
        _file("ngram-k3-c2.json", "ngram-c2.json", request_rate=2.0),
    ]

    response = _post(logged_in_client, pairs)

    _refused(
        response,
        "different request rates (2.0: base-c2.json, ngram-c2.json; inf: base-c1.json, ngram-c1.json)",
        "An experiment has one request rate",
    )


@pytest.mark.django_db
def test_a_request_rate_the_files_share_is_the_experiments(logged_in_client):
    pairs = [_file(name, name, request_rate=4) for name in ("baseline-c1.json", "ngram-k3-c1.json")]

    assert _post(logged_in_client, pairs).status_code == 302

    experiment = Experiment.objects.get()
    assert experiment.request_rate == 4.0
    assert SpeedupEstimate.objects.get(metric="output_throughput").outcome == "not applicable"


@pytest.mark.django_db
def test_outputs_that_differ_by_less_than_the_tolerance_are_one_protocol(logged_in_client):
    # 24 against 22 tokens a request: 8% apart, as outputs ending at EOS differ between runs.
    pairs = [
        _file("baseline-c1.json", "base.json", **_run(8, 24)),
        _file("ngram-k3-c1.json", "ngram.json", **_run(8, 22)),
    ]

    assert _post(logged_in_client, pairs).status_code == 302


@pytest.mark.django_db
def test_levels_of_different_protocols_are_imported_and_each_level_shown(logged_in_client):
    pairs = [
        _file("baseline-c1.json", "base-c1.json", **_run(8, 24)),
        _file("ngram-k3-c1.json", "ngram-c1.json", **_run(8, 24)),
        _file("baseline-c2.json", "base-c2.json", **_run(16, 64)),
        _file("ngram-k3-c2.json", "ngram-c2.json", **_run(16, 64)),
    ]

    assert _post(logged_in_client, pairs).status_code == 302

    experiment = Experiment.objects.get()
    files = {file["name"]: file for file in experiment.imported_files}
    assert (files["base-c1.json"]["prompts"], files["ngram-c2.json"]["prompts"]) == (8, 16)
    assert files["ngram-c2.json"]["output_tokens"] == 64.0
    assert files["base-c2.json"]["input_tokens"] == 46.5
    assert files["base-c2.json"]["request_rate"] == "inf"
    html = unescape(logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).content.decode())
    assert "8 at concurrency 1, 16 at concurrency 2 measured (the files' num_prompts)" in html
    assert "24.0 at concurrency 1, 64.0 at concurrency 2 tokens a request on average" in html
    assert "max_tokens not recorded" in html
    assert "16 measured" not in html
    assert "max_tokens 64" not in html


@pytest.mark.django_db
def test_one_protocol_for_every_level_is_shown_once(logged_in_client):
    _post(logged_in_client, _real_pairs())
    experiment = Experiment.objects.get()

    html = unescape(logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).content.decode())

    assert (experiment.num_prompts, experiment.max_tokens) == (8, 24)
    assert "8 measured (the files' num_prompts)" in html
    assert "24.0 tokens a request on average (output tokens / completed requests)" in html
    assert "input and output tokens a request</dt><dd>the file's total input (output) tokens" in html


# ---------------------------------------------------------------- point estimates from the files' means


def _latencies(ttft: float, tpot: float, e2e: float) -> dict:
    return {"mean_ttft_ms": ttft, "mean_tpot_ms": tpot, "mean_e2el_ms": e2e}


@pytest.mark.django_db
def test_summary_only_files_get_point_estimates_from_their_means(logged_in_client):
    """Two blocks at concurrency 2. Baseline means (TTFT, TPOT, E2E): 40, 12, 300 and 40, 10, 300;
    the arm's: 50, 8, 250 twice. TPOT ratios 12/8 = 1.5 and 10/8 = 1.25, geometric mean
    √1.875 = 1.369306…; E2E 300/250 = 1.2 in both; TTFT 40/50 = 0.8 in both."""
    first, second = {"date": "20261201-100000"}, {"date": "20261201-110000"}
    pairs = [
        _file("baseline-c2.json", "base-1.json", **first, **_latencies(40, 12, 300)),
        _file("baseline-c2.json", "base-2.json", **second, **_latencies(40, 10, 300)),
        _file("ngram-k3-c2.json", "ngram-1.json", **first, **_latencies(50, 8, 250)),
        _file("ngram-k3-c2.json", "ngram-2.json", **second, **_latencies(50, 8, 250)),
    ]

    assert _post(logged_in_client, pairs).status_code == 302

    estimates = {e.metric: e for e in SpeedupEstimate.objects.filter(concurrency=2)}
    tpot = estimates["tpot"]
    assert tpot.point == pytest.approx(1.3693063937629153)
    assert tpot.block_ratios == pytest.approx([1.5, 1.25])
    assert (tpot.ci_low, tpot.ci_high, tpot.n_repetitions) == (None, None, 2)
    assert (tpot.outcome, tpot.note) == ("point estimate", "point estimate from the files' means, no interval")
    assert estimates["e2e"].point == pytest.approx(1.2)
    assert estimates["ttft"].point == pytest.approx(0.8)
    assert estimates["server_tpot"].point is None  # the files hold no engine timing
    assert estimates["output_throughput"].ci_low is not None  # throughput keeps its interval over the blocks


@pytest.mark.django_db
def test_the_page_shows_the_point_estimates_with_their_definition(logged_in_client):
    pairs = [
        _file("baseline-c2.json", "base.json", **_latencies(40, 12, 300)),
        _file("ngram-k3-c2.json", "ngram.json", **_latencies(50, 8, 250)),
    ]
    _post(logged_in_client, pairs)
    experiment = Experiment.objects.get()

    html = unescape(logged_in_client.get(reverse("experiments:detail", args=[experiment.pk])).content.decode())

    assert 'id="point-estimates"' in html
    assert "Latency speedups from the files' means" in html
    assert "the baseline's mean TTFT, TPOT or E2E as its file reports it" in html
    assert "<dt>No interval, no verdict</dt>" in html
    assert "<dt>Point estimate</dt><dd>a TPOT or E2E figure" in html  # in the speedup section's definitions
    table = html[html.index('id="table-point-estimates"') :]
    assert '1.500×<span class="range">point estimate from the files\' means, no interval</span>' in table
    assert 'data-value="0.8" data-tsv="0.8\t\t">0.800×' in table
    assert 'data-value="1.2" data-tsv="1.2\t\t">1.200×' in table
    tpot = next(v for v in ExperimentAnalysis.objects.get().verdicts if v["metric"] == "tpot")
    assert tpot["text"].endswith(
        "From the files' means (they hold no per-request rows): TPOT 1.50× at 2, point estimates without an "
        "interval or a verdict."
    )
    assert "[" not in table.split("</table>")[0].split("<tbody>")[1]  # no interval anywhere in it


@pytest.mark.django_db
def test_the_point_estimate_of_files_without_rows_is_the_paired_speedup_of_the_same_files_with_them(logged_in_client):
    """No request failed at concurrency 1, so the files' means are over the prompts both completed:
    the point from them equals the speedup from the per-request rows."""
    detailed = [(name, (FIXTURES / name).read_bytes()) for name in ("baseline-c1.json", "ngram-k3-c1.json")]
    _post(logged_in_client, detailed, name="detailed")
    paired = {e.metric: e for e in SpeedupEstimate.objects.filter(experiment__name="detailed")}
    _post(logged_in_client, [_file(name, name) for name in ("baseline-c1.json", "ngram-k3-c1.json")], name="summary")
    summary = {e.metric: e for e in SpeedupEstimate.objects.filter(experiment__name="summary")}

    for metric in ("ttft", "tpot", "e2e"):
        assert (paired[metric].n_pairs, paired[metric].outcome) == (8, "too few blocks")
        assert summary[metric].outcome == "point estimate"
        assert summary[metric].point == pytest.approx(paired[metric].point, rel=1e-9)
    raw_base, raw_arm = _real("baseline-c1.json"), _real("ngram-k3-c1.json")
    assert summary["tpot"].point == pytest.approx(raw_base["mean_tpot_ms"] / raw_arm["mean_tpot_ms"])


# ---------------------------------------------------------------- methods for files without a config


def _configless(real: str, name: str, **changes) -> tuple[str, bytes]:
    content = {key: value for key, value in _real(real).items() if key not in ("speculative_config", *changes)}
    return name, _bytes(content | {key: value for key, value in changes.items() if value is not None})


def _configless_pairs(label=None) -> list[tuple[str, bytes]]:
    """The real files, the n-gram arm's without its speculative_config and with `label` (None: none)."""
    return [
        ("baseline-c1.json", (FIXTURES / "baseline-c1.json").read_bytes()),
        ("baseline-c2.json", (FIXTURES / "baseline-c2.json").read_bytes()),
        _configless("ngram-k3-c1.json", "spec-c1.json", label=label),
        _configless("ngram-k3-c2.json", "spec-c2.json", label=label),
    ]


@pytest.mark.django_db
def test_a_file_without_label_or_config_takes_the_method_given_for_its_name(logged_in_client):
    response = _post(logged_in_client, _configless_pairs(), methods="spec-c1.json = ngram 3\nspec-c2.json = ngram 3")

    assert response.status_code == 302
    arm = Arm.objects.get(method="ngram")
    assert (arm.label, arm.num_speculative_tokens, arm.params) == ("ngram k=3", 3, {})
    assert arm.runs.count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["ngram", "ngram_gpu"])
def test_a_label_takes_a_method_line_with_a_config(logged_in_client, method):
    config = f'{{"method": "{method}", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 4}}'

    response = _post(logged_in_client, _configless_pairs(label="fast arm"), methods=f"fast arm = {config}")

    assert response.status_code == 302
    arm = Arm.objects.get(label="fast arm")
    assert (arm.method, arm.num_speculative_tokens) == (method, 3)
    assert arm.params == {"prompt_lookup_min": 1, "prompt_lookup_max": 4}


@pytest.mark.django_db
def test_a_method_needing_a_model_path_is_stored_without_settings(logged_in_client):
    response = _post(logged_in_client, _configless_pairs(label="my draft"), methods="my draft = draft_model 3")

    assert response.status_code == 302
    arm = Arm.objects.get(label="my draft")
    assert (arm.method, arm.num_speculative_tokens, arm.params) == ("draft_model", 3, {})


@pytest.mark.django_db
@pytest.mark.parametrize("label", ["ngram_gpu k=3", "Ngram-GPU k=3"])
def test_a_label_naming_ngram_gpu_is_not_read_as_ngram(logged_in_client, label):
    response = _post(logged_in_client, _configless_pairs(label=label))

    assert response.status_code == 302
    assert Arm.objects.get(label=label).method == "ngram_gpu"


@pytest.mark.django_db
def test_a_method_line_beats_a_method_word_in_the_label(logged_in_client):
    response = _post(logged_in_client, _configless_pairs(label="ngram try"), methods="ngram try = suffix 3")

    assert response.status_code == 302
    assert Arm.objects.get(label="ngram try").method == "suffix"


@pytest.mark.django_db
def test_an_unnamed_method_is_refused_with_the_way_to_name_it(logged_in_client):
    response = _post(logged_in_client, _configless_pairs(label="mystery"))

    _refused(
        response,
        "spec-c1.json, spec-c2.json: which speculative method is “mystery”?",
        "one line per label (or per file name for a file without a label)",
    )


METHOD_REFUSALS = [
    ("nobody = ngram 3", "Methods, line 1: no file has the label, or is named, “nobody”."),
    ("mystery = ngramm 3", "Methods, line 1: the method of “mystery” must be one of ngram, ngram_gpu, draft_model,"),
    ("mystery = ngram 17", "Methods, line 1: k for “mystery” must be a whole number from 1 to 16, not “17”."),
    ("mystery = ngram three", "k for “mystery” must be a whole number from 1 to 16, not “three”."),
    ("mystery = ngram", "Methods, line 1: “ngram” for “mystery” must be a method and k, e.g. “ngram 3”."),
    ("mystery ngram 3", "Methods, line 1 ('mystery ngram 3'): write “label = method k”"),
    ("mystery = baseline 3", "the method of “mystery” must be one of"),
    ("\nmystery = ngram 5", "spec-c1.json, spec-c2.json: methods, line 2, says k = 5"),
    ("mystery = ngram 5", "says k = 5, but the files report acceptance at 3 draft positions."),
    ("mystery = ngram 3\nmystery = ngram 3", "Methods, line 2: “mystery” is named on line 1 already."),
    ("spec-c1.json = ngram 3", "spec-c1.json has the label “mystery”: name the label, for all its files."),
    ("baseline = ngram 3", "“baseline” has no speculative-decoding figures"),
    ("mystery = ngram 3\u202e", "The methods hold an invisible control character (U+202E RIGHT-TO-LEFT OVERRIDE)."),
    (
        'mystery = {"method": "ngram", "num_speculative_tokens": 3, "trust_remote_code": true}',
        "Methods, line 1: the config for “mystery” cannot be imported: specdash does not pass trust_remote_code",
    ),
    ('mystery = {"method": "ngram", "num_speculative_tokens": 3}', "ngram needs prompt_lookup_min"),
    ('mystery = {"method": "eagle", "num_speculative_tokens": 3, "model": "../x"}', "absolute path"),
    ('mystery = {"method": "ngram", "num_speculative_tokens": 3,', "it is not valid JSON"),
    ("mystery = ngram 3\n" * 65, "65 method lines: at most one per file, 64."),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("methods", "message"), METHOD_REFUSALS, ids=[case[1][:40] for case in METHOD_REFUSALS])
def test_a_bad_method_line_is_refused_by_line(logged_in_client, methods, message):
    response = _post(logged_in_client, _configless_pairs(label="mystery"), methods=methods)

    _refused(response, message)


@pytest.mark.django_db
def test_a_line_for_files_that_have_a_config_is_refused(logged_in_client):
    response = _post(logged_in_client, _real_pairs(), methods="ngram k=3 = suffix 3")

    _refused(response, "“ngram k=3” has a speculative_config in its files and a method line too")


@pytest.mark.django_db
def test_a_config_whose_k_the_figures_contradict_is_refused(logged_in_client):
    config = '{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2, "prompt_lookup_max": 3}'
    pairs = [(GOOD, (FIXTURES / GOOD).read_bytes()), _file("ngram-k3-c1.json", "arm.json", speculative_config=config)]

    response = _post(logged_in_client, pairs)

    _refused(response, "arm.json: the speculative_config says k = 5, but the files report acceptance at 3 draft")


@pytest.mark.django_db
def test_the_command_takes_methods(user, tmp_path):
    for name, data in _configless_pairs(label="mystery"):
        (tmp_path / name).write_bytes(data)

    call_command("import_bench", str(tmp_path), owner="alice", name="with methods", method=["mystery = mtp 3"])

    arm = Arm.objects.get(label="mystery")
    assert (arm.method, arm.num_speculative_tokens, arm.params) == ("mtp", 3, {})


@pytest.mark.django_db
def test_the_command_refuses_a_bad_method_and_stores_nothing(user, tmp_path):
    for name, data in _configless_pairs(label="mystery"):
        (tmp_path / name).write_bytes(data)

    with pytest.raises(CommandError, match="nothing imported:\nMethods, line 1: no file has the label, or is named"):
        call_command("import_bench", str(tmp_path), owner="alice", name="bad method", method=["other = mtp 3"])

    assert not Experiment.objects.exists()
    assert not Arm.objects.exists()
