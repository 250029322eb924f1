"""The A2A JSON-RPC endpoint's answers to what a client gets wrong, over HTTP against a real
server: each mistake is a JSON-RPC error with its A2A code (never a 500), random and
truncated bodies included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("ag_ui")

import httpx2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seamline.server.agents_file import AgentSpec
from tests.server.harness import TOOL_TURN, serve, sse_frames

URL = "/v1/agents/writer/a2a"


def _agents(tmp_path: Path) -> dict[str, AgentSpec]:
    script = tmp_path / "writer.json"
    script.write_text(json.dumps(TOOL_TURN))
    return {"writer": AgentSpec(name="writer", provider="scripted", options={"script": str(script)}, workspaces=())}


def _call(client: httpx2.Client, method: str, params: dict[str, Any]) -> dict[str, Any]:
    reply = client.post(URL, json={"jsonrpc": "2.0", "id": "1", "method": method, "params": params})
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == "1"
    return body


def _message(text: str, **ids: str) -> dict[str, Any]:
    return {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": text}], **ids}}


def _code(body: dict[str, Any]) -> int:
    return int(body["error"]["code"])


def test_each_mistake_is_a_json_rpc_error_with_its_code(tmp_path: Path) -> None:
    with serve(tmp_path, agents=_agents(tmp_path)) as served, served.client() as client:
        parse = client.post(URL, content=b"{not json", headers={"content-type": "application/json"}).json()
        assert _code(parse) == -32700
        assert _code(client.post(URL, json=[]).json()) == -32600
        # A2A 0.3's names and shapes are served too (kinds, lower-case roles and states).
        legacy_message = {
            "kind": "message",
            "messageId": "l",
            "role": "user",
            "parts": [{"kind": "text", "text": "hi"}],
        }
        legacy = _call(client, "message/send", {"message": legacy_message})["result"]
        assert (legacy["kind"], legacy["status"]["state"]) == ("task", "input-required")
        assert [p["kind"] for p in legacy["status"]["message"]["parts"]] == ["text", "data"]
        assert legacy["status"]["message"]["role"] == "agent"
        canceled = _call(client, "tasks/cancel", {"id": legacy["id"]})["result"]
        assert (canceled["kind"], canceled["status"]["state"]) == ("task", "canceled")
        assert _code(_call(client, "tasks/get", {"id": "nope"})) == -32001
        body = {"jsonrpc": "2.0", "id": "s", "method": "message/stream", "params": {"message": legacy_message}}
        with client.stream("POST", URL, json=body) as streamed:
            frames = [json.loads(f["data"])["result"] for f in sse_frames(streamed.iter_lines())]
        assert frames[0]["kind"] == "task"
        updates = [f for f in frames if f["kind"] == "status-update"]
        assert [u["final"] for u in updates] == [False] * (len(updates) - 1) + [True]
        assert updates[-1]["status"]["state"] == "input-required"
        _call(client, "tasks/cancel", {"id": frames[0]["id"]})
        on_03 = client.post(
            URL,
            json={"jsonrpc": "2.0", "id": "1", "method": "tasks/get", "params": {"id": "nope"}},
            headers={"A2A-Version": "0.3"},
        )
        assert _code(on_03.json()) == -32001  # 0.3's methods take 0.3's version header
        assert _code(_call(client, "NoSuchMethod", {})) == -32601
        old = {"jsonrpc": "2.0", "id": "1", "method": "GetTask", "params": {"id": "nope"}}
        assert _code(client.post(URL, json=old, headers={"A2A-Version": "0.3"}).json()) == -32009
        assert _code(client.post(URL, json=old, headers={"A2A-Version": "1.0.0"}).json()) == -32001
        assert _code(_call(client, "SendMessage", {})) == -32602  # no message
        assert _code(_call(client, "SendMessage", _message("  "))) == -32602  # no text
        assert _code(_call(client, "GetTask", {"id": "nope"})) == -32001
        assert _code(_call(client, "CancelTask", {"id": "nope"})) == -32001
        push = {**_message("hi"), "configuration": {"taskPushNotificationConfig": {"url": "http://x"}}}
        assert _code(_call(client, "SendMessage", push)) == -32003
        assert _code(_call(client, "ListTasks", {"pageSize": 0})) == -32602
        assert _code(_call(client, "ListTasks", {"pageToken": "x"})) == -32602
        assert _code(_call(client, "ListTasks", {"pageToken": "-1"})) == -32602
        assert _code(_call(client, "ListTasks", {"historyLength": -1})) == -32602
        assert _code(_call(client, "CreateTaskPushNotificationConfig", {})) == -32003
        assert _code(_call(client, "GetExtendedAgentCard", {})) == -32007
        # A task that stopped for input takes only a decision; the request keeps waiting.
        asked = _call(client, "SendMessage", _message("write hello.txt"))["result"]["task"]
        assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        task = {"taskId": asked["id"], "contextId": asked["contextId"]}
        assert _code(_call(client, "SendMessage", _message("perhaps later", **task))) == -32602
        again = _call(client, "GetTask", {"id": asked["id"]})["result"]
        assert again["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        # A second message on the busy context is refused, naming the task.
        busy = _call(client, "SendMessage", _message("more", contextId=asked["contextId"]))
        assert _code(busy) == -32004 and asked["id"] in busy["error"]["message"]
        done = _call(client, "SendMessage", {"message": {**_message("allow")["message"], **task}})["result"]["task"]
        assert done["status"]["state"] == "TASK_STATE_COMPLETED"
        assert _code(_call(client, "SendMessage", _message("allow", **task))) == -32004  # it waits for nothing
        assert _code(_call(client, "CancelTask", {"id": asked["id"]})) == -32002
        # Another agent's URL does not know this agent's task; an unknown agent is 404.
        assert client.post("/v1/agents/nobody/a2a", json={}).status_code == 404


VALID = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": "nope"}}).encode()


def test_random_and_truncated_bodies_get_a_json_rpc_reply_never_a_crash(tmp_path: Path) -> None:
    bodies = st.one_of(
        st.binary(max_size=200),
        st.integers(min_value=0, max_value=len(VALID)).map(lambda n: VALID[:n]),
        st.dictionaries(
            st.sampled_from(["jsonrpc", "id", "method", "params"]),
            st.one_of(st.none(), st.integers(), st.text(max_size=10), st.lists(st.integers(), max_size=2)),
        ).map(lambda d: json.dumps(d).encode()),
        st.builds(
            lambda method, params: json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode(),
            st.sampled_from(
                [
                    "SendMessage",
                    "SendStreamingMessage",
                    "GetTask",
                    "ListTasks",
                    "CancelTask",
                    "SubscribeToTask",
                    "message/send",
                    "message/stream",
                    "tasks/get",
                ]
            ),
            st.one_of(
                st.none(),
                st.integers(),
                st.text(max_size=5),
                st.dictionaries(
                    st.sampled_from(
                        ["id", "message", "configuration", "historyLength", "pageSize", "pageToken", "status"]
                    ),
                    st.one_of(
                        st.none(),
                        st.integers(),
                        st.text(max_size=5),
                        st.just({"parts": 3}),
                        st.just({"role": 1, "parts": [{"kind": "file", "file": 2}]}),
                        st.just({"blocking": False, "pushNotificationConfig": 1}),
                    ),
                ),
            ),
        ),
    )
    with serve(tmp_path, agents=_agents(tmp_path)) as served, served.client() as client:

        @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(bodies)
        def check(body: bytes) -> None:
            reply = client.post(URL, content=body, headers={"content-type": "application/json"})
            assert reply.status_code == 200, reply.text
            answer = reply.json()
            assert answer["jsonrpc"] == "2.0"
            assert ("error" in answer) != ("result" in answer)
            if "error" in answer:
                assert isinstance(answer["error"]["code"], int) and answer["error"]["message"]

        check()
