"""`vllm bench serve --save-result` files read (experiments/imports/bench_files.py) and imported:
the real files made by vLLM's benchmark client, and every kind of bad file, refused by name with
nothing stored."""

import json

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from experiments.imports import bench_files
from experiments.imports.bench_files import BenchFileRefused, bench_file_read, bench_files_read
from experiments.imports.services import arms_from_files
from experiments.models import Arm, Experiment, RequestRecord, RunSummary, SpeedupEstimate
from tests.imports.helpers import (
    FILES,
    FIXTURES,
    GOOD,
    as_bytes,
    post_import,
    real_file,
    real_pairs,
)

# ---------------------------------------------------------------- real files


def test_the_fixtures_are_real_vllm_bench_serve_files():
    names = [path.name for path in FILES]
    assert names == ["baseline-c1.json", "baseline-c2.json", "ngram-k3-c1.json", "ngram-k3-c2.json"]
    detailed = real_file("ngram-k3-c1.json")
    assert detailed["backend"] == "openai"
    assert len(detailed["ttfts"]) == detailed["completed"] + detailed.get("failed", 0)
    assert "ttfts" not in real_file("ngram-k3-c2.json")
    assert "spec_decode_acceptance_rate" not in real_file("baseline-c1.json")


def test_a_real_file_is_read_with_its_figures():
    read = bench_file_read("ngram-k3-c1.json", (FIXTURES / "ngram-k3-c1.json").read_bytes())
    raw = real_file("ngram-k3-c1.json")

    assert (read.level, read.label, read.k) == (1, "ngram k=3", 3)
    assert read.values["median_tpot_ms"] == raw["median_tpot_ms"]
    assert len(read.requests) == raw["completed"]
    assert read.requests[0].ttft_ms == pytest.approx(raw["ttfts"][0] * 1000)
    drafts = raw["spec_decode_num_drafts"]
    assert read.accepted_per_position == [round(r * drafts) for r in raw["spec_decode_per_position_acceptance_rates"]]


def test_files_are_grouped_into_arms_by_label_and_config():
    arms = arms_from_files(bench_files_read(real_pairs()))

    assert [(arm.label, arm.method, arm.k) for arm in arms] == [
        ("baseline", Arm.Method.BASELINE, None),
        ("ngram k=3", Arm.Method.NGRAM, 3),
    ]
    assert arms[1].params == {"prompt_lookup_min": 2, "prompt_lookup_max": 3}
    assert sorted(file.level for file in arms[1].files) == [1, 2]


@pytest.mark.django_db
def test_importing_the_files_makes_a_read_only_experiment_with_their_numbers(logged_in_client, user):
    response = post_import(logged_in_client, real_pairs())

    experiment = Experiment.objects.get()
    assert response.status_code == 302
    assert response.url == reverse("experiments:detail", args=[experiment.pk])
    assert (experiment.status, experiment.source, experiment.owner) == ("finished", "imported", user)
    assert experiment.concurrency_levels == [1, 2]
    assert experiment.runs.count() == 4
    summary = RunSummary.objects.get(run__arm__label="ngram k=3", run__concurrency=2)
    raw = real_file("ngram-k3-c2.json")
    assert summary.output_throughput == raw["output_throughput"]
    assert summary.tpot_p50_ms == raw["median_tpot_ms"]
    assert summary.tpot_p90_ms == raw["p90_tpot_ms"]
    assert summary.e2e_p99_ms == raw["p99_e2el_ms"]
    assert summary.spec_num_drafts == raw["spec_decode_num_drafts"]
    detailed = RequestRecord.objects.filter(run__concurrency=1)
    assert detailed.count() == real_file("baseline-c1.json")["completed"] + real_file("ngram-k3-c1.json")["completed"]
    assert not RequestRecord.objects.filter(run__concurrency=2).exists()
    throughput = SpeedupEstimate.objects.get(metric="output_throughput", concurrency=2)
    assert throughput.point == pytest.approx(
        raw["output_throughput"] / real_file("baseline-c2.json")["output_throughput"]
    )
    assert throughput.outcome == "too few blocks"


@pytest.mark.django_db
def test_the_page_says_what_an_import_lacks_and_offers_no_rerun(logged_in_client):
    post_import(logged_in_client, real_pairs())
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


def _bad_cases():
    real = (FIXTURES / GOOD).read_bytes() if (FIXTURES / GOOD).exists() else b"{}"
    content = json.loads(real)
    return [
        ("malformed", b'{"duration": 1,, }', "malformed: not valid JSON at line 1, column 16"),
        ("truncated", real[: len(real) // 2], "(the file ends early: truncated?)"),
        (
            "typed",
            as_bytes(content | {"completed": "8"}),
            'typed: “completed” must be a whole number from 0 to 2,147,483,647, not "8".',
        ),
        (
            "negative",
            as_bytes(content | {"total_output_tokens": -3}),
            "“total_output_tokens” must be a whole number from 0",
        ),
        ("boolean", as_bytes(content | {"duration": True}), "“duration” must be a finite number, not true."),
        ("nan", real.replace(b'"duration": ', b'"duration": NaN, "x": '), "NaN is not a number JSON allows"),
        ("huge", b'{"completed": ' + b"9" * 5000 + b"}", "huge: not valid JSON: Exceeds the limit (4300 digits)"),
        ("latin1", '{"label": "café"}'.encode("latin-1"), "latin1: not UTF-8 text (byte 0xe9 at 14)."),
        ("list", b"[1, 2]", "list: a result file is a JSON object, not a list."),
        ("nul", as_bytes(content | {"label": "a\x00b"}), "nul: a NUL character (\\u0000) in a text, which cannot be"),
        ("nul-key", as_bytes(content | {"extra": [{"k\x00": 1}]}), "nul-key: a NUL character"),
        ("other", b'{"hello": "world"}', "other: not a vllm bench serve result (missing duration, completed,"),
        ("unbounded", as_bytes(content | {"max_concurrency": None}), "unbounded: no max_concurrency."),
        ("ragged", as_bytes(content | {"ttfts": [0.1]}), "ragged: the per-request lists differ in length"),
    ]


@pytest.mark.parametrize(("name", "data", "message"), _bad_cases(), ids=[case[0] for case in _bad_cases()])
def test_a_bad_file_is_refused_by_name(name, data, message):
    with pytest.raises(BenchFileRefused) as refused:
        bench_file_read(f"{name}", data)

    assert message in str(refused.value)


@pytest.mark.django_db
def test_a_bad_file_among_good_ones_stores_nothing_and_the_page_names_it(logged_in_client):
    pairs = [*real_pairs(), ("broken.json", (FIXTURES / GOOD).read_bytes()[:100])]

    response = post_import(logged_in_client, pairs)

    assert response.status_code == 400
    assert "broken.json: not valid JSON" in response.content.decode()
    assert not Experiment.objects.exists()
    assert not RunSummary.objects.exists()


@pytest.mark.django_db
def test_an_oversized_file_is_refused_before_it_is_read(logged_in_client, monkeypatch):
    monkeypatch.setattr(bench_files, "MAX_FILE_BYTES", 100)

    response = post_import(logged_in_client, [(GOOD, (FIXTURES / GOOD).read_bytes())])

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
        content = real_file(name)
        if change == "unlabelled":
            content = {key: value for key, value in content.items() if key not in ("label", "speculative_config")}
        if change == "other-model":
            content["model_id"] = "another/model"
        read.append(bench_file_read(name, as_bytes(content)))

    with pytest.raises(BenchFileRefused, match=message.replace("?", r"\?")):
        arms_from_files(read)


@pytest.mark.django_db
def test_the_command_refuses_a_bad_directory_and_stores_nothing(user, tmp_path):
    (tmp_path / "bad.json").write_bytes(b"\xff")

    with pytest.raises(CommandError, match=r"bad.json: not UTF-8 text"):
        call_command("import_bench", str(tmp_path), owner="alice", name="bad")

    assert not Experiment.objects.exists()
