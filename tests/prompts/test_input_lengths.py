"""Input-length distributions of synthetic workloads: the text the form takes, the lengths
drawn, the prompts sent, and the form's checks."""

import json

import pytest
from django.urls import reverse

from experiments.analysis.breakdowns import categories_by_prompt
from experiments.models import Experiment
from experiments.prompt_sets.services import prompt_set_upload
from experiments.prompts import catalog
from experiments.prompts.input_lengths import MAX_BINS, parse_length_distribution
from experiments.prompts.uploads import prompt_file_read
from tests.factories import ExperimentFactory, form_data


@pytest.mark.parametrize(
    ("text", "lengths", "weights", "uniform"),
    [
        ("64", (64,), (), False),
        (" 16 - 256 ", (16, 256), (), True),
        ("16:3, 128:5,1024:2", (16, 128, 1024), (3.0, 5.0, 2.0), False),
        ("8:0.5", (8,), (0.5,), False),
    ],
)
def test_the_three_kinds_are_read(text, lengths, weights, uniform):
    distribution = parse_length_distribution(text)

    assert (distribution.lengths, distribution.weights, distribution.uniform) == (lengths, weights, uniform)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "“0” is not a length between 1 and 1,048,576."),
        ("abc", "“abc” is not a length"),
        ("", "“” is not a length"),
        ("256-16", "The range's low end (256) must be below its high end (16)."),
        ("16:0", "“0” is not a weight (a positive number)."),
        ("16:x", "“x” is not a weight"),
        ("16:inf", "“inf” is not a weight"),
        ("16:1, 16:2", "A length is listed twice in the histogram."),
        (", ".join(f"{n}:1" for n in range(1, MAX_BINS + 2)), f"At most {MAX_BINS} lengths in a histogram (got 21)."),
        ("9" * 5000, "is not a length"),
    ],
)
def test_a_bad_distribution_is_named(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        parse_length_distribution(text)


def test_draws_follow_the_distribution_and_the_seed():
    histogram = parse_length_distribution("16:1, 256:3")
    uniform = parse_length_distribution("10-20")

    drawn = histogram.draw(4000, seed=1)

    assert drawn == histogram.draw(4000, seed=1) != histogram.draw(4000, seed=2)
    assert histogram.draw(10, seed=1) == drawn[:10]
    assert drawn.count(256) / len(drawn) == pytest.approx(0.75, abs=0.03)
    assert set(uniform.draw(2000, seed=0)) == set(range(10, 21))
    assert parse_length_distribution("7").draw(3, seed=5) == [7, 7, 7]


def test_synthetic_prompts_have_the_drawn_lengths_and_are_distinct():
    lengths = parse_length_distribution("1:1, 5:1, 40:1").draw(200, seed=3)

    prompts = catalog.synthetic_prompts_of_lengths(lengths=lengths, seed=3)

    assert [len(prompt.split()) for prompt in prompts] == lengths
    assert len(set(prompts)) == 200
    assert catalog.synthetic_prompts_of_lengths(lengths=[6] * 5, seed=3) == catalog.synthetic_prompts(
        count=5, input_len=6, seed=3
    )


@pytest.mark.django_db
def test_an_experiment_sends_prompts_of_its_distribution():
    experiment = ExperimentFactory(
        workload_kind=Experiment.WorkloadKind.SYNTHETIC, prompt_set="", synthetic_input_len=64, input_lengths="4-64",
        num_prompts=30, seed=9,
    )  # fmt: skip

    prompts = catalog.experiment_prompts(experiment)

    expected = parse_length_distribution("4-64").draw(experiment.warmup_requests + 30, seed=9)
    assert [len(prompt.split()) for prompt in prompts] == expected


def _synthetic(**overrides) -> dict:
    return form_data(workload_kind="synthetic", prompt_set="", synthetic_input_len="", **overrides)


@pytest.mark.django_db
def test_the_form_stores_a_distribution_with_its_longest_length(logged_in_client, celery_dispatch):
    logged_in_client.post(reverse("experiments:create"), _synthetic(input_lengths="8:1, 32:2"))

    experiment = Experiment.objects.get()
    assert (experiment.input_lengths, experiment.synthetic_input_len) == ("8:1, 32:2", 32)


@pytest.mark.django_db
def test_the_longest_length_must_fit_the_model_and_the_shortest_give_enough_prompts(logged_in_client):
    too_long = logged_in_client.post(reverse("experiments:create"), _synthetic(input_lengths="8-600"))
    too_few = logged_in_client.post(
        reverse("experiments:create"), _synthetic(input_lengths="1-4", num_prompts="400", concurrency_levels="1")
    )
    bad = logged_in_client.post(reverse("experiments:create"), _synthetic(input_lengths="8-4"))

    assert too_long.context["form"].errors["max_tokens"] == [
        "max_tokens (64) plus the input length (600) must fit in the max model length (512)."
    ]
    capacity = catalog.synthetic_capacity(1)
    assert too_few.context["form"].errors["input_lengths"] == [
        f"Only {capacity} distinct prompts of 1 word(s) exist; the warm-up and measured requests need 402."
    ]
    assert bad.context["form"].errors["input_lengths"] == ["The range's low end (8) must be below its high end (4)."]
    assert not Experiment.objects.exists()


@pytest.mark.django_db
def test_a_built_in_workload_ignores_the_input_lengths(logged_in_client, celery_dispatch):
    logged_in_client.post(reverse("experiments:create"), form_data(input_lengths="nonsense"))

    assert Experiment.objects.get().input_lengths == ""


# ---------------------------------------------------------------- uploaded sets: a length range selects


def _uploaded(user):
    """20 prompts of 3 + i % 7 words, categories alternating code and prose."""
    records = [
        {"prompt": f"prompt number {i} " + "word " * (i % 7), "category": ("code", "prose")[i % 2]} for i in range(20)
    ]
    data = "\n".join(json.dumps(record) for record in records).encode()
    return prompt_set_upload(
        owner=user, name="traffic", file_name="t.jsonl", size_bytes=len(data), parsed=prompt_file_read("t", data)
    )


def _on_set(prompt_set, **overrides) -> dict:
    fields = {"workload_kind": "uploaded", "prompt_set": "", "uploaded_prompt_set": str(prompt_set.pk)}
    return form_data(**fields | {"num_prompts": "4", "concurrency_levels": "1", "warmup_requests": "2"} | overrides)


@pytest.mark.django_db
def test_a_range_sends_only_an_uploaded_sets_prompts_of_that_many_words(logged_in_client, user, celery_dispatch):
    prompt_set = _uploaded(user)

    logged_in_client.post(reverse("experiments:create"), _on_set(prompt_set, input_lengths="5-6"))

    experiment = Experiment.objects.get()
    # 5 or 6 words: i % 7 is 2 or 3.
    chosen = [2, 3, 9, 10, 16, 17]
    assert catalog.uploaded_selection(prompt_set, "5-6") == chosen
    assert catalog.experiment_prompts(experiment) == [prompt_set.items[i]["prompt"] for i in chosen]
    # A prompt's index is its place among those sent, and keeps its own category.
    assert categories_by_prompt(experiment) == dict(enumerate(["code", "prose", "prose", "code", "code", "prose"]))
    assert catalog.uploaded_selection(prompt_set, "9") == [6, 13]


@pytest.mark.django_db
def test_a_range_with_too_few_prompts_or_a_histogram_is_refused_for_an_uploaded_set(logged_in_client, user):
    prompt_set = _uploaded(user)

    too_few = logged_in_client.post(reverse("experiments:create"), _on_set(prompt_set, input_lengths="5"))
    histogram = logged_in_client.post(reverse("experiments:create"), _on_set(prompt_set, input_lengths="5:1, 6:1"))

    assert too_few.context["form"].errors["input_lengths"] == [
        "The prompt set “traffic v1” has 3 prompts of 5 words, but 2 warm-up and 4 measured requests need 6 distinct "
        "ones (no prompt is sent twice in a run). Lower the prompts per level or the warm-up requests."
    ]
    assert histogram.context["form"].errors["input_lengths"] == [
        "For an uploaded set, give one length or a range (e.g. 100-400): the set's prompts of that many words are "
        "sent, in file order."
    ]
    assert not Experiment.objects.exists()


@pytest.mark.django_db
def test_the_longest_selected_prompt_must_fit_the_model(logged_in_client, user):
    prompt_set = _uploaded(user)

    response = logged_in_client.post(
        reverse("experiments:create"), _on_set(prompt_set, input_lengths="7-9", max_tokens="504", max_model_len="512")
    )

    # Items 4, 5, 6, 11, 12 and 13 are sent, the longest of 9 words (the first six items: 8).
    assert response.context["form"].errors["max_tokens"] == [
        "max_tokens (504) plus the longest prompt used (at least 9 tokens, one per word) must fit in the max model "
        "length (512)."
    ]
