"""Strict parsing of environment variables: a malformed value stops start-up with a clear message."""

import os

from django.core.exceptions import ImproperlyConfigured


def env_str(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None:
        raise ImproperlyConfigured(f"Set the environment variable {name}.")
    return value


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {raw!r}.") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {raw!r}.") from None


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    if raw.lower() in ("1", "true", "yes", "on"):
        return True
    if raw.lower() in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, got {raw!r}.")


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_seconds_by_name(name: str) -> dict[str, float]:
    """`queue=seconds,queue=seconds` (for example `h100=1800,a100=1800`); empty when unset."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return {}
    values = {}
    for item in raw.split(","):
        key, sep, number = item.partition("=")
        try:
            seconds = float(number)
        except ValueError:
            seconds = -1.0
        if not sep or not key.strip() or seconds <= 0:
            raise ImproperlyConfigured(
                f"{name} must read queue=seconds,queue=seconds with positive seconds, got {item.strip()!r}."
            )
        values[key.strip()] = seconds
    return values
