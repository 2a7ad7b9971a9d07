"""The input defects found by trying specdash as a new user would: each is refused
with a message that says why, and nothing is stored."""

import os

import pytest
from django.urls import reverse

from experiments.definition.forms.arms import ARM_FORMSET_PREFIX, MAX_ARMS, ArmFormSet
from experiments.definition.forms.experiment import ExperimentForm
from experiments.form_kit import clean_model_path
from experiments.models import Experiment
from experiments.results.exports import csv_lines, run_summary_export
from tests.factories import NGRAM_ARM_FORM, ArmFactory, RunSummaryFactory, UserFactory, form_data

pytestmark = pytest.mark.django_db

RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE


def _errors(**overrides) -> dict:
    form = ExperimentForm(form_data(**overrides), user=UserFactory(username="alice"))
    form.is_valid()
    return form.errors


def test_a_concurrency_of_five_thousand_digits_is_a_form_message_not_a_500(logged_in_client, celery_dispatch):
    response = logged_in_client.post(reverse("experiments:create"), form_data(concurrency_levels="9" * 5000))

    assert response.status_code == 400
    assert "Concurrency must be at most 1024" in response.text
    assert not Experiment.objects.exists()


@pytest.mark.parametrize("levels", ["0001, 4", "+4"])
def test_leading_zeros_and_signs_still_parse(levels):
    assert "concurrency_levels" not in _errors(concurrency_levels=levels)


def test_a_request_rate_too_low_for_the_runs_to_end_is_refused():
    message = _errors(request_rate="1e-9")["request_rate"][0]

    assert "just to arrive" in message
    assert "at least" in message
    assert "request_rate" not in _errors(request_rate="0.5")


def test_a_description_of_three_megabytes_gets_a_page_that_says_why(logged_in_client, celery_dispatch):
    response = logged_in_client.post(reverse("experiments:create"), form_data(description="x" * 3_000_000))

    assert response.status_code == 413
    assert "larger than this site accepts" in response.text
    assert "Nothing was saved" in response.text
    assert not Experiment.objects.exists()


def test_a_long_description_under_the_body_limit_is_a_form_message():
    assert "at most 10000 characters" in _errors(description="x" * 10_001)["description"][0]


def test_max_tokens_must_leave_room_for_the_longest_prompt():
    message = _errors(max_model_len="16", max_tokens="15")["max_tokens"][0]

    assert "longest prompt" in message
    assert "max_tokens" not in _errors(max_model_len="512", max_tokens="64")


def _arms_formset(*labels: str) -> ArmFormSet:
    arms = [NGRAM_ARM_FORM | {"num_speculative_tokens": str(k + 1), "label": label} for k, label in enumerate(labels)]
    data = {name: value for name, value in form_data(arms=arms).items() if name.startswith(ARM_FORMSET_PREFIX)}
    return ArmFormSet(data, prefix=ARM_FORMSET_PREFIX)


@pytest.mark.parametrize("label", [" Baseline ", "BASELINE", "Baseline replicate (A/A)"])
def test_an_arm_label_that_looks_like_the_baselines_is_refused(label):
    formset = _arms_formset(label)

    assert not formset.is_valid()
    assert "already labelled" in str(formset.errors)


def test_labels_differing_only_in_case_or_spacing_are_refused():
    formset = _arms_formset("fast  arm", "Fast arm")

    assert not formset.is_valid()
    assert "already labelled" in str(formset.errors[1])


@pytest.mark.parametrize("field", ["name", "description"])
def test_bidi_overrides_in_text_are_refused(field):
    assert "invisible control characters" in _errors(**{field: f"safe{RLO}txt.exe"})[field][0]


def test_bidi_overrides_in_an_arm_label_are_refused():
    formset = _arms_formset(f"ngram{RLO}")

    assert not formset.is_valid()
    assert "invisible control characters" in str(formset.errors)


def test_a_description_keeps_its_line_breaks():
    assert "description" not in _errors(description="line one\r\nline two\tindented")


@pytest.mark.parametrize("suffix", ["\n--trust-remote-code", " --trust-remote-code", "\t-x"])
def test_a_model_path_with_a_flag_appended_is_refused(settings, suffix):
    with pytest.raises(Exception, match=r"control characters|may hold only letters, digits"):
        clean_model_path(str(settings.SPECDASH_MODELS_DIR / "target") + suffix)


def test_a_symlink_inside_the_models_folder_that_points_outside_is_refused(settings, tmp_path):
    models, outside = tmp_path / "models", tmp_path / "elsewhere"
    models.mkdir()
    outside.mkdir()
    os.symlink(outside, models / "sneaky")
    settings.SPECDASH_MODELS_DIR = models

    with pytest.raises(Exception, match="must lie inside"):
        clean_model_path(str(models / "sneaky"))
    assert clean_model_path(str(models / "target")) == str(models / "target")


def test_a_huge_total_forms_builds_no_more_than_the_arm_limit(logged_in_client, celery_dispatch):
    data = form_data(**{f"{ARM_FORMSET_PREFIX}-TOTAL_FORMS": "100000"})

    formset = ArmFormSet(data, prefix=ARM_FORMSET_PREFIX)
    assert len(formset.forms) == MAX_ARMS
    assert not formset.is_valid()

    response = logged_in_client.post(reverse("experiments:create"), data)
    assert response.status_code == 400
    assert len(response.content) < 400_000
    assert not Experiment.objects.exists()


@pytest.mark.parametrize("label", ['=HYPERLINK("http://evil","x")', "+1+1", "-2+3", "@SUM(A1)"])
def test_csv_downloads_quote_text_a_spreadsheet_would_run(label):
    summary = RunSummaryFactory(run__arm=ArmFactory(label=label))

    lines = list(csv_lines(run_summary_export(experiment=summary.run.experiment)))

    assert f"'{label}" in lines[1].replace('""', '"')


def test_csv_downloads_leave_negative_numbers_alone():
    summary = RunSummaryFactory(ttft_mean_ms=-1.5)

    line = list(csv_lines(run_summary_export(experiment=summary.run.experiment)))[1]
    assert ",-1.5," in line
    assert "'-1.5" not in line
