"""Uploaded prompt sets: the three layouts, every bad file, versions and hashes, the upload
pages, experiments on an uploaded set, and speedup and acceptance by category and input length."""

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from experiments.analysis.services import experiment_analyse
from experiments.api.payloads import results_payload
from experiments.models import Experiment, RequestRecord, UploadedPromptSet
from experiments.prompt_sets import services as prompt_sets
from experiments.prompt_sets.services import prompt_set_upload
from experiments.prompts import catalog
from experiments.prompts import uploads as prompt_uploads
from experiments.prompts.uploads import PromptFileRefused, prompt_file_read
from tests.factories import form_data, seed_finished_experiment


def _jsonl(records) -> bytes:
    return "\n".join(json.dumps(record) for record in records).encode()


def _prompts(n=20, categories=("code", "prose")) -> list[dict]:
    return [
        {"prompt": f"prompt number {i} " + "word " * (i % 7), "category": categories[i % len(categories)]}
        for i in range(n)
    ]


def _stored(user, name="traffic", records=None) -> UploadedPromptSet:
    data = _jsonl(records or _prompts())
    parsed = prompt_file_read("traffic.jsonl", data)
    return prompt_set_upload(owner=user, name=name, file_name="traffic.jsonl", size_bytes=len(data), parsed=parsed)


# ---------------------------------------------------------------- the three layouts


def test_jsonl_prompts_with_categories():
    parsed = prompt_file_read("p.jsonl", _jsonl(_prompts(6)) + b"\n\n")

    assert parsed.format == prompt_uploads.PROMPTS
    assert [item.prompt for item in parsed.items][:2] == ["prompt number 0 ", "prompt number 1 word "]
    assert parsed.categories == {"code": 3, "prose": 3}
    assert sum(b["count"] for b in parsed.length_histogram()) == 6
    assert parsed.length_histogram()[0] == {"lo": 1, "hi": 16, "count": 6}


def test_jsonl_chat_messages_end_at_the_last_user_message():
    record = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Rename x to count."},
            {"role": "assistant", "content": "Done."},
        ],
        "label": "code",
    }

    parsed = prompt_file_read("chat.jsonl", _jsonl([record]))

    item = parsed.items[0]
    assert parsed.format == prompt_uploads.CHAT
    assert item.messages == (("system", "Be brief."), ("user", "Rename x to count."))
    assert (item.prompt, item.category) == ("Be brief.\nRename x to count.", "code")


def test_sharegpt_takes_the_first_human_turn():
    data = json.dumps(
        [{"conversations": [{"from": "human", "value": "Hi there"}, {"from": "gpt", "value": "Hello"}]}]
    ).encode()

    parsed = prompt_file_read("share.json", data)

    assert parsed.format == prompt_uploads.SHAREGPT
    assert parsed.items[0].prompt == "Hi there"
    assert parsed.categories == {}


def test_the_hash_follows_the_content():
    first = prompt_file_read("a.jsonl", _jsonl(_prompts(4)))
    same = prompt_file_read("b.jsonl", _jsonl(_prompts(4)) + b"\n")
    other = prompt_file_read("c.jsonl", _jsonl(_prompts(4, categories=("x", "y"))))

    assert first.sha256 == same.sha256 != other.sha256


# ---------------------------------------------------------------- bad files


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff\xfe", "f.jsonl: not UTF-8 text (byte 0xff at 0)."),
        (b'{"prompt": "a"}\n{"prompt": "b",}', "f.jsonl, line 2: not valid JSON"),
        (b'{"prompt": "a"}\n{"text": "b"}', "f.jsonl, line 2: each line must be an object with either"),
        (b'{"prompt": "a", "messages": []}', "each line must be an object with either “prompt” or “messages”"),
        (b'{"prompt": "   "}', "f.jsonl, line 1: “prompt” must be non-empty text."),
        (b'{"prompt": 7}', "“prompt” must be non-empty text."),
        (b'{"messages": [{"role": "robot", "content": "x"}]}', "message 1 needs a role among system, user"),
        (b'{"messages": [{"role": "system", "content": "x"}]}', "the conversation has no user message"),
        (b'{"prompt": "a"}\n{"messages": [{"role": "user", "content": "b"}]}', "some lines have “prompt”"),
        (b'{"prompt": "a"}\n{"prompt": "a"}', "f.jsonl: prompt 2 repeats prompt 1"),
        (b'{"prompt": "a", "category": "x"}\n{"prompt": "b"}', "f.jsonl: prompt 2 has no category while"),
        (b'{"prompt": "a", "category": 3}', "“category” must be text of at most 64 characters."),
        (b'{"prompt": "a", "n": NaN}', "not valid JSON (NaN is not a number JSON allows"),
        (b'{"prompt": "a\\u0000b"}', "f.jsonl, line 1: a NUL character (\\u0000) in the text, which cannot be stored."),
        (b'{"messages": [{"role": "user", "content": "x"}], "category": "\\u0000"}', "line 1: a NUL character"),
        (b'[{"conversations": 5}]', "f.jsonl, entry 1: a ShareGPT entry is an object with a “conversations” list."),
        (b'[{"conversations": [{"from": "gpt", "value": "x"}]}]', "the first human turn must be non-empty"),
        (b"\n\n", "f.jsonl: no prompts."),
        (b'{"prompt": "a", "n": ' + b"9" * 5000 + b"}", "f.jsonl, line 1: not valid JSON (Exceeds the limit"),
        (b'[{"conversations": [', "f.jsonl: not valid JSON"),
    ],
)
def test_a_bad_file_is_refused_with_the_file_line_and_problem(data, message):
    with pytest.raises(PromptFileRefused) as refused:
        prompt_file_read("f.jsonl", data)

    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("limit", "value", "data", "message"),
    [
        ("MAX_FILE_BYTES", 10, b'{"prompt": "a long enough line"}', "bytes, more than the 10 a prompt file may have"),
        ("MAX_PROMPTS", 2, _jsonl(_prompts(3)), "f.jsonl: more than 2 prompts."),
        ("MAX_CATEGORIES", 1, _jsonl(_prompts(4)), "f.jsonl: 2 categories, more than 1."),
        ("MAX_PROMPT_CHARS", 5, b'{"prompt": "abcdef"}', "“prompt” has 6 characters, more than 5."),
    ],
)
def test_the_limits_are_named(monkeypatch, limit, value, data, message):
    monkeypatch.setattr(prompt_uploads, limit, value)

    with pytest.raises(PromptFileRefused, match=message.replace(".", r"\.")):
        prompt_file_read("f.jsonl", data)


# ---------------------------------------------------------------- versions and pages


@pytest.mark.django_db
def test_the_same_content_keeps_its_version_and_other_content_makes_the_next(user):
    first = _stored(user)
    again = _stored(user)
    second = _stored(user, records=_prompts(21))

    assert (first.version, again.pk, second.version) == (1, first.pk, 2)
    assert UploadedPromptSet.objects.count() == 2


@pytest.mark.django_db
def test_uploading_through_the_page_shows_the_set(logged_in_client):
    upload = SimpleUploadedFile("traffic.jsonl", _jsonl(_prompts()), content_type="application/jsonl")

    response = logged_in_client.post(reverse("experiments:prompt_sets"), {"name": "traffic", "file": upload})

    prompt_set = UploadedPromptSet.objects.get()
    assert response.url == reverse("experiments:prompt_set", args=[prompt_set.pk])
    html = logged_in_client.get(response.url).content.decode()
    assert prompt_set.sha256 in html
    assert 'id="length-histogram"' in html
    assert "<td>code</td><td>10</td>" in html
    listing = logged_in_client.get(reverse("experiments:prompt_sets")).content.decode()
    assert "traffic" in listing
    assert "v1" in listing


@pytest.mark.django_db
def test_a_bad_upload_stores_nothing_and_names_the_problem(logged_in_client):
    upload = SimpleUploadedFile("traffic.jsonl", b'{"prompt": "a"}\n{"prompt": "a"}')

    response = logged_in_client.post(reverse("experiments:prompt_sets"), {"name": "traffic", "file": upload})

    assert response.status_code == 400
    assert "traffic.jsonl: prompt 2 repeats prompt 1" in response.content.decode()
    assert not UploadedPromptSet.objects.exists()


# ---------------------------------------------------------------- experiments on an uploaded set


@pytest.mark.django_db
def test_the_form_takes_an_uploaded_set_with_its_hash(logged_in_client, user, celery_dispatch):
    prompt_set = _stored(user)

    logged_in_client.post(
        reverse("experiments:create"),
        form_data(workload_kind="uploaded", prompt_set="", uploaded_prompt_set=str(prompt_set.pk), num_prompts="16"),
    )

    experiment = Experiment.objects.get()
    assert (experiment.workload_kind, experiment.prompt_set) == ("uploaded", "traffic v1")
    assert experiment.prompt_set_hash == prompt_set.sha256
    assert experiment.uploaded_prompt_set == prompt_set
    assert catalog.experiment_prompts(experiment) == prompt_set.prompts()[:18]


@pytest.mark.django_db
def test_an_uploaded_set_too_small_is_refused_like_a_built_in_one(logged_in_client, user):
    prompt_set = _stored(user)

    response = logged_in_client.post(
        reverse("experiments:create"),
        form_data(workload_kind="uploaded", uploaded_prompt_set=str(prompt_set.pk), num_prompts="19"),
    )

    assert response.context["form"].errors["num_prompts"] == [
        "The prompt set “traffic v1” has 20 prompts, but 2 warm-up and 19 measured requests need 21 distinct ones "
        "(no prompt is sent twice in a run). Lower the prompts per level or the warm-up requests."
    ]
    no_set = logged_in_client.post(reverse("experiments:create"), form_data(workload_kind="uploaded"))
    assert no_set.context["form"].errors["uploaded_prompt_set"] == ["Choose an uploaded prompt set."]


@pytest.fixture
def by_category(user):
    prompt_set = _stored(user)
    return seed_finished_experiment(
        workload_kind=Experiment.WorkloadKind.UPLOADED, uploaded_prompt_set=prompt_set, prompt_set="traffic v1"
    )


@pytest.mark.django_db
def test_speedup_and_acceptance_are_broken_down_by_category(by_category):
    groups = by_category.analysis.series["by_category"]

    assert [(g["group"], g["prompts"]) for g in groups] == [("code", 10), ("prose", 10)]
    for group in groups:
        assert {(c["arm"], c["level"]) for c in group["cells"]} == {
            (arm, level) for arm in ("n-gram k=4", "draft k=3") for level in (1, 4)
        }
        assert all(c["outcome"] and c["n_pairs"] == 3 * 10 for c in group["cells"])
        assert {row["arm"] for row in group["acceptance"]} == {"n-gram k=4", "draft k=3"}
        assert all(0 < row["rate"] <= 1 and 1 <= row["tau"] <= 5 for row in group["acceptance"])
    assert "by_input_length" not in by_category.analysis.series  # every seeded prompt has 50 tokens


@pytest.mark.django_db
def test_input_length_buckets_appear_when_the_prompts_span_several(by_category, logged_in_client):
    RequestRecord.objects.filter(run__experiment=by_category, prompt_index__lt=5).update(input_tokens=300)
    experiment_analyse(experiment=by_category)
    by_category.refresh_from_db()

    groups = by_category.analysis.series["by_input_length"]

    assert [(g["group"], g["prompts"]) for g in groups] == [("1–64 tokens", 15), ("257–512 tokens", 5)]
    html = logged_in_client.get(reverse("experiments:detail", args=[by_category.pk])).content.decode()
    assert "By prompt category" in html
    assert "By input length" in html
    assert results_payload(by_category)["series"]["by_input_length"] == groups


@pytest.mark.django_db
def test_a_chat_set_warns_that_its_messages_go_to_the_completions_endpoint(user):
    chat = [{"messages": [{"role": "user", "content": f"question {i}"}]} for i in range(4)]
    experiment = seed_finished_experiment(
        requests=4, workload_kind=Experiment.WorkloadKind.UPLOADED, uploaded_prompt_set=_stored(user, records=chat)
    )

    assert any("without the model's chat template" in warning for warning in experiment.protocol_warnings())
    assert any("without the model's chat template" in warning for warning in experiment.analysis.warnings)


@pytest.mark.django_db
def test_the_set_page_shows_token_lengths_as_the_server_counted_them(user, logged_in_client):
    prompt_set = _stored(user)
    uploaded = {"workload_kind": Experiment.WorkloadKind.UPLOADED, "uploaded_prompt_set": prompt_set}
    # Items 0-5 measured, then (a range of 5-6 words) items 2, 3, 9, 10, 16 and 17.
    first = seed_finished_experiment(requests=6, **uploaded)
    ranged = seed_finished_experiment(requests=6, input_lengths="5-6", **uploaded)
    RequestRecord.objects.filter(run__experiment=first, prompt_index__lt=2).update(input_tokens=300)
    seed_finished_experiment(requests=4, endpoint=Experiment.Endpoint.CHAT, **uploaded)

    measured = prompt_sets.prompt_set_token_lengths(prompt_set=prompt_set, user=user)

    model = first.target_model
    assert ranged.target_model == model
    assert [(m.model, m.endpoint, m.prompts, m.buckets) for m in measured] == [
        (model, "chat", 4, [("1–64 tokens", 4)]),
        (model, "completions", 10, [("1–64 tokens", 8), ("257–512 tokens", 2)]),
    ]
    html = logged_in_client.get(reverse("experiments:prompt_set", args=[prompt_set.pk])).content.decode()
    assert "completions · 10 of 20 prompts measured" in html
    assert "<td>257–512 tokens</td><td>2</td>" in html


@pytest.mark.django_db
def test_a_set_without_requests_says_so(user, logged_in_client):
    prompt_set = _stored(user)

    html = logged_in_client.get(reverse("experiments:prompt_set", args=[prompt_set.pk])).content.decode()

    assert "No request has been recorded on this set yet." in html
