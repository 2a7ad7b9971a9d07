"""The rules for text a user gives, one copy for every door: the forms (experiments/definition/forms.py),
the API (through the forms), imported result files (experiments/imports/bench_files.py) and uploaded
prompt sets (experiments/prompts/uploads.py). Free of Django: each rule returns what is wrong
with the text, or None, and each door says it in its own words (a form error, a refused file).

- storable: what no column can store, U+0000 and lone surrogates (json_input.text_problem);
- no controls: invisible control and format characters (Unicode Cc, Cf, and Cs for a lone
  surrogate), such as bidi overrides and zero-width characters, which would make a name,
  label or category show something other than what it is;
- no markup: < and >, in the short texts the pages show as names (escaped on every page all
  the same).
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


def has_markup(text: str) -> bool:
    return "<" in text or ">" in text


def name_problem(text: str) -> str | None:
    """What a short name shown on the pages (a label, a category) must not contain, in words."""
    found = control_char(text)
    if found:
        return f"an invisible control character ({found})"
    return "< or >" if has_markup(text) else None


__all__ = ["LINE_BREAKS", "control_char", "has_markup", "name_problem", "text_problem"]
