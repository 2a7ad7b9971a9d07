"""JSON from users' files, read by the rules both upload readers share (prompt sets in
experiments/prompt_uploads.py, benchmark result files in experiments/bench_files.py).
Free of Django."""

import json


def _refuse_constant(constant: str):
    raise json.JSONDecodeError(f"{constant} is not a number JSON allows", constant, 0)


def loads(text: str):
    """json.loads without NaN and Infinity, which are not JSON and which PostgreSQL's jsonb refuses.
    Raises json.JSONDecodeError, or ValueError (e.g. an integer of more than 4,300 digits)."""
    return json.loads(text, parse_constant=_refuse_constant)


def has_nul(value) -> bool:
    """Whether a string in a decoded JSON value (a key or a value, at any depth) holds U+0000:
    valid JSON ("\\u0000"), but PostgreSQL stores it in neither text nor jsonb."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
    return False
