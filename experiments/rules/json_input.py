"""JSON from users, read by one set of rules at every door: benchmark result files
(experiments/imports/bench_files.py), prompt sets (experiments/prompts/uploads.py), a speculative
config inside an imported file (experiments/imports/services.py) and the API's request bodies
(experiments/api/parsers.py). Free of Django.

Refused before or while parsing, with a JSONDecodeError that says where:
- nesting deeper than MAX_DEPTH (Python's parser recurses, and 100,000 brackets would end in
  a RecursionError);
- NaN and Infinity, which are not JSON and which PostgreSQL's jsonb refuses.
After parsing, `problem` names what no column can store: U+0000 and lone surrogates.
"""

import json
import re
from collections.abc import Iterator
from typing import Any, NoReturn

MAX_DEPTH = 64
# A JSON string literal, escapes included: removed before counting brackets, which do not nest there.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


class _Constant(ValueError):
    """NaN or Infinity met by the parser, which does not say where."""


def _refuse_constant(constant: str) -> NoReturn:
    raise _Constant(constant)


def _outside_strings(text: str) -> str:
    """`text` with every string literal blanked out, so that offsets stay where they were."""
    return _STRING.sub(lambda match: " " * len(match.group()), text)


def too_deep_at(text: str, limit: int = MAX_DEPTH) -> int | None:
    """The offset where arrays and objects in `text` first nest deeper than `limit`, or None;
    brackets inside strings do not count. Malformed text is left to the parser."""
    depth = 0
    for match in _BRACKET.finditer(_outside_strings(text)):
        depth += 1 if match.group() in "[{" else -1
        if depth > limit:
            return match.start()
    return None


def loads(text: str) -> Any:
    """json.loads after refusing nesting deeper than MAX_DEPTH, and without NaN and Infinity.
    Raises json.JSONDecodeError, or ValueError (e.g. an integer of more than 4,300 digits)."""
    where = too_deep_at(text)
    if where is not None:
        raise json.JSONDecodeError(f"nested deeper than {MAX_DEPTH} arrays or objects", text, where)
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except _Constant as constant:
        at = _outside_strings(text).find(str(constant))
        raise json.JSONDecodeError(f"{constant} is not a number JSON allows", text, max(at, 0)) from None


def _strings(value: object) -> Iterator[str]:
    """Every string in a decoded JSON value, keys included, at any depth."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())


def text_problem(text: str) -> str | None:
    """What in a text no column can store, or None: U+0000 (valid JSON as "\\u0000", stored
    by PostgreSQL in neither text nor jsonb) and a lone surrogate (half of a UTF-16 pair,
    which has no UTF-8 form)."""
    if "\x00" in text:
        return "a NUL character (\\u0000)"
    surrogate = next((char for char in text if "\ud800" <= char <= "\udfff"), None)
    if surrogate is not None:
        return f"a lone surrogate (\\u{ord(surrogate):04x}, half of a UTF-16 pair)"
    return None


def problem(value: object) -> str | None:
    """text_problem of the first string in a decoded JSON value that has one, or None."""
    return next(filter(None, map(text_problem, _strings(value))), None)
