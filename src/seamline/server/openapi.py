"""The OpenAPI 3.1 document of the HTTP API v1, pinned in ``docs/openapi.json``.

Written out here rather than generated, so that the document is a contract: a test
compares it with the pinned copy and with the routes the app serves, and property tests
(schemathesis) check the running server against it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Final

__all__ = ["main", "openapi_document"]

_ERROR: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["kind", "message"],
            "properties": {"kind": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}

_SESSION: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["id", "provider", "status", "live", "busy", "runs"],
    "properties": {
        "id": {"type": "string"},
        "provider": {"type": "string"},
        "model": {"type": ["string", "null"]},
        "provider_session_id": {"type": ["string", "null"]},
        "parent_id": {"type": ["string", "null"]},
        "workspace": {"type": ["string", "null"]},
        "mode": {"type": "string"},
        "status": {"type": "string"},
        "metadata": {"type": "object"},
        "created_at": {"type": "number"},
        "updated_at": {"type": "number"},
        "cost_usd": {"type": ["number", "null"], "description": "null when some usage had no known price"},
        "input_tokens": {"type": "integer"},
        "output_tokens": {"type": "integer"},
        "live": {"type": "boolean", "description": "held open by this server"},
        "busy": {"type": "boolean", "description": "running or queuing a turn"},
        "runs": {"type": "array", "items": {"type": "string"}},
        "title": {"type": "string", "description": "the first line of the session's first prompt ('' before one)"},
    },
}

_RUN: Final[dict[str, Any]] = {
    "type": "object",
    "required": ["id", "session_id", "status", "events"],
    "properties": {
        "id": {"type": "string"},
        "session_id": {"type": ["string", "null"], "description": "null for a pipeline run"},
        "pipeline": {"type": ["string", "null"]},
        "status": {"type": "string", "enum": ["queued", "running", "completed", "failed", "aborted", "budget"]},
        "stop_reason": {"type": ["string", "null"]},
        "prompt": {"type": "string"},
        "created_at": {"type": "number"},
        "finished_at": {"type": ["number", "null"]},
        "events": {"type": "integer", "description": "events so far; the last event id"},
        "input_tokens": {"type": "integer"},
        "output_tokens": {"type": "integer"},
        "cost_usd": {"type": ["number", "null"]},
        "pending_permissions": {"type": "array", "items": {"type": "object"}},
    },
}

_OPTIONS: Final[dict[str, Any]] = {
    "type": "object",
    "additionalProperties": {"type": "string"},
    "description": "provider options (see `seamline providers list --options`); one that names a program, "
    "path or endpoint is 403 (the operator's --agents FILE sets it), and with an agent only its "
    "client_options are taken",
}
_AGENT: Final[dict[str, Any]] = {
    "type": ["string", "null"],
    "description": "a declared agent (GET /v1/agents): its provider, model, options, sandbox and budget",
}
_YES: Final = "allow write and execute tools unasked: 403 unless the chosen agent declares yes = true"


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _json(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): {"$ref": f"#/components/responses/E{c}"} for c in codes}


_COMMON: Final = (401, 403)
_SESSION_ID: Final[dict[str, Any]] = {
    "name": "session_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": "a session id, or a unique prefix of at least four characters",
}
_RUN_ID: Final[dict[str, Any]] = {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}


def _op(summary: str, responses: dict[str, Any], *, errors: tuple[int, ...] = (), **extra: Any) -> dict[str, Any]:
    every = {**responses, **_errors(*errors, *_COMMON), "default": {"$ref": "#/components/responses/Error"}}
    return {"summary": summary, "responses": every, **extra}


def openapi_document() -> dict[str, Any]:
    """The document, as served at ``/v1/openapi.json`` and pinned in docs/openapi.json."""
    new_session = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "provider": {"type": ["string", "null"], "default": "offline"},
            "agent": _AGENT,
            "model": {"type": ["string", "null"]},
            "options": _OPTIONS,
            "workspace": {
                "type": ["string", "null"],
                "description": "folder the tools use: the server's --workspace or one under it, or under a root "
                "of the chosen agent (default: the first)",
            },
            "yes": {"type": "boolean", "default": False, "description": _YES},
            "metadata": {"type": "object", "description": "the key `agent` is the server's"},
        },
    }
    new_run = {
        "type": "object",
        "required": ["prompt"],
        "additionalProperties": False,
        "properties": {
            "prompt": {"type": "string"},
            "busy": {"type": "string", "enum": ["reject", "enqueue"], "default": "reject"},
            "max_steps": {"type": "integer", "minimum": 1, "default": 50},
            "budget_usd": {"type": ["number", "null"], "minimum": 0},
            "options": _OPTIONS,
            "yes": {"type": "boolean", "default": False, "description": _YES},
        },
    }
    paths: dict[str, Any] = {
        "/v1/info": {"get": _op("server, API and protocol versions", {"200": _json("info", {"type": "object"})})},
        "/v1/providers": {
            "get": _op(
                "every provider with its capabilities and preflight",
                {"200": _json("providers", {"type": "object", "required": ["providers"]})},
                parameters=[{"name": "preflight", "in": "query", "schema": {"type": "boolean", "default": True}}],
            )
        },
        "/v1/agents": {
            "get": _op(
                "the agents this server's operator declared (--agents FILE); never their option values",
                {"200": _json("agents", {"type": "object", "required": ["agents"]})},
            )
        },
        "/v1/sessions": {
            "get": _op(
                "stored sessions, newest first, with status, cost and provider",
                {
                    "200": _json(
                        "sessions",
                        {
                            "type": "object",
                            "required": ["sessions"],
                            "properties": {"sessions": {"type": "array", "items": _SESSION}},
                        },
                    )
                },
                errors=(400,),
                parameters=[
                    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": 10000}}
                ],
            ),
            "post": _op(
                "open a session",
                {"201": _json("the new session", _SESSION)},
                errors=(400, 413),
                requestBody=_body(new_session),
            ),
        },
        "/v1/sessions/{session_id}": {
            "parameters": [_SESSION_ID],
            "get": _op("one session", {"200": _json("the session", _SESSION)}, errors=(400, 404)),
            "delete": _op(
                "remove a session and everything recorded of it",
                {"200": _json("removed", {"type": "object", "required": ["removed"]})},
                errors=(400, 404, 409),
            ),
        },
        "/v1/sessions/{session_id}/fork": {
            "parameters": [_SESSION_ID],
            "post": _op(
                "a new session from this one's history (up to message `at`)",
                {"201": _json("the fork", _SESSION)},
                errors=(400, 404, 413),
                requestBody=_body(
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "at": {"type": ["integer", "null"]},
                            "options": _OPTIONS,
                            "yes": {"type": "boolean", "description": _YES},
                        },
                    }
                ),
            ),
        },
        "/v1/sessions/{session_id}/transcript": {
            "parameters": [_SESSION_ID],
            "get": _op(
                "the canonical transcript and the files touched",
                {"200": _json("transcript", {"type": "object", "required": ["session_id", "entries", "files"]})},
                errors=(400, 404),
            ),
        },
        "/v1/sessions/{session_id}/revert": {
            "parameters": [_SESSION_ID],
            "post": _op(
                "undo the session's journaled workspace edits (after step `to_step`)",
                {"200": _json("what was undone", {"type": "object", "required": ["session_id", "steps_undone"]})},
                errors=(400, 404, 409, 413),
                requestBody=_body(
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {"to_step": {"type": "integer", "minimum": 0}, "force": {"type": "boolean"}},
                    }
                ),
            ),
        },
        "/v1/sessions/{session_id}/runs": {
            "parameters": [_SESSION_ID],
            "post": _op(
                "run a turn; busy sessions reject (409) or enqueue, as asked",
                {"201": _json("the run", _RUN)},
                errors=(400, 404, 409, 413),
                requestBody=_body(new_run),
            ),
        },
        "/v1/runs": {
            "get": _op(
                "runs this server holds",
                {"200": _json("runs", {"type": "object", "required": ["runs"]})},
                parameters=[{"name": "session_id", "in": "query", "schema": {"type": "string"}}],
            )
        },
        "/v1/runs/{run_id}": {
            "parameters": [_RUN_ID],
            "get": _op("one run", {"200": _json("the run", _RUN)}, errors=(404,)),
        },
        "/v1/runs/{run_id}/events": {
            "parameters": [_RUN_ID],
            "get": _op(
                "the run's events: AG-UI over SSE (default), or seamline's own over SSE or NDJSON; "
                "every SSE event has an id, and Last-Event-ID (or ?after=) resumes after it",
                {
                    "200": {
                        "description": "the event stream, until the run ends",
                        "content": {
                            "text/event-stream": {"schema": {"type": "string"}},
                            "application/x-ndjson": {"schema": {"type": "string"}},
                        },
                    }
                },
                errors=(400, 404),
                parameters=[
                    {"name": "format", "in": "query", "schema": {"type": "string", "enum": ["agui", "seamline"]}},
                    {"name": "stream", "in": "query", "schema": {"type": "string", "enum": ["sse", "ndjson"]}},
                    {"name": "after", "in": "query", "schema": {"type": "string"}},
                    {"name": "interrupts", "in": "query", "schema": {"type": "boolean"}},
                    {"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}},
                ],
            ),
        },
        "/v1/runs/{run_id}/cancel": {
            "parameters": [_RUN_ID],
            "post": _op("end the run `aborted`", {"202": _json("the run", _RUN)}, errors=(404,)),
        },
        "/v1/runs/{run_id}/permissions/{request_id}": {
            "parameters": [
                _RUN_ID,
                {"name": "request_id", "in": "path", "required": True, "schema": {"type": "string"}},
            ],
            "post": _op(
                "answer a pending permission request",
                {"200": _json("the answer", {"type": "object", "required": ["request_id", "decision", "scope"]})},
                errors=(400, 404, 413),
                requestBody=_body(
                    {
                        "type": "object",
                        "required": ["decision"],
                        "additionalProperties": False,
                        "properties": {
                            "decision": {"type": "string", "enum": ["allow", "deny"]},
                            "scope": {"type": "string", "enum": ["once", "session", "always"]},
                        },
                    }
                ),
            ),
        },
        "/v1/pipelines": {
            "get": _op(
                "the built-in pipelines", {"200": _json("pipelines", {"type": "object", "required": ["pipelines"]})}
            )
        },
        "/v1/pipelines/{name}/runs": {
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
            "post": _op(
                "run a built-in pipeline under its controller; its roles stream as AG-UI subagents",
                {"201": _json("the run", _RUN)},
                errors=(400, 404, 413),
                requestBody=_body(
                    {
                        "type": "object",
                        "required": ["prompt"],
                        "additionalProperties": False,
                        "properties": {
                            "prompt": {"type": "string"},
                            "provider": {"type": ["string", "null"], "default": "offline"},
                            "agent": _AGENT,
                            "model": {"type": ["string", "null"]},
                            "options": _OPTIONS,
                            "workspace": {"type": ["string", "null"]},
                            "yes": {"type": "boolean", "description": _YES},
                            "max_steps": {"type": "integer", "minimum": 1},
                            "budget_usd": {"type": ["number", "null"], "minimum": 0},
                        },
                    }
                ),
            ),
        },
        "/v1/traces/{run_id}": {
            "parameters": [_RUN_ID],
            "get": _op(
                "a pipeline run's trace summary", {"200": _json("summary", {"type": "object"})}, errors=(400, 404)
            ),
        },
        "/v1/traces/{run_id}/verify": {
            "parameters": [_RUN_ID],
            "get": _op(
                "verify a pipeline run's trace",
                {"200": _json("verification", {"type": "object", "required": ["ok", "replayable", "problems"]})},
                errors=(400, 404),
            ),
        },
    }
    paths.update(_agui_paths())
    responses = {
        f"E{code}": _json(text, _ERROR)
        for code, text in (
            (400, "bad input"),
            (401, "missing or wrong bearer token"),
            (403, "Host or Origin not served here, or what only the operator may choose"),
            (404, "not found"),
            (409, "the session is busy"),
            (413, "request body over the limit"),
        )
    }
    responses["Error"] = _json("any other classified error (502 or 504: the backend failed)", _ERROR)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "seamline HTTP API",
            "version": "1",
            "description": "Sessions, runs and their event streams (AG-UI or seamline's own). See docs/serve.md.",
        },
        "paths": paths,
        "components": {
            "responses": responses,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"bearer": []}],
    }


def _agui_paths() -> dict[str, Any]:
    """``POST /v1/agui`` and ``POST /v1/agents/{name}/agui``: one AG-UI agent URL each."""
    seamline = {
        "type": "object",
        "additionalProperties": False,
        "description": "how the thread's session is opened (not taken on a declared agent)",
        "properties": {
            "provider": {"type": "string", "default": "offline"},
            "model": {"type": ["string", "null"]},
            "options": _OPTIONS,
            "workspace": {"type": ["string", "null"]},
            "yes": {"type": "boolean", "default": False},
            "max_steps": {"type": "integer", "minimum": 1, "default": 50},
            "budget_usd": {"type": ["number", "null"]},
        },
    }
    run_agent_input = {
        "type": "object",
        "description": "AG-UI RunAgentInput",
        "required": ["threadId", "runId", "messages"],
        "properties": {
            "threadId": {"type": "string", "description": "names the session (opened on first use)"},
            "runId": {"type": "string", "description": "echoed in RUN_STARTED and RUN_FINISHED"},
            "parentRunId": {"type": ["string", "null"]},
            "messages": {
                "type": "array",
                "description": "the last user message is the prompt",
                "items": {"type": "object", "required": ["id", "role"]},
            },
            "tools": {"type": "array", "items": {"type": "object"}},
            "context": {"type": "array", "items": {"type": "object"}},
            "state": {},
            "forwardedProps": {"type": "object", "properties": {"seamline": seamline}},
            "resume": {
                "type": ["array", "null"],
                "description": "answers to the thread's pending interrupts: payload {decision, scope}",
                "items": {
                    "type": "object",
                    "required": ["interruptId", "status"],
                    "properties": {
                        "interruptId": {"type": "string"},
                        "status": {"type": "string", "enum": ["resolved", "cancelled"]},
                        "payload": {},
                    },
                },
            },
        },
    }
    stream = {
        "200": {
            "description": "the run's AG-UI stream over SSE (ids N.K), until the run ends or an interrupt",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        }
    }
    last = [{"name": "Last-Event-ID", "in": "header", "schema": {"type": "string"}}]
    return {
        "/v1/agui": {
            "post": _op(
                "run the agent for an AG-UI client (HttpAgent): a new run on the thread's session, "
                "or, with resume, the rest of the interrupted one; Last-Event-ID reads a run on",
                stream,
                errors=(400, 404, 409, 413),
                requestBody=_body(run_agent_input),
                parameters=last,
            )
        },
        "/v1/agents/{name}/agui": {
            "parameters": [{"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}],
            "post": _op(
                "the same for the declared agent NAME",
                stream,
                errors=(400, 404, 409, 413),
                requestBody=_body(run_agent_input),
                parameters=last,
            ),
        },
    }


def main(argv: list[str]) -> int:
    """``python -m seamline.server.openapi [FILE]``: write the document (docs/openapi.json)."""
    text = json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"
    if argv:
        Path(argv[0]).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
