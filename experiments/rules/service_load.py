"""What a team types about a service's load (experiments/service_profiles/forms.py): its daily
concurrency curve and its mix of prompt categories. Free of Django: each reader returns the
normalised value or raises ValueError with a sentence the form shows as it is.

A daily curve is written as hours and the concurrency expected in them, e.g.
"0-7: 2, 8-17: 24, 18-23: 6": a service's day is flat over stretches, so naming the stretches
is shorter to type and easier to check than 24 numbers, and a missing or doubled hour can be
named in the error. Every hour 0–23 appears exactly once; ranges do not wrap past midnight.

A category mix is written as "chat: 0.6, code_edit: 0.4": the share of the service's requests
in each category, summing to 1.
"""

import re

HOURS = 24
MAX_CONCURRENCY = 1_000_000
# Shares typed to two or three decimals (0.33, 0.33, 0.34) still sum to 1 within this.
SHARE_TOLERANCE = 0.001
_ITEM = re.compile(r"^(?P<key>[^:]+):(?P<value>[^:]+)$")
_HOURS = re.compile(r"^(?P<first>\d{1,2})(?:\s*-\s*(?P<last>\d{1,2}))?$")


def _items(text: str, what: str, example: str) -> list[tuple[str, str]]:
    """The "key: value" items of `text`, parted by commas or line breaks."""
    parts = [part.strip() for part in re.split(r"[,\n]", text) if part.strip()]
    if not parts:
        raise ValueError(f"Give the {what}, e.g. {example}.")
    items = []
    for part in parts:
        match = _ITEM.match(part)
        if match is None:
            raise ValueError(f"“{part}” is not “key: value”; write the {what} as {example}.")
        items.append((match["key"].strip(), match["value"].strip()))
    return items


def _hours(text: str) -> range:
    match = _HOURS.match(text)
    if match is None:
        raise ValueError(f"“{text}” is not an hour (0–23) or a range of hours such as 8-17.")
    first, last = int(match["first"]), int(match["last"] or match["first"])
    if last >= HOURS:
        raise ValueError(f"“{text}”: hours run from 0 to 23.")
    if last < first:
        raise ValueError(f"“{text}”: a range does not wrap past midnight; write {first}-23 and 0-{last}.")
    return range(first, last + 1)


def _concurrency(text: str, hours: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_CONCURRENCY:
        raise ValueError(
            f"Hours {hours}: the concurrency is a whole number from 1 to {MAX_CONCURRENCY:,}, not “{text}”."
        )
    return int(text)


def read_daily_curve(text: str) -> list[int]:
    """The expected concurrency of each hour 0–23, from "0-7: 2, 8-17: 24, 18-23: 6"."""
    curve: list[int | None] = [None] * HOURS
    for hours, value in _items(text, "daily curve", "0-7: 2, 8-17: 24, 18-23: 6"):
        concurrency = _concurrency(value, hours)
        for hour in _hours(hours):
            if curve[hour] is not None:
                raise ValueError(f"Hour {hour} is given twice.")
            curve[hour] = concurrency
    missing = [hour for hour, value in enumerate(curve) if value is None]
    if missing:
        raise ValueError(f"Every hour 0–23 needs a concurrency; missing: {', '.join(map(str, missing))}.")
    return [value for value in curve if value is not None]


def daily_curve_text(curve: list[int]) -> str:
    """The curve as read_daily_curve reads it, with neighbouring hours of one value joined."""
    items, start = [], 0
    for hour in range(1, len(curve) + 1):
        if hour == len(curve) or curve[hour] != curve[start]:
            hours = f"{start}" if hour - 1 == start else f"{start}-{hour - 1}"
            items.append(f"{hours}: {curve[start]}")
            start = hour
    return ", ".join(items)


def _share(text: str, category: str) -> float:
    try:
        share = float(text)
    except ValueError:
        raise ValueError(f"{category}: the share is a number such as 0.25, not “{text}”.") from None
    if not 0 < share <= 1:
        raise ValueError(f"{category}: a share lies above 0 and at most 1, not {text}.")
    return share


def read_category_mix(text: str) -> dict[str, float]:
    """{category: share} from "chat: 0.6, code_edit: 0.4"; the shares sum to 1."""
    mix: dict[str, float] = {}
    for category, value in _items(text, "category mix", "chat: 0.6, code_edit: 0.4"):
        if category in mix:
            raise ValueError(f"{category} is given twice.")
        mix[category] = _share(value, category)
    total = sum(mix.values())
    if abs(total - 1) > SHARE_TOLERANCE:
        raise ValueError(f"The shares sum to {total:.3g}; they must sum to 1.")
    return mix


def category_mix_text(mix: dict[str, float]) -> str:
    return ", ".join(f"{category}: {share:g}" for category, share in mix.items())
