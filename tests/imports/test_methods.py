"""The method of files without a --speculative-config (experiments/imports/methods.py): named per
file or label, refused by line when wrong."""

import pytest
from django.core.management import CommandError, call_command

from experiments.models import Arm, Experiment
from tests.imports.helpers import (
    FIXTURES,
    GOOD,
    as_bytes,
    assert_refused,
    bench_file,
    post_import,
    real_file,
    real_pairs,
)


def _configless(real: str, name: str, **changes) -> tuple[str, bytes]:
    content = {key: value for key, value in real_file(real).items() if key not in ("speculative_config", *changes)}
    return name, as_bytes(content | {key: value for key, value in changes.items() if value is not None})


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
    response = post_import(
        logged_in_client, _configless_pairs(), methods="spec-c1.json = ngram 3\nspec-c2.json = ngram 3"
    )

    assert response.status_code == 302
    arm = Arm.objects.get(method="ngram")
    assert (arm.label, arm.num_speculative_tokens, arm.params) == ("ngram k=3", 3, {})
    assert arm.runs.count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["ngram", "ngram_gpu"])
def test_a_label_takes_a_method_line_with_a_config(logged_in_client, method):
    config = f'{{"method": "{method}", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 4}}'

    response = post_import(logged_in_client, _configless_pairs(label="fast arm"), methods=f"fast arm = {config}")

    assert response.status_code == 302
    arm = Arm.objects.get(label="fast arm")
    assert (arm.method, arm.num_speculative_tokens) == (method, 3)
    assert arm.params == {"prompt_lookup_min": 1, "prompt_lookup_max": 4}


@pytest.mark.django_db
def test_a_method_needing_a_model_path_is_stored_without_settings(logged_in_client):
    response = post_import(logged_in_client, _configless_pairs(label="my draft"), methods="my draft = draft_model 3")

    assert response.status_code == 302
    arm = Arm.objects.get(label="my draft")
    assert (arm.method, arm.num_speculative_tokens, arm.params) == ("draft_model", 3, {})


@pytest.mark.django_db
@pytest.mark.parametrize("label", ["ngram_gpu k=3", "Ngram-GPU k=3"])
def test_a_label_naming_ngram_gpu_is_not_read_as_ngram(logged_in_client, label):
    response = post_import(logged_in_client, _configless_pairs(label=label))

    assert response.status_code == 302
    assert Arm.objects.get(label=label).method == "ngram_gpu"


@pytest.mark.django_db
def test_a_method_line_beats_a_method_word_in_the_label(logged_in_client):
    response = post_import(logged_in_client, _configless_pairs(label="ngram try"), methods="ngram try = suffix 3")

    assert response.status_code == 302
    assert Arm.objects.get(label="ngram try").method == "suffix"


@pytest.mark.django_db
def test_an_unnamed_method_is_refused_with_the_way_to_name_it(logged_in_client):
    response = post_import(logged_in_client, _configless_pairs(label="mystery"))

    assert_refused(
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
    response = post_import(logged_in_client, _configless_pairs(label="mystery"), methods=methods)

    assert_refused(response, message)


@pytest.mark.django_db
def test_a_line_for_files_that_have_a_config_is_refused(logged_in_client):
    response = post_import(logged_in_client, real_pairs(), methods="ngram k=3 = suffix 3")

    assert_refused(response, "“ngram k=3” has a speculative_config in its files and a method line too")


@pytest.mark.django_db
def test_a_config_whose_k_the_figures_contradict_is_refused(logged_in_client):
    config = '{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 2, "prompt_lookup_max": 3}'
    pairs = [
        (GOOD, (FIXTURES / GOOD).read_bytes()),
        bench_file("ngram-k3-c1.json", "arm.json", speculative_config=config),
    ]

    response = post_import(logged_in_client, pairs)

    assert_refused(response, "arm.json: the speculative_config says k = 5, but the files report acceptance at 3 draft")


@pytest.mark.django_db
def test_the_command_takes_methods(user, tmp_path):
    for name, data in _configless_pairs(label="mystery"):
        (tmp_path / name).write_bytes(data)

    call_command("import_bench", str(tmp_path), owner="alice", name="with methods", method=["mystery = suffix 3"])

    arm = Arm.objects.get(label="mystery")
    assert (arm.method, arm.num_speculative_tokens, arm.params) == ("suffix", 3, {})


@pytest.mark.django_db
def test_the_command_refuses_a_bad_method_and_stores_nothing(user, tmp_path):
    for name, data in _configless_pairs(label="mystery"):
        (tmp_path / name).write_bytes(data)

    with pytest.raises(CommandError, match="nothing imported:\nMethods, line 1: no file has the label, or is named"):
        call_command("import_bench", str(tmp_path), owner="alice", name="bad method", method=["other = mtp 3"])

    assert not Experiment.objects.exists()
    assert not Arm.objects.exists()
