"""The replies the routes send are the models they declare (seamline.server.api_models):
every field of the right type, no field the model does not name, every field it requires.
One served flow reaches each reply: a session with a tool turn waiting on a permission,
its answer, fork, transcript, revert, a pipeline run and its trace, the listings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest

pytest.importorskip("ag_ui")
pytest.importorskip("uvicorn")

from seamline.server.agents_file import AgentSpec
from seamline.server.api_models import (
    AgentList,
    ErrorReply,
    Info,
    PermissionAnswered,
    PipelineList,
    ProviderList,
    Removed,
    Reverted,
    RunList,
    RunSummary,
    SessionList,
    SessionRow,
    TraceSummary,
    TraceVerification,
    Transcript,
)
from seamline.server.openapi import openapi_document
from tests.server.harness import TOOL_TURN, serve, sse_frames

TRUSTED = {"trusted": AgentSpec(name="trusted", provider="scripted", yes=True, client_options=("script",))}


def conforms(data: Any, model: object) -> None:
    """``data`` decodes as ``model`` and has exactly its fields (nested ones too)."""
    msgspec.convert(data, model)
    _same_fields(data, mi.type_info(model), "$")


def _same_fields(data: Any, info: mi.Type, where: str) -> None:
    if isinstance(info, mi.Metadata):
        _same_fields(data, info.type, where)
    elif isinstance(info, mi.StructType):
        names = {f.encode_name for f in info.fields}
        required = {f.encode_name for f in info.fields if f.required}
        assert set(data) <= names, f"{where}: fields the model does not name: {sorted(set(data) - names)}"
        assert required <= set(data), f"{where}: missing {sorted(required - set(data))}"
        for field in info.fields:
            if field.encode_name in data:
                _same_fields(data[field.encode_name], field.type, f"{where}.{field.encode_name}")
    elif isinstance(info, mi.ListType):
        for index, item in enumerate(data):
            _same_fields(item, info.item_type, f"{where}[{index}]")
    elif isinstance(info, mi.UnionType) and data is not None:
        for option in info.types:
            if isinstance(option, mi.StructType | mi.ListType):
                _same_fields(data, option, where)


def _json(reply: Any, status: int = 200) -> Any:
    assert reply.status_code == status, reply.text
    return reply.json()


def test_every_reply_is_its_declared_model(tmp_path: Path) -> None:
    with serve(tmp_path, agents=TRUSTED) as served, served.client() as client:
        assert _json(client.get("/v1/openapi.json")) == openapi_document()
        conforms(_json(client.get("/v1/info")), Info)
        conforms(_json(client.get("/v1/providers", params={"preflight": "false"})), ProviderList)
        conforms(_json(client.get("/v1/agents")), AgentList)
        conforms(_json(client.get("/v1/pipelines")), PipelineList)
        missing = client.get("/v1/sessions/nowhere")
        assert missing.status_code == 404
        conforms(missing.json(), ErrorReply)

        script = served.script("turn", [*TOOL_TURN, {"text": "again"}])
        session = _json(client.post("/v1/sessions", json={"provider": "scripted", "options": {"script": script}}), 201)
        conforms(session, SessionRow)
        session_id = session["id"]
        run = _json(client.post(f"/v1/sessions/{session_id}/runs", json={"prompt": "write hello.txt"}), 201)
        conforms(run, RunSummary)
        with client.stream("GET", f"/v1/runs/{run['id']}/events", params={"format": "seamline"}) as response:
            for frame in sse_frames(response.iter_lines()):
                if frame["event"] == "permission_request":
                    break
        waiting = _json(client.get(f"/v1/runs/{run['id']}"))
        assert waiting["pending_permissions"], waiting
        conforms(waiting, RunSummary)
        conforms(_json(client.get("/v1/runs", params={"session_id": session_id})), RunList)
        request_id = waiting["pending_permissions"][0]["request_id"]
        answer = client.post(f"/v1/runs/{run['id']}/permissions/{request_id}", json={"decision": "allow"})
        conforms(_json(answer), PermissionAnswered)
        with client.stream("GET", f"/v1/runs/{run['id']}/events", params={"format": "seamline"}) as response:
            list(response.iter_lines())  # to the run's end
        conforms(_json(client.get(f"/v1/sessions/{session_id}")), SessionRow)
        conforms(_json(client.get("/v1/sessions")), SessionList)
        transcript = _json(client.get(f"/v1/sessions/{session_id}/transcript"))
        assert transcript["entries"] and transcript["files"]
        conforms(transcript, Transcript)
        reverted = _json(client.post(f"/v1/sessions/{session_id}/revert", json={}))
        assert reverted["steps_undone"] == 1
        conforms(reverted, Reverted)
        fork = _json(client.post(f"/v1/sessions/{session_id}/fork", json={}), 201)
        conforms(fork, SessionRow)
        conforms(_json(client.delete(f"/v1/sessions/{fork['id']}")), Removed)
        cancelled = client.post(f"/v1/runs/{run['id']}/cancel")
        conforms(_json(cancelled, 202), RunSummary)

        answer_script = served.script("pipeline", [{"text": "The answer is 42."}])
        body = {"prompt": "six times seven?", "provider": "scripted", "options": {"script": answer_script}}
        pipeline_run = _json(client.post("/v1/pipelines/single/runs", json=body), 201)
        conforms(pipeline_run, RunSummary)
        with client.stream("GET", f"/v1/runs/{pipeline_run['id']}/events", params={"format": "seamline"}) as response:
            list(response.iter_lines())
        conforms(_json(client.get(f"/v1/traces/{pipeline_run['id']}")), TraceSummary)
        conforms(_json(client.get(f"/v1/traces/{pipeline_run['id']}/verify")), TraceVerification)
