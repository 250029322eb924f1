"""What a provider option's value must look like, checked when the provider is made.

A number given on the command line is checked before anything starts: ``nan``, ``inf``,
``abc`` or a negative count are usage errors (exit 2), not a failure minutes into a turn;
a URL that cannot be one is refused instead of being retried.
"""

from __future__ import annotations

import math
from typing import Literal
from urllib.parse import urlsplit

__all__ = ["OptionKind", "option_problem"]

OptionKind = Literal["text", "number", "positive_number", "count", "positive_count", "url"]


def option_problem(kind: OptionKind, value: str) -> str | None:
    """Why ``value`` does not fit ``kind``, or ``None`` when it does."""
    if kind == "text":
        return None
    if kind == "url":
        return _url_problem(value)
    if kind in ("count", "positive_count"):
        try:
            whole = int(value.strip())
        except ValueError:
            return "expected a whole number"
        least = 1 if kind == "positive_count" else 0
        return None if whole >= least else f"must be at least {least}"
    try:
        number = float(value)
    except ValueError:
        return "expected a number"
    if not math.isfinite(number):
        return "expected a finite number"
    if kind == "positive_number":
        return None if number > 0 else "must be more than 0"
    return None if number >= 0 else "must not be negative"


def _url_problem(value: str) -> str | None:
    try:
        parts = urlsplit(value.strip())
        parts.port  # noqa: B018 - reading it validates the port
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return "expected an http:// or https:// URL"
    if not parts.hostname:
        return "the URL names no host"
    return None
