"""The rules for text a user gives, one copy for every door: the forms (experiments/definition/forms/),
the API (through the forms), imported result files (experiments/imports/bench_files.py) and uploaded
prompt sets (experiments/prompts/uploads.py). Free of Django: each rule returns what is wrong
with the text, or None, and each door says it in its own words (a form error, a refused file).

- storable: what no column can store, U+0000 and lone surrogates (json_input.text_problem);
- no controls: invisible control and format characters (Unicode Cc, Cf, and Cs for a lone
  surrogate), such as bidi overrides and zero-width characters, which would make a name,
  label or category show something other than what it is;
- no markup: < and >, in the short texts the pages show as names (escaped on every page all
  the same);
- in prose (a prompt, a chat message): no bidi controls and no control characters but line
  breaks and tabs; joiners and direction marks stay, as real text in many scripts needs them.
"""

import unicodedata

from experiments.rules.json_input import text_problem

LINE_BREAKS = "\n\r\t"
CONTROL_CATEGORIES = ("Cc", "Cf", "Cs")


def control_char(text: str, allowed: str = "") -> str | None:
    """The first invisible control or format character in `text` that `allowed` does not
    name, as "U+202E RIGHT-TO-LEFT OVERRIDE"; None when there is none."""
    for char in text:
        category = unicodedata.category(char)
        if char not in allowed and category in CONTROL_CATEGORIES:
            fallback = "lone surrogate" if category == "Cs" else "control character"
            return f"U+{ord(char):04X} {unicodedata.name(char, fallback)}"
    return None


# The explicit direction embeddings, overrides and isolates (Unicode's bidi controls, UAX #9):
# they make text show in an order other than the one it is read in ("Trojan Source").
BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def prose_control_char(text: str) -> str | None:
    """In long text (a prompt, a message): the first bidi control or control character other
    than a line break or a tab, named; None when there is none. Other format characters stay:
    joiners belong to emoji and to scripts such as Persian, and marks to right-to-left text."""
    for char in text:
        if char in BIDI_CONTROLS or (unicodedata.category(char) == "Cc" and char not in LINE_BREAKS):
            return f"U+{ord(char):04X} {unicodedata.name(char, 'control character')}"
    return None


def excerpt(text: str, limit: int = 24) -> str:
    """A value quoted back in a message, cut to `limit` characters: a refusal names what it
    refused without echoing a megabyte of it."""
    return text if len(text) <= limit else f"{text[: limit - 1]}… ({len(text):,} characters)"


def has_markup(text: str) -> bool:
    return "<" in text or ">" in text


def name_problem(text: str) -> str | None:
    """What a short name shown on the pages (a label, a category) must not contain, in words."""
    found = control_char(text)
    if found:
        return f"an invisible control character ({found})"
    return "< or >" if has_markup(text) else None


__all__ = [
    "BIDI_CONTROLS",
    "LINE_BREAKS",
    "control_char",
    "excerpt",
    "has_markup",
    "name_problem",
    "prose_control_char",
    "text_problem",
]
