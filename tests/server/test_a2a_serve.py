"""``seamline serve`` as an A2A server, driven by the official A2A Python SDK's client
(``a2a-sdk``) against a real server on 127.0.0.1: the agent card, send, stream, get,
cancel (the run aborts and the fake model server sees no further request), a permission
request as ``input-required`` answered on the same task, and the roles."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("ag_ui")
pytest.importorskip("a2a")

import httpx
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.client.client import Client
from a2a.client.errors import A2AClientError, AgentCardResolutionError
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict

from seamline.server import a2a_route
from seamline.server.agents_file import AgentSpec
from seamline.server.users import UserBook, users_path_for
from tests.fakes.openai_api import FakeOpenAI
from tests.providers.agent_cli_support import run_async
from tests.server.harness import TOOL_TURN, Served, serve, sse_frames

ANSWER_ONLY: list[dict[str, Any]] = [
    {"text": "Hello from seamline.", "stream": True, "usage": {"input_tokens": 10, "output_tokens": 4}}
]
READ_THEN_ANSWER: list[dict[str, Any]] = [
    {
        "text": "Looking.",
        "tool_calls": [{"id": "call-r", "name": "read_file", "arguments": {"path": "README.md"}}],
        "usage": {"input_tokens": 10, "output_tokens": 5},
    },
    {"text": "The readme says hello.", "stream": True, "usage": {"input_tokens": 20, "output_tokens": 6}},
]


def _scripted(tmp_path: Path, name: str, script: list[dict[str, Any]]) -> AgentSpec:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(script))
    return AgentSpec(name=name, provider="scripted", options={"script": str(path)}, workspaces=(tmp_path / "ws",))


def _ask(text: str, **ids: str) -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(message_id=f"m-{text[:8]}", role=Role.ROLE_USER, parts=[Part(text=text)], **ids)
    )


@asynccontextmanager
async def _client(base: str, agent: str, *, token: str | None = None, streaming: bool = True) -> AsyncIterator[Client]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(timeout=30, headers=headers) as http:
        client = await create_client(
            f"{base}/v1/agents/{agent}/a2a", ClientConfig(httpx_client=http, streaming=streaming)
        )
        yield client


async def _collect(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    # Bounded: the server's keep-alive comments would keep a stuck stream open for ever.
    async with asyncio.timeout(60):
        return [event async for event in client.send_message(request)]


def _kind(event: StreamResponse) -> str:
    return str(event.WhichOneof("payload"))


def _event_of(event: StreamResponse) -> str | None:
    """The seamline event a status update's message reports (None for a bare state)."""
    if _kind(event) != "status_update":
        return None
    seen = MessageToDict(event.status_update.status.message).get("metadata", {}).get("seamline_event")
    return str(seen) if seen is not None else None


def _run_events(served: Served, run_id: str) -> list[dict[str, Any]]:
    with served.client() as http, http.stream("GET", f"/v1/runs/{run_id}/events", params={"format": "seamline"}) as r:
        return [json.loads(frame["data"]) for frame in sse_frames(r.iter_lines())]


@run_async
async def test_the_card_is_at_the_path_the_sdk_resolves_and_names_the_agent(tmp_path: Path) -> None:
    agents = {"greeter": _scripted(tmp_path, "greeter", ANSWER_ONLY)}
    with serve(tmp_path, agents=agents) as served:
        async with httpx.AsyncClient(timeout=30) as http:
            card = await A2ACardResolver(http, f"{served.base}/v1/agents/greeter/a2a").get_agent_card()
            with pytest.raises(AgentCardResolutionError) as unknown:
                await A2ACardResolver(http, f"{served.base}/v1/agents/nobody/a2a").get_agent_card()
            # The server's own well-known card is its one agent's: a client given the bare URL finds it.
            root = await A2ACardResolver(http, served.base).get_agent_card()
            client = await create_client(served.base, ClientConfig(httpx_client=http, streaming=False))
            (answered,) = await _collect(client, _ask("say hello"))
    assert card.name == "greeter"
    assert card.capabilities.streaming
    # One JSON-RPC endpoint, offered as A2A 1.0 and as 0.3 (the SDK picks 1.0).
    url = f"{served.base}/v1/agents/greeter/a2a"
    assert [(i.url, i.protocol_binding, i.protocol_version) for i in card.supported_interfaces] == [
        (url, "JSONRPC", "1.0"),
        (url, "JSONRPC", "0.3"),
    ]
    assert [s.id for s in card.skills] == ["greeter"]
    assert unknown.value.status_code == 404
    assert root == card
    assert answered.task.status.state == TaskState.TASK_STATE_COMPLETED
    two = {"a": _scripted(tmp_path, "a", ANSWER_ONLY), "b": _scripted(tmp_path, "b", ANSWER_ONLY)}
    (tmp_path / "two").mkdir()
    with serve(tmp_path / "two", agents=two) as served, served.client() as http:
        several = http.get("/.well-known/agent-card.json")
    assert several.status_code == 404
    assert "/v1/agents/a/a2a/.well-known/agent-card.json" in several.json()["error"]["message"]


@run_async
async def test_send_answers_with_the_completed_task_and_the_run_is_a_serve_run(tmp_path: Path) -> None:
    agents = {"greeter": _scripted(tmp_path, "greeter", ANSWER_ONLY)}
    with serve(tmp_path, agents=agents) as served:
        async with _client(served.base, "greeter", streaming=False) as client:
            (only,) = await _collect(client, _ask("say hello"))
            task = only.task
            fetched = await client.get_task(GetTaskRequest(id=task.id))
            with pytest.raises(TaskNotFoundError):
                await client.get_task(GetTaskRequest(id="no-such-task"))
        with served.client() as http:
            run = http.get(f"/v1/runs/{task.id}").json()
        record = served.store.require(task.context_id)
    assert _kind(only) == "task"
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for a in task.artifacts for p in a.parts] == ["Hello from seamline."]
    assert [p.text for m in task.history for p in m.parts] == ["say hello"]
    assert MessageToDict(fetched) == MessageToDict(task)
    # An ordinary serve run: in the hub's runs and in the store, as the declared agent's session.
    assert (run["status"], run["session_id"], run["prompt"]) == ("completed", task.context_id, "say hello")
    assert record.metadata["agent"] == "greeter" and record.metadata["surface"] == "serve"
    assert record.status == "completed"


@run_async
async def test_a_second_message_on_the_context_goes_on_in_the_same_session(tmp_path: Path) -> None:
    agents = {"greeter": _scripted(tmp_path, "greeter", [*ANSWER_ONLY, {"text": "Again."}])}
    with serve(tmp_path, agents=agents) as served:
        async with _client(served.base, "greeter", streaming=False) as client:
            (first,) = await _collect(client, _ask("one"))
            (second,) = await _collect(client, _ask("two", context_id=first.task.context_id))
            listed = await client.list_tasks(ListTasksRequest(context_id=first.task.context_id, page_size=1))
            rest = await client.list_tasks(ListTasksRequest(page_token=listed.next_page_token, include_artifacts=True))
    assert second.task.context_id == first.task.context_id
    assert second.task.id != first.task.id
    assert [p.text for a in second.task.artifacts for p in a.parts] == ["Again."]
    # ListTasks: the newest first, a page at a time; artifacts only when asked for.
    assert ([t.id for t in listed.tasks], listed.total_size) == ([second.task.id], 2)
    assert listed.tasks[0].artifacts == [] and listed.next_page_token
    assert [t.id for t in rest.tasks] == [first.task.id] and not rest.next_page_token
    assert [p.text for a in rest.tasks[0].artifacts for p in a.parts] == ["Hello from seamline."]


@run_async
async def test_stream_sends_the_task_then_tool_activity_then_the_answer_then_the_end(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "README.md").write_text("hello\n")
    agents = {"reader": _scripted(tmp_path, "reader", READ_THEN_ANSWER)}
    with serve(tmp_path, agents=agents) as served:
        async with _client(served.base, "reader") as client:
            events = await _collect(client, _ask("what does the readme say?"))
    kinds = [_kind(e) for e in events]
    assert kinds[0] == "task" and events[0].task.status.state == TaskState.TASK_STATE_SUBMITTED
    updates = [e.status_update for e in events if _kind(e) == "status_update"]
    tool = [e.status_update for e in events if _event_of(e) == "tool_call"]
    assert len(tool) == 1 and tool[0].status.state == TaskState.TASK_STATE_WORKING
    assert MessageToDict(tool[0].status.message.parts[1].data)["name"] == "read_file"
    # The tool call comes before the answer artifact, which comes before the final state.
    assert kinds.index("artifact_update") > events.index(next(e for e in events if e.status_update == tool[0]))
    assert kinds[-2:] == ["artifact_update", "status_update"]
    assert [p.text for p in events[-2].artifact_update.artifact.parts] == ["The readme says hello."]
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert all(u.status.state == TaskState.TASK_STATE_WORKING for u in updates[:-1])


@pytest.mark.parametrize(("reply", "written"), [("allow", True), ("deny", False)])
@run_async
async def test_a_permission_request_is_input_required_and_the_answer_on_the_task_decides(
    tmp_path: Path, reply: str, written: bool
) -> None:
    agents = {"writer": _scripted(tmp_path, "writer", TOOL_TURN)}
    with serve(tmp_path, agents=agents) as served:
        async with _client(served.base, "writer") as client:
            asked = await _collect(client, _ask("write hello.txt"))
            stopped = asked[-1].status_update
            task_id = stopped.task_id
            assert stopped.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, MessageToDict(asked[-1])
            wanted = MessageToDict(stopped.status.message.parts[1].data)
            assert (wanted["tool"], wanted["arguments"]["path"]) == ("write_file", "hello.txt")
            assert not (tmp_path / "ws" / "hello.txt").exists()  # nothing runs before the answer
            polled = await client.get_task(GetTaskRequest(id=task_id))
            assert polled.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            # A client that reconnects learns the same: the task, then what it waits for.
            async with asyncio.timeout(60):
                again = [e async for e in client.subscribe(SubscribeToTaskRequest(id=task_id))]
            assert [_kind(e) for e in again] == ["task", "status_update"]
            assert again[-1].status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            rest = await _collect(client, _ask(reply, task_id=task_id, context_id=stopped.context_id))
        events = _run_events(served, task_id)
    assert rest[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert (tmp_path / "ws" / "hello.txt").exists() is written
    decisions = [e for e in events if e["type"] == "permission_decision"]
    assert [d["decision"] for d in decisions] == [reply]
    results = [e for e in events if e["type"] == "tool_result"]
    assert len(results) == 1 and results[0]["is_error"] is not written  # the tool ran once (or was refused once)
    if written:
        assert (tmp_path / "ws" / "hello.txt").read_text() == "hi\n"


@pytest.mark.parametrize("streaming", [True, False])
@run_async
async def test_a_client_on_a2a_0_3_sends_is_asked_and_answers(tmp_path: Path, streaming: bool) -> None:
    from a2a.client import ClientFactory

    agents = {"writer": _scripted(tmp_path, "writer", TOOL_TURN)}
    with serve(tmp_path, agents=agents) as served:
        async with httpx.AsyncClient(timeout=30) as http:
            card = await A2ACardResolver(http, f"{served.base}/v1/agents/writer/a2a").get_agent_card()
            assert [i.protocol_version for i in card.supported_interfaces] == ["1.0", "0.3"]
            del card.supported_interfaces[0]  # as a client that speaks only 0.3 sees the card
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)
            assert type(client._transport).__name__ == "CompatJsonRpcTransport"  # the SDK's 0.3 wire
            asked = await _collect(client, _ask("write hello.txt"))
            last = asked[-1]
            stopped = last.status_update if _kind(last) == "status_update" else last.task
            task_id = stopped.task_id if _kind(last) == "status_update" else stopped.id
            assert stopped.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
            assert MessageToDict(stopped.status.message.parts[1].data)["tool"] == "write_file"
            await _collect(client, _ask("allow", task_id=task_id, context_id=stopped.context_id))
            task = await client.get_task(GetTaskRequest(id=task_id))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for a in task.artifacts for p in a.parts] == ["Wrote hello.txt."]
    assert (tmp_path / "ws" / "hello.txt").read_text() == "hi\n"


@run_async
async def test_an_agent_declared_with_yes_runs_its_tools_without_asking(tmp_path: Path) -> None:
    spec = _scripted(tmp_path, "writer", TOOL_TURN)
    agents = {
        "writer": AgentSpec(
            name="writer", provider="scripted", options=spec.options, workspaces=spec.workspaces, yes=True
        )
    }
    with serve(tmp_path, agents=agents) as served:
        async with _client(served.base, "writer") as client:
            events = await _collect(client, _ask("write hello.txt"))
    states = [e.status_update.status.state for e in events if _kind(e) == "status_update"]
    assert TaskState.TASK_STATE_INPUT_REQUIRED not in states
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    assert (tmp_path / "ws" / "hello.txt").read_text() == "hi\n"


def test_a_quiet_stream_gets_keep_alives_sooner_than_the_sdks_default_client_gives_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK's client on its own HTTP client (httpx's defaults) gives up after this long without a byte.
    with httpx.Client() as default:
        assert default.timeout.read is not None and a2a_route.HEARTBEAT < default.timeout.read
    monkeypatch.delenv("SEAMLINE_BLOCK_REAL_PROVIDERS", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-a2a-serve")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    # The model says nothing until the fake stops: the stream has only keep-alives to send.
    with FakeOpenAI(script=[{"text": "never", "chunks": ["nev", "er"], "cut_after": 0, "cut": "stall"}]) as fake:
        spec = AgentSpec(
            name="slow",
            provider="openai",
            model="gpt-4o",
            options={"base_url": fake.base_url},
            workspaces=(tmp_path / "ws",),
        )
        with serve(tmp_path, agents={"slow": spec}) as served, served.client() as http:
            body = {
                "jsonrpc": "2.0",
                "id": "1",
                "method": "SendStreamingMessage",
                "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "take your time"}]}},
            }
            seen: list[str] = []
            with http.stream("POST", "/v1/agents/slow/a2a", json=body) as response:
                run_id = response.headers["x-seamline-run-id"]
                for line in response.iter_lines():
                    seen.append(line)
                    if line.startswith(":"):
                        break
            running = not served.app.hub.runs[run_id].done
    assert seen[-1] == ": keep-alive" and running
    assert [line for line in seen if line.startswith("data:")][:1] != []  # the task came first


@run_async
async def test_cancel_aborts_the_run_and_the_model_sees_no_further_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SEAMLINE_BLOCK_REAL_PROVIDERS", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-a2a-serve")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    # The first model call asks for a tool; the second stalls until the run is cancelled.
    script = [
        {"tool_calls": [{"id": "call-l", "name": "list_dir", "arguments": {"path": "."}}]},
        {"text": "never", "chunks": ["nev", "er"], "cut_after": 1, "cut": "stall"},
    ]
    with FakeOpenAI(script=script, fallback={"text": "a further request"}) as fake:
        agents = {
            "slow": AgentSpec(
                name="slow",
                provider="openai",
                model="gpt-4o",
                options={"base_url": fake.base_url},
                workspaces=(tmp_path / "ws",),
            )
        }
        with serve(tmp_path, agents=agents) as served:
            hub = served.app.hub
            async with _client(served.base, "slow") as client:
                live: list[StreamResponse] = []
                tool_seen = asyncio.Event()
                running_when_seen: list[bool] = []

                async def read() -> None:
                    async for event in client.send_message(_ask("list the folder")):
                        live.append(event)
                        if _event_of(event) == "tool_call":
                            running_when_seen.append(not hub.runs[event.status_update.task_id].done)
                            tool_seen.set()

                reader = asyncio.create_task(read())
                await asyncio.wait_for(tool_seen.wait(), timeout=60)
                for _ in range(3000):  # the stalled second model call has arrived
                    if len(fake.model_requests()) >= 2:
                        break
                    await asyncio.sleep(0.02)
                assert len(fake.model_requests()) == 2
                task_id = live[0].task.id
                canceled = await client.cancel_task(CancelTaskRequest(id=task_id))
                await asyncio.wait_for(reader, timeout=60)
                with pytest.raises(TaskNotCancelableError):
                    await client.cancel_task(CancelTaskRequest(id=task_id))
            status = hub.runs[task_id].status
            record = served.store.require(live[0].task.context_id)
        assert len(fake.model_requests()) == 2  # nothing after the cancel
    assert running_when_seen == [True]  # the update came while the run still ran
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert live[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
    assert status == "aborted" and record.status == "aborted"


@run_async
async def test_a_viewer_reads_the_card_but_may_not_send_and_an_operator_cancels_only_its_own(tmp_path: Path) -> None:
    book = UserBook(users_path_for(tmp_path / "store.db"))
    vera, otto, olga = book.add("vera", "viewer"), book.add("otto", "operator"), book.add("olga", "operator")
    agents = {"writer": _scripted(tmp_path, "writer", TOOL_TURN)}
    with serve(tmp_path, agents=agents, users=book) as served:
        async with _client(served.base, "writer", token=vera) as viewer:
            with pytest.raises(A2AClientError, match="403"):
                await _collect(viewer, _ask("write hello.txt"))
        async with _client(served.base, "writer", token=otto) as operator:
            asked = await _collect(operator, _ask("write hello.txt"))
            task_id = asked[-1].status_update.task_id
            assert asked[-1].status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        async with _client(served.base, "writer", token=olga) as other:
            with pytest.raises(A2AClientError, match="403"):
                await other.cancel_task(CancelTaskRequest(id=task_id))
            with pytest.raises(A2AClientError, match="403"):
                await _collect(other, _ask("allow", task_id=task_id))
        async with _client(served.base, "writer", token=otto) as operator:
            canceled = await operator.cancel_task(CancelTaskRequest(id=task_id))
        with served.client(headers={"authorization": f"Bearer {otto}"}) as http:
            run = http.get(f"/v1/runs/{task_id}").json()
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert run["started_by"] == "otto" and run["status"] == "aborted"
    assert not (tmp_path / "ws" / "hello.txt").exists()


@run_async
async def test_a_message_can_run_a_pipeline_whose_trace_verifies(tmp_path: Path) -> None:
    from a2a.utils.errors import InvalidParamsError
    from google.protobuf.struct_pb2 import Struct

    agents = {"helper": _scripted(tmp_path, "helper", [{"text": "The answer is 42."}])}
    asked = _ask("six times seven?")
    asked.metadata.update({"seamline": {"pipeline": "single"}})
    with serve(tmp_path, agents=agents) as served:
        async with _client(served.base, "helper") as client:
            events = await _collect(client, asked)
            unknown = _ask("again")
            unknown.metadata.CopyFrom(Struct())
            unknown.metadata.update({"seamline": {"pipeline": "nope"}})
            with pytest.raises(InvalidParamsError, match="nope"):
                await _collect(client, unknown)
            task = await client.get_task(GetTaskRequest(id=events[0].task.id))
        with served.client() as http:
            run = http.get(f"/v1/runs/{task.id}").json()
            verified = http.get(f"/v1/traces/{task.id}/verify").json()
    kinds = [_event_of(e) for e in events]
    assert "role_started" in kinds and "role_complete" in kinds
    assert kinds.index("role_complete") < [_kind(e) for e in events].index("artifact_update")
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for a in task.artifacts for p in a.parts] == ["The answer is 42."]
    assert (run["pipeline"], run["status"]) == ("single", "completed")
    assert verified["ok"] is True
