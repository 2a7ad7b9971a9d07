"""The service profile form: each wrong input refused with the sentence the page shows, and a
good one normalised to the profile's fields."""

import pytest
from django.conf import settings

from experiments.service_profiles.forms import ServiceProfileForm

CATEGORIES = ("chat", "code_edit", "summarise", "billing")


def _form(**changes) -> ServiceProfileForm:
    data = {"service": "chat", "target_model": str(settings.SPECDASH_MODELS_DIR / "target"), "worker_queue": "h100",
            "metric": "server_tpot", "concurrency_low": "2", "concurrency_high": "32", **changes}  # fmt: skip
    return ServiceProfileForm(data, categories=CATEGORIES)


def test_a_range_with_slos_and_a_mix_is_normalised():
    form = _form(service="Chat", slo_ttft_ms="500", category_mix=" billing: 0.25,chat:0.75 ")
    assert form.is_valid(), form.errors
    spec = form.spec()
    assert (spec.service, spec.concurrency_low, spec.concurrency_high, spec.daily_concurrency) == ("chat", 2, 32, [])
    assert (spec.slo_ttft_ms, spec.slo_tpot_ms, spec.category_mix) == (500.0, None, {"billing": 0.25, "chat": 0.75})


def test_a_curve_instead_of_a_range_is_24_hours():
    form = _form(concurrency_low="", concurrency_high="", daily_concurrency="0-11: 4, 12-23: 16")
    assert form.is_valid(), form.errors
    assert form.spec().daily_concurrency == [4] * 12 + [16] * 12
    assert (form.spec().concurrency_low, form.spec().concurrency_high) == (None, None)


@pytest.mark.parametrize(
    ("changes", "field", "error"),
    [
        ({"concurrency_low": "64"}, "concurrency_high", "The highest concurrency (32) is below the lowest (64)."),
        ({"concurrency_high": ""}, "concurrency_high", "Give the lowest and highest concurrency, or a daily curve"),
        ({"concurrency_low": "0"}, "concurrency_low", "Ensure this value is greater than or equal to 1."),
        ({"daily_concurrency": "0-23: 8"}, "daily_concurrency", "Give a concurrency range or a daily curve, not both."),
        (
            {"concurrency_low": "", "concurrency_high": "", "daily_concurrency": "0-11: 4, 13-23: 16"},
            "daily_concurrency", "Every hour 0–23 needs a concurrency; missing: 12.",
        ),
        ({"category_mix": "chat: 0.5, code_edit: 0.4"}, "category_mix", "The shares sum to 0.9; they must sum to 1."),
        (
            {"category_mix": "chat: 0.5, legal: 0.5"}, "category_mix",
            "No prompt set has the category legal; known: billing, chat, code_edit, summarise.",
        ),
        ({"slo_tpot_ms": "0"}, "slo_tpot_ms", "An SLO is a time above 0 ms."),
        ({"worker_queue": "h100 pool"}, "worker_queue", "Enter a valid “slug”"),
    ],
)  # fmt: skip
def test_a_wrong_input_is_refused_saying_why(changes, field, error):
    form = _form(**changes)
    assert not form.is_valid()
    assert any(message.startswith(error) for message in form.errors[field]), form.errors
