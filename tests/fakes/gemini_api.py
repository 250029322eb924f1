"""A fake Gemini API (``generativelanguage``) on 127.0.0.1, streamed or not.

Speaks the wire the Gemini CLI uses with ``GOOGLE_GEMINI_BASE_URL``:
``POST /v1beta/models/{model}:generateContent`` (one JSON ``GenerateContentResponse``) and
``:streamGenerateContent?alt=sse`` (``data:`` SSE frames, each a ``GenerateContentResponse``
with ``candidates[0].content.parts`` and, on the last, ``finishReason`` and
``usageMetadata``), ``:countTokens``, and error bodies
``{"error": {"code", "message", "status"}}``. The key comes as ``x-goog-api-key`` or ``?key=``.
``promptTokenCount`` counts every input token; ``cachedContentTokenCount`` is the cached part.

Script entries are those of :mod:`tests.fakes._http`; tool calls become ``functionCall`` parts.

    python -m tests.fakes.gemini_api --port 8125 --script script.json
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tests.fakes._http import FakeAPI, JsonReply, RecordedRequest, StreamReply, chunks_of, main_for, sse_frame, usage_of

__all__ = ["FakeGemini"]

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class FakeGemini(FakeAPI):
    """``models/{model}:generateContent`` and ``:streamGenerateContent``."""

    base_path = "/v1beta"

    def is_model_path(self, path: str) -> bool:
        return path.endswith(":generateContent") or path.endswith(":streamGenerateContent")

    def check_auth(self, request: RecordedRequest) -> JsonReply | None:
        if self.api_key is None:
            return None
        given = request.headers.get("x-goog-api-key") or (request.query.get("key") or [""])[0]
        if given != self.api_key:
            return self.error_reply(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.")
        return None

    def default_error_type(self, status: int) -> str:
        return _STATUS.get(status, "UNKNOWN")

    def error_reply(self, status: int, error_type: str, message: str) -> JsonReply:
        return JsonReply(status, {"error": {"code": status, "message": message, "status": error_type}})

    def models_reply(self, model_id: str) -> JsonReply:
        models = self.models or ["gemini-2.5-flash", "gemini-2.5-pro"]
        items = [{"name": f"models/{m}", "displayName": m} for m in models]
        return JsonReply(200, {"models": items})

    def other_route(self, request: RecordedRequest) -> tuple[JsonReply | StreamReply, float]:
        if request.method == "POST" and request.path.endswith(":countTokens"):
            return JsonReply(200, {"totalTokens": max(1, len(request.raw_body) // 4)}), 0.0
        return super().other_route(request)

    def _take(self, request: RecordedRequest) -> dict[str, Any] | None:
        # Script ``match.stream`` against the route, since Gemini puts no flag in the body.
        body = request.body if isinstance(request.body, dict) else {}
        streamed = request.path.endswith(":streamGenerateContent")
        if body.get("stream") is None and isinstance(request.body, dict):
            request.body["stream"] = streamed
        return super()._take(request)

    def answer(self, request: RecordedRequest, body: dict[str, Any], entry: dict[str, Any]) -> JsonReply | StreamReply:
        model = str(entry.get("model") or request.path.rsplit("/", 1)[-1].split(":", 1)[0])
        u = usage_of(entry)
        usage = {
            "promptTokenCount": u["input_tokens"],
            "candidatesTokenCount": u["output_tokens"],
            "totalTokenCount": u["input_tokens"] + u["output_tokens"],
        }
        if u["cache_read_tokens"]:
            usage["cachedContentTokenCount"] = u["cache_read_tokens"]
        calls = [
            {"functionCall": {"name": str(c["name"]), "args": dict(c.get("arguments") or {})}}
            for c in entry.get("tool_calls") or ()
        ]
        pieces = chunks_of(entry)
        response_id = self.next_id("resp-fake-")
        finish = str(entry.get("stop_reason") or "STOP")

        def response(parts: list[dict[str, Any]], last: bool) -> dict[str, Any]:
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
            if last:
                candidate["finishReason"] = finish
            out: dict[str, Any] = {"candidates": [candidate], "modelVersion": model, "responseId": response_id}
            if last:
                out["usageMetadata"] = usage
            return out

        if not request.path.endswith(":streamGenerateContent"):
            text_parts = [{"text": "".join(pieces)}] if pieces else []
            return JsonReply(200, response(text_parts + calls, True))
        frames: list[bytes] = []
        if entry.get("reasoning"):
            frames.append(sse_frame(response([{"text": str(entry["reasoning"]), "thought": True}], False)))
        for piece in pieces[:-1] if not calls else pieces:
            frames.append(sse_frame(response([{"text": piece}], False)))
        if calls:
            frames.append(sse_frame(response(calls, True)))
        else:
            last = pieces[-1] if pieces else ""
            frames.append(sse_frame(response([{"text": last}], True)))
        if "error_after" in entry:
            n = int(entry["error_after"])
            error = {
                "error": {"code": 500, "message": str(entry.get("message") or "Internal error"), "status": "INTERNAL"}
            }
            frames = [*frames[:n], sse_frame(error)]
        return StreamReply(
            frames=frames,
            chunk_delay=float(entry.get("chunk_delay", 0) or 0),
            cut_after=int(entry["cut_after"]) if "cut_after" in entry else None,
            cut=str(entry.get("cut", "abrupt")),
        )


def main(argv: Sequence[str] | None = None) -> int:
    return main_for(FakeGemini, argv)


if __name__ == "__main__":
    raise SystemExit(main())
