"""Retry policy and failure classification shared by the model-API providers.

The vendors' SDKs retry on their own; seamline turns that off (``max_retries=0``) so that
every retry is ours, bounded, jittered, honours ``Retry-After`` and shows up as an
``error`` event with ``retryable=True`` and its attempt number.

A failure is retried only while nothing of the answer has been streamed yet: once text or
a tool call reached the loop, trying again would repeat it, so the step fails with the
classified error and what was streamed stays recorded.
"""

from __future__ import annotations

import email.utils
import random
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from seamline.errors import (
    AuthFailure,
    InvalidRequest,
    ProviderFailure,
    QuotaExceeded,
    SeamlineError,
    TimeoutFailure,
    TransportFailure,
)
from seamline.redact import redact_urls

__all__ = ["RetryPolicy", "classify_failure", "retry_after_seconds", "scrub", "stream_failure"]

# Key shapes the vendors use; anything that looks like one is masked in messages.
_KEY_PATTERN: Final = re.compile(r"(sk-(?:ant-|proj-)?)[A-Za-z0-9_\-*]{4,}")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to wait before trying a failed model call again.

    ``max_retries`` retries after the first attempt; the wait before retry *n* is
    ``base_delay * 2**(n-1)`` capped at ``max_delay``, then scaled by a random factor in
    [0.5, 1] so that many clients do not retry in step. A ``Retry-After`` from the
    server replaces that wait; one longer than ``max_retry_after`` is not waited for.
    """

    max_retries: int = 3
    base_delay: float = 0.5
    max_delay: float = 30.0
    max_retry_after: float = 60.0

    def delay(self, attempt: int, failure: SeamlineError) -> float | None:
        """Seconds to wait before the next try after ``attempt`` failed, or ``None`` to give up."""
        if not failure.retryable or attempt > self.max_retries:
            return None
        retry_after: float | None = getattr(failure, "retry_after", None)
        if retry_after is not None:
            return float(retry_after) if retry_after <= self.max_retry_after else None
        backoff = min(self.max_delay, self.base_delay * (2.0 ** (attempt - 1)))
        return backoff * random.uniform(0.5, 1.0)


def scrub(text: str, secret: str | None) -> str:
    """``text`` without ``secret`` and without anything shaped like an API key."""
    if secret and len(secret) >= 8:  # a shorter "secret" would mask ordinary words
        text = text.replace(secret, "***")
    return _KEY_PATTERN.sub(r"\1***", redact_urls(text))


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """The wait a response asks for: ``retry-after-ms``, ``Retry-After`` seconds or HTTP date."""
    if not headers:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):  # neither seconds nor a date: no wait asked for
        return None
    return max(parsed.timestamp() - time.time(), 0.0)


def _body_error(body: object) -> tuple[str, str]:
    """(type or code, message) from a vendor error body, whichever shape it has."""
    if isinstance(body, Mapping):
        inner: Any = body.get("error", body)
        if isinstance(inner, Mapping):
            kind = str(inner.get("type") or inner.get("code") or "")
            code = str(inner.get("code") or "")
            message = str(inner.get("message") or "")
            return (code if code in ("insufficient_quota",) else kind), message
        if isinstance(inner, str):
            return "", inner
    return "", ""


def classify_failure(exc: BaseException, *, vendor: str, secret: str | None) -> SeamlineError:
    """Map an SDK or transport exception to a classified seamline error (key scrubbed).

    Works by duck typing over both SDKs (``status_code``, ``body``, ``response``) and the
    HTTP client underneath them, so neither SDK is imported here.
    """
    if isinstance(exc, SeamlineError):
        return exc
    name = type(exc).__name__
    names = {cls.__name__ for cls in type(exc).__mro__}
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    err_type, detail = _body_error(body)
    if not detail:
        detail = str(exc) or name
    detail = scrub(detail, secret)[:500]
    if "APITimeoutError" in names or "TimeoutException" in names or isinstance(exc, TimeoutError):
        return TimeoutFailure(f"{vendor} API timed out: {scrub(str(exc) or name, secret)}")
    if isinstance(status, int) and "APIStatusError" in names:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
        prefix = f"{vendor} API {status}" if status != 200 else f"{vendor} API error in the stream"
        message = f"{prefix} {err_type}: {detail}" if err_type else f"{prefix}: {detail}"
        if status in (401, 403) or err_type in ("authentication_error", "permission_error", "invalid_api_key"):
            return AuthFailure(message)
        if status == 429 or err_type in ("rate_limit_error", "rate_limit_exceeded"):
            if err_type == "insufficient_quota":  # out of credit: waiting does not help
                return QuotaExceeded(message, retryable=False)
            return QuotaExceeded(message, retry_after=retry_after_seconds(headers))
        if status == 408:
            return TimeoutFailure(message)
        if status >= 500 or err_type in ("overloaded_error", "api_error", "server_error"):
            return ProviderFailure(message, retryable=True)
        if 400 <= status < 500:
            return InvalidRequest(message)
        return ProviderFailure(message, retryable=status == 200)
    if "APIConnectionError" in names or "TransportError" in names or isinstance(exc, ConnectionError | OSError):
        cause = exc.__cause__ or exc.__context__
        why = f"{type(cause).__name__}: {cause}" if cause is not None else detail
        return TransportFailure(f"{vendor} API unreachable or connection broken: {scrub(why, secret)[:300]}")
    if "APIError" in names:
        return ProviderFailure(f"{vendor} API error: {detail}", retryable=err_type in ("server_error", "api_error"))
    return ProviderFailure(f"{vendor} provider failed: {name}: {detail}")


def stream_failure(vendor: str, error_type: str | None, message: str | None, *, secret: str | None) -> SeamlineError:
    """Classify an error the server sent inside a stream (after a 200)."""
    kind = (error_type or "").lower()
    text = f"{vendor} API error in the stream {kind or 'unknown'}: {scrub(message or '', secret)[:500]}"
    if kind in ("rate_limit_error", "rate_limit_exceeded"):
        return QuotaExceeded(text)
    if kind == "insufficient_quota":
        return QuotaExceeded(text, retryable=False)
    if kind in ("authentication_error", "permission_error", "invalid_api_key"):
        return AuthFailure(text)
    if kind in ("invalid_request_error", "invalid_prompt", "context_length_exceeded"):
        return InvalidRequest(text)
    if kind in ("timeout", "request_timeout"):
        return TimeoutFailure(text)
    return ProviderFailure(
        text, retryable=kind in ("overloaded_error", "api_error", "server_error", "server_is_overloaded")
    )
