"""A fake OpenAI-compatible API on 127.0.0.1: Chat Completions and Responses, streamed or not.

Speaks the wire as OpenAI documents it: ``data:``-only SSE chunks ending in ``data: [DONE]``
for Chat Completions (tool calls chunked by ``index``, the usage chunk with empty
``choices`` when ``stream_options.include_usage`` is set), named SSE events
(``response.created`` … ``response.completed``, each with ``sequence_number``) for
Responses, and ``{"error": {"message", "type", "param", "code"}}`` error bodies.

    with FakeOpenAI(script=[{"text": "Hello!", "usage": {"input_tokens": 12, "output_tokens": 3}}]) as fake:
        client = openai.OpenAI(base_url=fake.base_url, api_key="sk-test")
        ...
        fake.requests[-1].body   # what the client sent

    python -m tests.fakes.openai_api --port 8123 --script script.json

See :mod:`tests.fakes._http` for the script entry keys.
"""

from __future__ import annotations

import json
import time
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

__all__ = ["FakeOpenAI"]

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_denied",
    404: "not_found_error",
    429: "rate_limit_exceeded",
    500: "server_error",
    502: "server_error",
    503: "server_error",
    529: "server_error",
}
_ERROR_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}


class FakeOpenAI(FakeAPI):
    """Chat Completions (``POST /v1/chat/completions``) and Responses (``POST /v1/responses``)."""

    def is_model_path(self, path: str) -> bool:
        return path.endswith("/chat/completions") or path.endswith("/responses")

    def check_auth(self, request: RecordedRequest) -> JsonReply | None:
        if self.api_key is None:
            return None
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            # The real API echoes a masked key; the fake never echoes it at all.
            return self.error_reply(401, "invalid_request_error", "Incorrect API key provided.")
        return None

    def default_error_type(self, status: int) -> str:
        return _ERROR_TYPES.get(status, "server_error")

    def error_reply(self, status: int, error_type: str, message: str) -> JsonReply:
        body = {"error": {"message": message, "type": error_type, "param": None, "code": _ERROR_CODES.get(status)}}
        return JsonReply(status, body)

    def models_reply(self, model_id: str) -> JsonReply:
        models = self.models or ["gpt-4o", "gpt-4o-mini"]
        items = [{"id": m, "object": "model", "created": 1700000000, "owned_by": "fake"} for m in models]
        if model_id:
            for item in items:
                if item["id"] == model_id:
                    return JsonReply(200, item)
            return self.error_reply(404, "invalid_request_error", f"The model '{model_id}' does not exist")
        return JsonReply(200, {"object": "list", "data": items})

    def answer(self, request: RecordedRequest, body: dict[str, Any], entry: dict[str, Any]) -> JsonReply | StreamReply:
        if request.path.endswith("/responses"):
            return self._responses(body, entry)
        return self._chat(body, entry)

    # -- Chat Completions --------------------------------------------------------------
    def _chat(self, body: dict[str, Any], entry: dict[str, Any]) -> JsonReply | StreamReply:
        cid = self.next_id("chatcmpl-fake")
        model = str(entry.get("model") or body.get("model") or "unknown")
        created = int(time.time())
        calls = _calls(self, entry, "call_")
        finish = entry.get("stop_reason") or ("tool_calls" if calls else "stop")
        u = usage_of(entry)
        usage = {
            "prompt_tokens": u["input_tokens"],
            "completion_tokens": u["output_tokens"],
            "total_tokens": u["input_tokens"] + u["output_tokens"],
            "prompt_tokens_details": {
                "cached_tokens": u["cache_read_tokens"],
                "audio_tokens": 0,
                **({"cache_write_tokens": u["cache_write_tokens"]} if u["cache_write_tokens"] else {}),
            },
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        }
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": entry.get("text"), "refusal": None}
            if entry.get("reasoning"):
                message["reasoning_content"] = entry["reasoning"]
            if calls:
                message["tool_calls"] = [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["json"]}}
                    for c in calls
                ]
            return JsonReply(
                200,
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "system_fingerprint": "fp_fake",
                    "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                    "usage": usage,
                },
            )

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            return sse_frame(
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "system_fingerprint": "fp_fake",
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
                }
            )

        frames = [chunk({"role": "assistant", "content": "", "refusal": None})]
        if entry.get("reasoning"):
            # vLLM, DeepSeek and llama.cpp stream reasoning as ``reasoning_content``.
            frames += [chunk({"reasoning_content": piece}) for piece in chunks_of({"text": entry["reasoning"]})]
        frames += [chunk({"content": piece}) for piece in chunks_of(entry)]
        for index, call in enumerate(calls):
            first = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": ""},
            }
            frames.append(chunk({"tool_calls": [first]}))
            frames += [
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}) for piece in call["pieces"]
            ]
        frames.append(chunk({}, finish))
        options = body.get("stream_options") or {}
        if options.get("include_usage"):
            frames.append(
                sse_frame(
                    {
                        "id": cid,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": model,
                        "system_fingerprint": "fp_fake",
                        "choices": [],
                        "usage": usage,
                    }
                )
            )
        frames.append(sse_frame("[DONE]"))
        return _stream(frames, entry, error=lambda e: sse_frame({"error": e}), error_event=None)

    # -- Responses ---------------------------------------------------------------------
    def _responses(self, body: dict[str, Any], entry: dict[str, Any]) -> JsonReply | StreamReply:
        rid = self.next_id("resp_fake")
        model = str(entry.get("model") or body.get("model") or "unknown")
        created = int(time.time())
        calls = _calls(self, entry, "call_")
        u = usage_of(entry)
        usage = {
            "input_tokens": u["input_tokens"],
            "input_tokens_details": {"cached_tokens": u["cache_read_tokens"]},
            "output_tokens": u["output_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u["input_tokens"] + u["output_tokens"],
        }
        output: list[dict[str, Any]] = []
        if entry.get("reasoning"):
            output.append(
                {
                    "type": "reasoning",
                    "id": self.next_id("rs_fake"),
                    "summary": [{"type": "summary_text", "text": str(entry["reasoning"])}],
                    **(
                        {"encrypted_content": "enc-fake-" + rid}
                        if "reasoning.encrypted_content" in (body.get("include") or ())
                        else {}
                    ),
                }
            )
        text = "".join(chunks_of(entry))
        if text or not calls:
            output.append(
                {
                    "type": "message",
                    "id": self.next_id("msg_fake"),
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
                }
            )
        for call in calls:
            output.append(
                {
                    "type": "function_call",
                    "id": self.next_id("fc_fake"),
                    "call_id": call["id"],
                    "name": call["name"],
                    "arguments": call["json"],
                    "status": "completed",
                }
            )

        def response(status: str, items: list[dict[str, Any]], with_usage: bool) -> dict[str, Any]:
            return {
                "id": rid,
                "object": "response",
                "created_at": created,
                "status": status,
                "error": None,
                "incomplete_details": None,
                "instructions": body.get("instructions"),
                "model": model,
                "output": items,
                "parallel_tool_calls": True,
                "tool_choice": body.get("tool_choice", "auto"),
                "tools": body.get("tools", []),
                "temperature": body.get("temperature"),
                "top_p": None,
                "max_output_tokens": body.get("max_output_tokens"),
                "previous_response_id": body.get("previous_response_id"),
                "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
                "text": {"format": {"type": "text"}},
                "truncation": "disabled",
                "usage": usage if with_usage else None,
                "metadata": {},
            }

        if not body.get("stream"):
            return JsonReply(200, response("completed", output, True))
        seq = iter(range(1_000_000))

        def ev(kind: str, **fields: Any) -> bytes:
            return sse_frame({"type": kind, "sequence_number": next(seq), **fields}, event=kind)

        frames = [
            ev("response.created", response=response("in_progress", [], False)),
            ev("response.in_progress", response=response("in_progress", [], False)),
        ]
        for index, item in enumerate(output):
            if item["type"] == "reasoning":
                summary = item["summary"][0]["text"]
                frames.append(ev("response.output_item.added", output_index=index, item={**item, "summary": []}))
                part = {"type": "summary_text", "text": ""}
                ids = {"item_id": item["id"], "output_index": index, "summary_index": 0}
                frames.append(ev("response.reasoning_summary_part.added", **ids, part=part))
                frames += [
                    ev("response.reasoning_summary_text.delta", **ids, delta=piece)
                    for piece in chunks_of({"text": summary})
                ]
                frames.append(ev("response.reasoning_summary_text.done", **ids, text=summary))
                frames.append(ev("response.reasoning_summary_part.done", **ids, part={**part, "text": summary}))
            elif item["type"] == "message":
                frames.append(
                    ev(
                        "response.output_item.added",
                        output_index=index,
                        item={**item, "status": "in_progress", "content": []},
                    )
                )
                ids = {"item_id": item["id"], "output_index": index, "content_index": 0}
                part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
                frames.append(ev("response.content_part.added", **ids, part=part))
                frames += [
                    ev("response.output_text.delta", **ids, delta=piece, logprobs=[]) for piece in chunks_of(entry)
                ]
                frames.append(ev("response.output_text.done", **ids, text=text, logprobs=[]))
                frames.append(ev("response.content_part.done", **ids, part={**part, "text": text}))
            else:
                call = next(c for c in calls if c["id"] == item["call_id"])
                added = {**item, "arguments": "", "status": "in_progress"}
                frames.append(ev("response.output_item.added", output_index=index, item=added))
                ids = {"item_id": item["id"], "output_index": index}
                frames += [ev("response.function_call_arguments.delta", **ids, delta=p) for p in call["pieces"]]
                frames.append(
                    ev("response.function_call_arguments.done", **ids, arguments=call["json"], name=call["name"])
                )
            frames.append(ev("response.output_item.done", output_index=index, item=item))
        frames.append(ev("response.completed", response=response("completed", output, True)))

        def error(e: dict[str, Any]) -> bytes:
            return ev("error", code=e.get("code") or e.get("type"), message=e.get("message"), param=None)

        return _stream(frames, entry, error=error, error_event="error")


def _calls(fake: FakeAPI, entry: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    calls = []
    for call in entry.get("tool_calls") or ():
        arguments = dict(call.get("arguments") or {})
        calls.append(
            {
                "id": str(call.get("id") or fake.next_id(prefix)),
                "name": str(call["name"]),
                "json": json.dumps(arguments, separators=(",", ":")),
                "pieces": json_pieces(arguments),
            }
        )
    return calls


def _stream(frames: list[bytes], entry: dict[str, Any], *, error: Any, error_event: str | None) -> StreamReply:
    if "error_after" in entry:
        n = int(entry["error_after"])
        payload = {
            "message": str(entry.get("message") or "The server had an error while processing your request."),
            "type": str(entry.get("error_type") or "server_error"),
            "param": None,
            "code": entry.get("error_code"),
        }
        frames = [*frames[:n], error(payload)]
    return StreamReply(
        frames=frames,
        chunk_delay=float(entry.get("chunk_delay", 0) or 0),
        cut_after=int(entry["cut_after"]) if "cut_after" in entry else None,
        cut=str(entry.get("cut", "abrupt")),
        headers=dict(entry.get("headers") or {}),
    )


def main(argv: Sequence[str] | None = None) -> int:
    return main_for(FakeOpenAI, argv)


if __name__ == "__main__":
    raise SystemExit(main())
