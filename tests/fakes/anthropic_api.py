"""A fake Anthropic Messages API on 127.0.0.1, streamed or not.

Speaks the wire as Anthropic documents it: named SSE events ``message_start``,
``content_block_start`` / ``content_block_delta`` (``text_delta``, ``thinking_delta``,
``signature_delta``, ``input_json_delta``) / ``content_block_stop``, ``ping``,
``message_delta`` (stop reason, output tokens), ``message_stop``, and in-stream
``event: error``; error bodies ``{"type": "error", "error": {"type", "message"}}`` with
``529 overloaded_error`` and ``Retry-After`` on 429. ``input_tokens`` on the wire excludes
cached tokens (``cache_read_input_tokens`` and ``cache_creation_input_tokens`` are apart).

It tolerates what real clients send: ``?beta=true``, ``anthropic-beta`` headers, ``HEAD /``,
``GET /v1/models``, ``POST /v1/messages/count_tokens``; the key may come as ``x-api-key``
or ``Authorization: Bearer``.

    with FakeAnthropic(script=[{"text": "Hi"}]) as fake:
        client = anthropic.Anthropic(base_url=fake.root_url, api_key="sk-ant-test")

Note: the Anthropic SDK appends ``/v1/messages`` itself, so give it :attr:`root_url`;
:attr:`base_url` (with ``/v1``) is what seamline's ``base_url`` option also accepts.

    python -m tests.fakes.anthropic_api --port 8124 --script script.json
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tests.fakes._http import (
    FakeAPI,
    JsonReply,
    RecordedRequest,
    StreamReply,
    chunks_of,
    json_pieces,
    main_for,
    sse_frame,
    usage_of,
)

__all__ = ["FakeAnthropic"]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


class FakeAnthropic(FakeAPI):
    """The Messages API (``POST /v1/messages``)."""

    def is_model_path(self, path: str) -> bool:
        return path.endswith("/messages")

    def check_auth(self, request: RecordedRequest) -> JsonReply | None:
        if self.api_key is None:
            return None
        given = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix("Bearer ")
        if given != self.api_key:
            return self.error_reply(401, "authentication_error", "invalid x-api-key")
        return None

    def default_error_type(self, status: int) -> str:
        return _ERROR_TYPES.get(status, "api_error")

    def error_reply(self, status: int, error_type: str, message: str) -> JsonReply:
        body = {"type": "error", "error": {"type": error_type, "message": message}, "request_id": self.next_id("req_")}
        return JsonReply(status, body, headers={"request-id": body["request_id"]})

    def models_reply(self, model_id: str) -> JsonReply:
        models = self.models or ["claude-sonnet-4-6", "claude-haiku-4-5"]
        items = [{"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"} for m in models]
        if model_id:
            for item in items:
                if item["id"] == model_id:
                    return JsonReply(200, item)
            return self.error_reply(404, "not_found_error", f"model: {model_id}")
        return JsonReply(200, {"data": items, "has_more": False, "first_id": models[0], "last_id": models[-1]})

    def other_route(self, request: RecordedRequest) -> tuple[JsonReply | StreamReply, float]:
        if request.method == "POST" and request.path.endswith("/messages/count_tokens"):
            body = request.body if isinstance(request.body, dict) else {}
            return JsonReply(200, {"input_tokens": max(1, len(json.dumps(body.get("messages", []))) // 4)}), 0.0
        return super().other_route(request)

    def answer(self, request: RecordedRequest, body: dict[str, Any], entry: dict[str, Any]) -> JsonReply | StreamReply:
        mid = self.next_id("msg_fake")
        model = str(entry.get("model") or body.get("model") or "unknown")
        u = usage_of(entry)
        # Anthropic's input_tokens leave the cached tokens out; they are reported apart.
        wire_usage = {
            "input_tokens": max(u["input_tokens"] - u["cache_read_tokens"] - u["cache_write_tokens"], 0),
            "cache_creation_input_tokens": u["cache_write_tokens"],
            "cache_read_input_tokens": u["cache_read_tokens"],
            "output_tokens": u["output_tokens"],
        }
        calls = []
        for call in entry.get("tool_calls") or ():
            arguments = dict(call.get("arguments") or {})
            calls.append(
                {
                    "id": str(call.get("id") or self.next_id("toolu_fake")),
                    "name": str(call["name"]),
                    "input": arguments,
                    "pieces": json_pieces(arguments),
                }
            )
        content: list[dict[str, Any]] = []
        if entry.get("reasoning"):
            content.append({"type": "thinking", "thinking": str(entry["reasoning"]), "signature": "sig-fake-" + mid})
        text = "".join(chunks_of(entry))
        if text or not calls:
            content.append({"type": "text", "text": text})
        content += [{"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["input"]} for c in calls]
        stop = entry.get("stop_reason") or ("tool_use" if calls else "end_turn")
        message = {
            "id": mid,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": wire_usage,
        }
        if not body.get("stream"):
            return JsonReply(200, message, headers={"request-id": self.next_id("req_")})

        def ev(kind: str, **fields: Any) -> bytes:
            return sse_frame({"type": kind, **fields}, event=kind)

        start_usage = {**wire_usage, "output_tokens": 1}
        frames = [
            ev("message_start", message={**message, "content": [], "stop_reason": None, "usage": start_usage}),
        ]
        for index, block in enumerate(content):
            if block["type"] == "thinking":
                frames.append(
                    ev("content_block_start", index=index, content_block={**block, "thinking": "", "signature": ""})
                )
                frames += [
                    ev("content_block_delta", index=index, delta={"type": "thinking_delta", "thinking": piece})
                    for piece in chunks_of({"text": block["thinking"]})
                ]
                frames.append(
                    ev(
                        "content_block_delta",
                        index=index,
                        delta={"type": "signature_delta", "signature": block["signature"]},
                    )
                )
            elif block["type"] == "text":
                frames.append(ev("content_block_start", index=index, content_block={"type": "text", "text": ""}))
                if index == 0:
                    frames.append(ev("ping"))
                frames += [
                    ev("content_block_delta", index=index, delta={"type": "text_delta", "text": piece})
                    for piece in chunks_of(entry)
                ]
            else:
                call = next(c for c in calls if c["id"] == block["id"])
                frames.append(ev("content_block_start", index=index, content_block={**block, "input": {}}))
                frames += [
                    ev("content_block_delta", index=index, delta={"type": "input_json_delta", "partial_json": piece})
                    for piece in ["", *call["pieces"]]
                ]
            frames.append(ev("content_block_stop", index=index))
        frames.append(
            ev(
                "message_delta",
                delta={"stop_reason": stop, "stop_sequence": None},
                usage={"output_tokens": u["output_tokens"]},
            )
        )
        frames.append(ev("message_stop"))
        if "error_after" in entry:
            n = int(entry["error_after"])
            error = {
                "type": str(entry.get("error_type") or "overloaded_error"),
                "message": str(entry.get("message") or "Overloaded"),
            }
            frames = [*frames[:n], ev("error", error=error)]
        return StreamReply(
            frames=frames,
            chunk_delay=float(entry.get("chunk_delay", 0) or 0),
            cut_after=int(entry["cut_after"]) if "cut_after" in entry else None,
            cut=str(entry.get("cut", "abrupt")),
            headers={"request-id": self.next_id("req_")},
        )


def main(argv: Sequence[str] | None = None) -> int:
    return main_for(FakeAnthropic, argv)


if __name__ == "__main__":
    raise SystemExit(main())
