"""``seamline mcp``: seamline as an MCP server, over the official ``mcp`` SDK's low-level server.

A tool call runs on a :class:`~seamline.server.runs.RunHub`, the engine of ``seamline serve``,
under its :class:`~seamline.server.agents_file.ServePolicy`: the runs are in the store like
any (``seamline sessions``, ``trace verify``). While it runs, each batch of its events
becomes one MCP progress notification (when the client sent a progress token); the
client's cancellation aborts the run; the result carries the answer, the run and session
ids, the cost and the changed files.

Approvals: a tool call the permission rules leave to ``ask`` is put to the client as an
MCP elicitation when the client offers elicitation; otherwise it is denied. Nothing the
rules do not allow runs unapproved.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, Final

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from seamline._version import __version__
from seamline.errors import InvalidRequest, SeamlineError
from seamline.events import Complete, Event, FileChange, PermissionRequest, Text, TextDelta, ToolCall, ToolResult
from seamline.mcp_server.catalog import ToolEntry, tool_catalog
from seamline.server.runs import Run, RunHub
from seamline.tools.permissions import PermissionAnswer

__all__ = ["McpFace", "ProgressLines"]

_SESSIONS_URI: Final = "seamline://sessions/"
_TRACES_URI: Final = "seamline://traces/"
_CHANGED: Final = frozenset({"edited", "created", "deleted"})
_MESSAGE_MOST: Final = 500  # characters of text in one progress message
_ELICIT_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"allow": {"type": "boolean", "title": "Allow", "description": "let the tool run once"}},
    "required": ["allow"],
}


def _text(result: Any) -> types.CallToolResult:
    body = json.dumps(result, default=str)
    return types.CallToolResult(content=[types.TextContent(text=body)], structured_content=result)


def _refusal(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)


class ProgressLines:
    """Turns a run's events, batch by batch, into progress messages: the text it streamed
    (a step's whole text only where it was not streamed) and its tool activity."""

    def __init__(self) -> None:
        self._streamed = False  # deltas came since the last whole text
        self._tools: dict[str, str] = {}  # call id -> tool name

    def message(self, events: list[Event]) -> str | None:
        """One progress line for a batch; ``None`` when it holds nothing to say."""
        parts: list[str] = []
        text: list[str] = []
        for event in events:
            if isinstance(event, TextDelta):
                text.append(event.text)
                self._streamed = True
                continue
            if text:
                parts.append("".join(text))
                text = []
            if isinstance(event, Text):
                if not self._streamed:
                    parts.append(event.text)
                self._streamed = False
            elif isinstance(event, ToolCall):
                self._tools[event.call_id] = event.name
                parts.append(f"tool {event.name} {json.dumps(event.arguments)[:200]}")
            elif isinstance(event, ToolResult):
                name = self._tools.pop(event.call_id, event.call_id)
                parts.append(f"tool {name} {'failed' if event.is_error else 'done'}")
            elif isinstance(event, PermissionRequest):
                parts.append(f"asks to run {event.tool}")
            elif isinstance(event, FileChange) and event.kind in _CHANGED:
                parts.append(f"{event.kind} {event.path}")
        if text:
            parts.append("".join(text))
        message = " · ".join(p for p in parts if p)
        return message[:_MESSAGE_MOST] or None


class McpFace:
    """The MCP methods over one :class:`RunHub`; :attr:`server` is the SDK's server."""

    def __init__(self, hub: RunHub, *, pipelines: bool = True) -> None:
        self.hub = hub
        self.catalog = tool_catalog(hub.policy, pipelines=pipelines)
        self._cancels: set[asyncio.Task[Any]] = set()
        self.server: Server[Any] = Server(
            "seamline",
            version=__version__,
            instructions="seamline runs agents on any backend. Each agent tool runs a task and returns "
            "its answer with the run id, cost and changed files.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
        )

    # -- tools -----------------------------------------------------------------------------
    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = [
            types.Tool(
                name=entry.name,
                description=entry.description,
                input_schema=entry.input_schema,
                annotations=types.ToolAnnotations(read_only_hint=entry.read_only, open_world_hint=not entry.read_only),
            )
            for entry in self.catalog.values()
        ]
        return types.ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        entry = self.catalog.get(params.name)
        if entry is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"no tool {params.name!r}")
        args = dict(params.arguments or {})
        try:
            return await self._dispatch(ctx, entry, args)
        except SeamlineError as exc:  # refused by the policy, a bad argument, an unknown session
            return _refusal(f"{exc.kind}: {exc.message}")

    async def _dispatch(
        self, ctx: ServerRequestContext[Any], entry: ToolEntry, args: dict[str, Any]
    ) -> types.CallToolResult:
        hub = self.hub
        if entry.kind == "sessions_list":
            limit = _whole(args.get("limit", 50), "limit")
            return _text({"sessions": [self._row(r) for r in hub.store.list_sessions(limit=limit)]})
        if entry.kind == "session_read":
            return _text(self._session(_string(args, "session_id")))
        task = _string(args, "task")
        budget = _number(args.get("budget_usd"), "budget_usd")
        if entry.kind == "session_continue":
            record = hub.require_session(_string(args, "session_id"))
            run = await hub.start_run(record.id, task, budget_usd=budget)
            return await self._follow(ctx, run)
        options = _options(args.get("options"))
        workspace = _optional_string(args, "workspace")
        yes = args.get("yes", False) is True
        if entry.kind == "pipeline":
            assert entry.pipeline is not None
            run = await hub.start_pipeline(
                entry.pipeline,
                task,
                provider=_optional_string(args, "provider"),
                model=_optional_string(args, "model"),
                workspace=workspace,
                budget_usd=budget,
                agent=_optional_string(args, "agent"),
            )
            return await self._follow(ctx, run)
        slot = await hub.open_session(
            provider=_optional_string(args, "provider") if entry.kind == "run" else None,
            model=_optional_string(args, "model") if entry.kind == "run" else None,
            options=options,
            workspace=workspace,
            yes=yes,
            agent=entry.agent,
        )
        hub.store.update_metadata(slot.session.session_id, {"surface": "mcp"})
        run = await hub.start_run(slot.session.session_id, task, budget_usd=budget, options=options, yes=yes)
        return await self._follow(ctx, run)

    async def _follow(self, ctx: ServerRequestContext[Any], run: Run) -> types.CallToolResult:
        """Stream the run's progress until it ends; a cancelled call aborts the run."""
        sent = 0
        lines = ProgressLines()
        try:
            async for _, batch in run.follow():
                message = lines.message(batch)
                if message is not None:
                    sent += 1
                    await ctx.session.report_progress(sent, None, message)
                for event in batch:
                    if isinstance(event, PermissionRequest) and event.request_id in run.pending:
                        await self._approve(ctx, run, event)
        except BaseException:
            # The client cancelled (or the connection went): the run must not go on unseen.
            # The cancel runs in its own task, since this scope is being cancelled.
            if not run.done:
                task = asyncio.get_running_loop().create_task(self.hub.cancel(run.id))
                self._cancels.add(task)
                task.add_done_callback(self._cancels.discard)
            raise
        return self._result(run)

    async def _approve(self, ctx: ServerRequestContext[Any], run: Run, request: PermissionRequest) -> None:
        """Ask the client through elicitation where it offers it; deny otherwise."""
        answer = PermissionAnswer("deny", "once")
        capabilities = ctx.session.client_capabilities
        if capabilities is not None and capabilities.elicitation is not None and ctx.session.can_send_request:
            arguments = json.dumps(request.arguments)[:1000]
            why = f" ({request.reason})" if request.reason else ""
            try:
                reply = await ctx.session.elicit_form(
                    f"seamline: allow tool {request.tool} {arguments}{why}?",
                    _ELICIT_SCHEMA,
                    related_request_id=ctx.request_id,
                )
            except Exception:  # noqa: BLE001 - a client that cannot answer has not approved
                reply = None
            if reply is not None and reply.action == "accept" and (reply.content or {}).get("allow") is True:
                answer = PermissionAnswer("allow", "once")
        if request.request_id in run.pending:
            self.hub.answer(run.id, request.request_id, answer)

    def _result(self, run: Run) -> types.CallToolResult:
        final = next((e for e in reversed(run.events) if isinstance(e, Complete)), None)
        text = final.text if final is not None and final.text else ""
        changed = sorted({e.path for e in run.events if isinstance(e, FileChange) and e.kind in _CHANGED})
        outcome = {
            "run_id": run.id,
            "session_id": run.session_id,
            "pipeline": run.pipeline,
            "outcome": run.status,
            "stop_reason": run.stop_reason,
            "text": text,
            "cost_usd": run.cost_usd,
            "input_tokens": run.input_tokens,
            "output_tokens": run.output_tokens,
            "changed_files": changed,
        }
        cost = f"${run.cost_usd:.4f}" if run.cost_usd is not None else "unknown"
        footer = f"[seamline run {run.id} · {run.status} · cost {cost}" + (
            f" · changed: {', '.join(changed)}]" if changed else "]"
        )
        content: list[types.ContentBlock] = [
            types.TextContent(text=text or f"(no answer: {run.stop_reason})"),
            types.TextContent(text=footer),
        ]
        return types.CallToolResult(content=content, structured_content=outcome, is_error=run.status != "completed")

    # -- sessions and traces -----------------------------------------------------------------
    def _row(self, record: Any) -> dict[str, Any]:
        from seamline.server.routes_sessions import session_row

        return session_row(self.hub.store, self.hub, record)

    def _session(self, session_id: str) -> dict[str, Any]:
        store = self.hub.store
        record = self.hub.require_session(session_id)
        return {
            "session": self._row(record),
            "transcript": [asdict(e) for e in store.transcript(record.id)],
            "files": [asdict(f) for f in store.files_touched(record.id)],
        }

    async def _list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        resources = [
            types.Resource(
                uri=f"{_SESSIONS_URI}{r.id}",
                name=f"session {r.id[:12]}",
                description=f"{r.provider} session ({r.status})",
                mime_type="application/json",
            )
            for r in self.hub.store.list_sessions(limit=100)
        ]
        from seamline.trace.listing import list_traces
        from seamline.trace.writer import traces_dir

        for trace in list_traces(traces_dir(self.hub.store.location))[:100]:
            resources.append(
                types.Resource(
                    uri=f"{_TRACES_URI}{trace.run_id}",
                    name=f"trace {trace.run_id[:12]}",
                    description="a pipeline run's trace, verified",
                    mime_type="application/json",
                )
            )
        return types.ListResourcesResult(resources=resources)

    async def _list_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=_SESSIONS_URI + "{session_id}",
                    name="session",
                    description="a session's row, transcript and touched files",
                    mime_type="application/json",
                ),
                types.ResourceTemplate(
                    uri_template=_TRACES_URI + "{run_id}",
                    name="trace",
                    description="a pipeline run's trace: its records and their verification",
                    mime_type="application/json",
                ),
            ]
        )

    async def _read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        try:
            if uri.startswith(_SESSIONS_URI):
                body = self._session(uri[len(_SESSIONS_URI) :])
            elif uri.startswith(_TRACES_URI):
                body = self._trace(uri[len(_TRACES_URI) :])
            else:
                raise InvalidRequest(f"no resource {uri!r}")
        except SeamlineError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=exc.message) from None
        text = json.dumps(body, default=str)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="application/json", text=text)]
        )

    def _trace(self, run_id: str) -> dict[str, Any]:
        from seamline.trace.verify import verify_trace
        from seamline.trace.writer import trace_path

        if not run_id or "/" in run_id or run_id.startswith("."):
            raise InvalidRequest(f"no trace {run_id!r}")
        path = trace_path(run_id, store_path=self.hub.store.location)
        if not path.is_file():
            raise InvalidRequest(f"no trace for run {run_id!r}")
        verification = verify_trace(path)
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        return {"run_id": run_id, "verification": verification.summary(), "records": records}

    async def close(self) -> None:
        if self._cancels:
            await asyncio.gather(*self._cancels, return_exceptions=True)
        await self.hub.close()


def _string(args: Mapping[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(f"{key} is required (a non-empty string)")
    return value


def _optional_string(args: Mapping[str, Any], key: str) -> str | None:
    value = args.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidRequest(f"{key} must be a string")
    return value


def _number(value: Any, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"{key} must be a number")
    return float(value)


def _whole(value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
        raise InvalidRequest(f"{key} must be a whole number 1..1000")
    return value


def _options(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InvalidRequest("options must be an object of strings")
    return dict(value)
