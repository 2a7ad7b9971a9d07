"""The notation of a service's daily curve and category mix: read, refused with a sentence
that says what is wrong, and written back as read."""

import pytest

from experiments.rules import service_load


def test_a_curve_of_hour_ranges_is_24_hourly_concurrencies():
    curve = service_load.read_daily_curve("0-7: 2, 8-17: 24\n18: 12, 19 - 23 : 6")
    assert curve == [2] * 8 + [24] * 10 + [12] + [6] * 5
    assert service_load.daily_curve_text(curve) == "0-7: 2, 8-17: 24, 18: 12, 19-23: 6"
    assert service_load.read_daily_curve(service_load.daily_curve_text(curve)) == curve


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "Give the daily curve, e.g. 0-7: 2"),
        ("0-23 4", "“0-23 4” is not “key: value”"),
        ("0-11: 4, 11-23: 8", "Hour 11 is given twice."),
        ("0-11: 4, 13-23: 8", "missing: 12."),
        ("22-5: 4, 6-21: 8", "a range does not wrap past midnight; write 22-23 and 0-5"),
        ("0-24: 4", "hours run from 0 to 23"),
        ("morning: 4", "“morning” is not an hour"),
        ("0-23: 0", "the concurrency is a whole number from 1"),
        ("0-23: 2.5", "not “2.5”"),
    ],
)
def test_a_bad_curve_is_refused_saying_why(text, error):
    with pytest.raises(ValueError, match=error):
        service_load.read_daily_curve(text)


def test_a_mix_is_shares_summing_to_one():
    assert service_load.read_category_mix("chat: 0.33, code_edit: 0.33\nsummarise: 0.34") == {
        "chat": 0.33, "code_edit": 0.33, "summarise": 0.34,
    }  # fmt: skip
    assert service_load.category_mix_text({"chat": 0.6, "code_edit": 0.4}) == "chat: 0.6, code_edit: 0.4"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("chat: 0.6, code_edit: 0.3", "The shares sum to 0.9; they must sum to 1."),
        ("chat: 0.6, chat: 0.4", "chat is given twice."),
        ("chat: 60%, code: 40%", "the share is a number such as 0.25, not “60%”"),
        ("chat: 1.5, code: -0.5", "a share lies above 0 and at most 1"),
        ("chat", "is not “key: value”"),
    ],
)
def test_a_bad_mix_is_refused_saying_why(text, error):
    with pytest.raises(ValueError, match=error):
        service_load.read_category_mix(text)
