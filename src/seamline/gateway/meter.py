"""Usage from the wire: what one model response says it spent, in the vendor's own words.

A :class:`UsageMeter` is fed a response body as it passes through the gateway (SSE or
JSON) and gives one :class:`~seamline.events.Usage` for it, unpriced (the session's settler
prices it, as for every provider): Anthropic's ``message_start`` / ``message_delta`` usage,
OpenAI Responses' ``response.completed``, Chat Completions' ``usage`` (its last chunk when
streamed), Gemini's ``usageMetadata`` (the last one of a stream carries the totals).

Counts follow seamline's convention: ``input_tokens`` counts every input token, cached ones
included. Anthropic reports cached tokens apart from ``input_tokens``; the others include
them.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal

from seamline.events import Usage
from seamline.transport.sse import SseParser

__all__ = ["JSON_LIMIT", "UsageMeter", "Vendor", "usage_of_body"]

Vendor = Literal["anthropic", "openai", "gemini"]

JSON_LIMIT: Final = 16 * 1024 * 1024
"""A JSON answer longer than this is relayed but not read for usage."""


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def usage_of_body(vendor: Vendor, body: dict[str, Any]) -> tuple[dict[str, int], str | None] | None:
    """The counts and the model one JSON object of ``vendor`` carries, if it carries any."""
    if vendor == "anthropic":
        message = _dict(body.get("message")) if body.get("type") == "message_start" else body
        usage = _dict(message.get("usage") or body.get("usage"))
        if not usage:
            return None
        cache_read = _int(usage.get("cache_read_input_tokens"))
        cache_write = _int(usage.get("cache_creation_input_tokens"))
        counts = {"output_tokens": _int(usage.get("output_tokens"))}
        if "input_tokens" in usage or cache_read or cache_write:  # message_delta carries output only
            counts |= {
                "input_tokens": _int(usage.get("input_tokens")) + cache_read + cache_write,
                "cache_read_tokens": cache_read,
                "cache_write_tokens": cache_write,
            }
        model = message.get("model")
        return counts, model if isinstance(model, str) else None
    if vendor == "openai":
        response = _dict(body.get("response")) if "response" in body else body
        usage = _dict(response.get("usage"))
        if not usage:
            return None
        if "input_tokens" in usage:  # Responses
            cached = _int(_dict(usage.get("input_tokens_details")).get("cached_tokens"))
            counts = {"input_tokens": _int(usage["input_tokens"]), "output_tokens": _int(usage.get("output_tokens"))}
        else:  # Chat Completions
            cached = _int(_dict(usage.get("prompt_tokens_details")).get("cached_tokens"))
            counts = {
                "input_tokens": _int(usage.get("prompt_tokens")),
                "output_tokens": _int(usage.get("completion_tokens")),
            }
        model = response.get("model")
        return counts | {"cache_read_tokens": cached}, model if isinstance(model, str) else None
    usage = _dict(body.get("usageMetadata"))
    if not usage:
        return None
    counts = {
        "input_tokens": _int(usage.get("promptTokenCount")),
        "output_tokens": _int(usage.get("candidatesTokenCount")) + _int(usage.get("thoughtsTokenCount")),
        "cache_read_tokens": _int(usage.get("cachedContentTokenCount")),
    }
    model = body.get("modelVersion")
    return counts, model if isinstance(model, str) else None


class UsageMeter:
    """Reads one response body for its usage; feed it every payload byte, then ask."""

    __slots__ = ("_counts", "_json", "_json_size", "_model", "_sse", "vendor")

    def __init__(self, vendor: Vendor, content_type: str | None) -> None:
        self.vendor: Vendor = vendor
        self._sse = SseParser() if "text/event-stream" in (content_type or "").lower() else None
        self._json: list[bytes] | None = None if self._sse is not None else []
        self._json_size = 0
        self._counts: dict[str, int] = {}
        self._model: str | None = None

    def feed(self, data: bytes) -> None:
        if self._sse is not None:
            for event in self._sse.feed(data):
                self._take_text(event.data)
        elif self._json is not None:
            self._json_size += len(data)
            if self._json_size > JSON_LIMIT:
                self._json = None
            else:
                self._json.append(data)

    def _take_text(self, text: str) -> None:
        try:
            body = json.loads(text)
        except ValueError:
            return
        if isinstance(body, dict):
            self._take(body)
        elif isinstance(body, list):  # Gemini without alt=sse answers a JSON array
            for item in body:
                if isinstance(item, dict):
                    self._take(item)

    def _take(self, body: dict[str, Any]) -> None:
        found = usage_of_body(self.vendor, body)
        if found is None:
            return
        counts, model = found
        self._counts.update(counts)  # later figures of a stream are the running totals
        self._model = model or self._model

    def usage(self, usage_id: str | None = None, *, model: str | None = None) -> Usage | None:
        """The response's usage (unpriced), or ``None`` when it reported none."""
        if self._json:
            self._take_text(b"".join(self._json).decode("utf-8", "replace"))
            self._json = []
        if not self._counts:
            return None
        c = self._counts
        return Usage(
            input_tokens=c.get("input_tokens", 0),
            output_tokens=c.get("output_tokens", 0),
            cache_read_tokens=c.get("cache_read_tokens", 0),
            cache_write_tokens=c.get("cache_write_tokens", 0),
            model=self._model or model,
            usage_id=usage_id,
        )
