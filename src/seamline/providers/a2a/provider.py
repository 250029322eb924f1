"""``a2a``: a remote A2A (Agent2Agent) agent as a seamline backend.

seamline reads the agent card (``GET {url}/.well-known/agent-card.json``) when a session
opens, and speaks A2A 1.0's JSON-RPC binding to the card's JSON-RPC interface (see
:mod:`seamline.providers.a2a.wire`). A turn is one user message:

- where the card says the agent streams (``capabilities.streaming``; ``-o streaming=``
  overrides), ``SendStreamingMessage`` and its server-sent events, translated as they
  arrive (:mod:`seamline.providers.a2a.translator`);
- else ``SendMessage`` with ``returnImmediately`` and ``GetTask`` every ``poll_interval``
  seconds until the task settles (an agent that answers with a message ends there).

Sessions: the agent mints a context id with the first task; it is the provider session
id. Each later message carries it, so the agent answers in the same context (a new task in
it), in this process or after ``--session`` resumes the session. A task left waiting for
input (``input-required``) is continued by the next message of the session (its task id
goes with it; the session's metadata keeps it for a resume). Abort is ``CancelTask`` for the task under way; the turn ends ``aborted``
when the agent says the task is canceled, or after ``cancel_timeout``.

    seamline run -p a2a -o url=http://127.0.0.1:9999 -o token_env=AGENT_TOKEN "Hi"
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, ClassVar, Final

from seamline.errors import InvalidRequest, ProviderFailure, SeamlineError, TimeoutFailure
from seamline.events import Complete, Event, Session
from seamline.providers.a2a.card import AgentCardInfo, read_card
from seamline.providers.a2a.translator import INTERRUPTED, TERMINAL, A2ATranslator
from seamline.providers.a2a.wire import A2ARequestError, A2AWire
from seamline.providers.base import OptionSpec, PreflightCheck, Provider, ProviderSession
from seamline.redact import redact_url

__all__ = ["A2AProvider"]

_ABORTED: Final = object()  # put in a turn's queue by abort: stop waiting, cancel
_END: Final = object()
_NOT_CANCELABLE: Final = -32002


class A2AProvider(Provider):
    """A remote A2A agent (JSON-RPC over HTTP, server-sent events) as a seamline provider."""

    name = "a2a"
    description = "a remote A2A (Agent2Agent) agent over JSON-RPC and server-sent events"
    options: ClassVar[Mapping[str, OptionSpec]] = {
        "url": OptionSpec(
            "the agent's base URL (its card is at URL/.well-known/agent-card.json)", kind="url", operator_only=True
        ),
        "token": OptionSpec("bearer token sent as Authorization (never stored; prefer token_env)", operator_only=True),
        "token_env": OptionSpec("environment variable holding the bearer token", operator_only=True),
        "rpc_url": OptionSpec(
            "the JSON-RPC URL to use instead of the card's (which must be on the URL's origin)",
            kind="url",
            operator_only=True,
        ),
        "streaming": OptionSpec(
            "use SendStreamingMessage: auto (as the card says), true or false",
            default="auto",
            choices=("auto", "true", "false"),
        ),
        "request_timeout": OptionSpec("seconds one HTTP call may take", default="30", kind="positive_number"),
        "turn_timeout": OptionSpec("seconds a turn may take before it is cancelled", default="600", kind="number"),
        "cancel_timeout": OptionSpec("seconds to wait for a cancelled task to say so", default="10", kind="number"),
        "poll_interval": OptionSpec(
            "seconds between GetTask calls of a turn without streaming", default="0.5", kind="positive_number"
        ),
    }
    runs_own_tools = True
    tool_approval = "sandbox"  # the remote agent runs its tools where it runs; none are asked of seamline
    forking = "emulated"  # A2A has no fork: a new context, given the history as text
    session_ids = "provider"  # the agent mints the context id
    resume_support = "native"  # the next message carries the stored context id
    cost_source = "reported"  # A2A reports no usage: the agent's cost is its own
    cost_scope = "turn"
    result_cadence = "stream"

    # -- configuration ----------------------------------------------------------------------
    def _url(self) -> str:
        url = self.option_values.get("url", "").strip()
        if not url:
            raise InvalidRequest("a2a: name the agent with -o url=http://HOST:PORT (its base URL)")
        return url.rstrip("/")

    def _token(self) -> str | None:
        given = self.option_values.get("token")
        if given:
            return given
        env = self.option_values.get("token_env")
        if env:
            value = os.environ.get(env)
            if not value:
                raise InvalidRequest(f"a2a: token_env={env} names a variable that is not set")
            return value
        return None

    def _seconds(self, key: str) -> float:
        return float(self.option_values[key])

    def check_budget(self, budget_usd: float | None) -> None:
        """A2A carries no usage: a budget in USD could never stop a turn, so it is refused."""
        super().check_budget(budget_usd)
        if budget_usd is not None:
            raise InvalidRequest(
                "a2a: an A2A agent reports no usage or cost, so a budget in USD cannot be enforced on it; "
                "run it without --budget-usd (its spend is the agent's own)"
            )

    def _ready(self) -> None:
        self._url()
        self._token()

    def _wire(self) -> A2AWire:
        return A2AWire(self._url(), token=self._token(), timeout=self._seconds("request_timeout"))

    async def _card(self, wire: A2AWire) -> AgentCardInfo:
        info = read_card(await wire.card(timeout=self._seconds("request_timeout")), base_url=wire.base_url)
        rpc_url = self.option_values.get("rpc_url")
        if rpc_url:
            info = AgentCardInfo(name=info.name, streaming=info.streaming, rpc_url=rpc_url)
        wire.rpc_url = info.rpc_url
        return info

    def _streams(self, info: AgentCardInfo) -> bool:
        choice = self.option_values.get("streaming", "auto")
        return info.streaming if choice == "auto" else choice == "true"

    # -- preflight ----------------------------------------------------------------------------
    async def _preflight(self) -> Sequence[PreflightCheck]:
        url = self._url()
        wire = self._wire()
        try:
            info = await self._card(wire)
        except SeamlineError as exc:
            return [PreflightCheck(name="card", ok=False, detail=f"{exc.kind}: {exc.message}", fix="check -o url=…")]
        finally:
            await wire.close()
        how = "streams" if self._streams(info) else "plain send"
        return [
            PreflightCheck(name="card", ok=True, detail=f"{info.name} at {redact_url(url)}"),
            PreflightCheck(name="interface", ok=True, detail=f"JSON-RPC at {redact_url(info.rpc_url)} ({how})"),
        ]

    # -- sessions --------------------------------------------------------------------------------
    async def _open(self, session: ProviderSession) -> None:
        wire = self._wire()
        try:
            info = await self._card(wire)
        except BaseException:
            await wire.close()
            raise
        session.state["a2a_wire"] = wire
        session.state["a2a_card"] = info
        if session.provider_session_id:
            session.state["a2a_context_id"] = session.provider_session_id

    async def _resume(self, session: ProviderSession) -> None:
        await self._open(session)
        if session.store is not None:
            waiting = session.store.require(session.session_id).metadata.get("a2a_waiting_task")
            if isinstance(waiting, str) and waiting:
                session.state["a2a_waiting_task"] = waiting

    async def _close(self, session: ProviderSession) -> None:
        wire = session.state.pop("a2a_wire", None)
        if isinstance(wire, A2AWire):
            await wire.close()

    async def _abort(self, session: ProviderSession) -> None:
        queue = session.state.get("a2a_queue")
        if isinstance(queue, asyncio.Queue):
            queue.put_nowait(_ABORTED)  # the turn stops waiting at once
        await self._cancel(session)

    async def _cancel(self, session: ProviderSession) -> None:
        """``CancelTask`` for the task under way, once; a task that already ended is left be."""
        wire = session.state.get("a2a_wire")
        task_id = session.state.get("a2a_task_id")
        if not isinstance(wire, A2AWire) or not isinstance(task_id, str) or session.state.get("a2a_cancelled"):
            return  # no task yet: cancelled as soon as its id is known
        session.state["a2a_cancelled"] = task_id
        with contextlib.suppress(SeamlineError):
            try:
                await wire.call("CancelTask", {"id": task_id}, timeout=self._seconds("request_timeout"))
            except A2ARequestError as exc:
                if exc.code != _NOT_CANCELABLE:
                    raise

    # -- the turn ----------------------------------------------------------------------------------
    def _message(self, session: ProviderSession, prompt: str) -> dict[str, Any]:
        message: dict[str, Any] = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": prompt}]}
        context_id = session.state.get("a2a_context_id") or session.provider_session_id
        if isinstance(context_id, str) and context_id:
            message["contextId"] = context_id
        waiting = session.state.get("a2a_waiting_task")
        if isinstance(waiting, str) and waiting:
            message["taskId"] = waiting  # the answer to the agent's input-required question
        return message

    async def _turn(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        wire = session.state.get("a2a_wire")
        info = session.state.get("a2a_card")
        if not isinstance(wire, A2AWire) or not isinstance(info, AgentCardInfo):
            raise InvalidRequest("a2a: the session is not open (closed already?)")
        params: dict[str, Any] = {"message": self._message(session, prompt)}
        for key in ("a2a_task_id", "a2a_cancelled"):
            session.state.pop(key, None)
        store = session.store
        if store is not None:
            store.append_raw(session.session_id, session.turn, "in", "a2a", json.dumps(params))
        if self._streams(info):
            source = wire.stream("SendStreamingMessage", params, timeout=self._seconds("request_timeout"))
        else:
            params["configuration"] = {"returnImmediately": True}
            source = self._polled(wire, params)
        queue: asyncio.Queue[object] = asyncio.Queue()
        session.state["a2a_queue"] = queue
        pump = asyncio.create_task(_pump(source, queue))
        try:
            async for event in self._translated(session, queue):
                yield event
        finally:
            session.state.pop("a2a_queue", None)
            pump.cancel()
            with contextlib.suppress(BaseException):
                await pump

    async def _translated(self, session: ProviderSession, queue: asyncio.Queue[object]) -> AsyncIterator[Event]:
        translator = A2ATranslator()
        loop = asyncio.get_running_loop()
        turn_timeout = self._seconds("turn_timeout")
        deadline = loop.time() + turn_timeout
        timed_out = False  # the turn passed turn_timeout: its task is being cancelled, then it fails
        stopping = False  # aborted or timed out: waiting (cancel_timeout at most) for the task to end
        store = session.store
        while not translator.done:
            if session.aborted and not stopping:
                stopping = True
                deadline = min(deadline, loop.time() + self._seconds("cancel_timeout"))
            try:
                item = await asyncio.wait_for(queue.get(), timeout=max(deadline - loop.time(), 0.0))
            except TimeoutError:
                if stopping:
                    break
                timed_out = stopping = True
                deadline = loop.time() + self._seconds("cancel_timeout")
                await self._cancel(session)
                continue
            if item is _ABORTED:
                continue
            if item is _END:
                if stopping:
                    break
                raise _ended_early(translator.state)
            if isinstance(item, BaseException):
                if stopping and isinstance(item, SeamlineError):
                    break  # the stream broke because the task was cancelled
                raise item
            if store is not None:
                store.append_raw(session.session_id, session.turn, "out", "a2a", json.dumps(item))
            known = translator.context_id
            events = translator.feed(item)
            if translator.context_id and translator.context_id != known:
                session.state["a2a_context_id"] = translator.context_id
                if translator.context_id != session.provider_session_id:
                    yield Session(
                        session_id=session.session_id,
                        provider=self.name,
                        model=self.model,
                        provider_session_id=translator.context_id,
                    )
            if translator.task_id and session.state.get("a2a_task_id") != translator.task_id:
                session.state["a2a_task_id"] = translator.task_id
                if stopping:
                    await self._cancel(session)  # stopped before the task had an id
            for event in events:
                yield event
        if timed_out:
            raise TimeoutFailure(f"a2a: the turn passed its timeout of {turn_timeout:g} s; its task was cancelled")
        waiting = translator.task_id if translator.state == "TASK_STATE_INPUT_REQUIRED" else None
        if waiting != session.state.get("a2a_waiting_task"):
            session.state["a2a_waiting_task"] = waiting
            if store is not None:  # a resumed session answers the question too
                store.update_metadata(session.session_id, {"a2a_waiting_task": waiting})
        ending = translator.ending
        if ending is None or (session.aborted and ending.outcome != "aborted"):
            ending = Complete(outcome="aborted", stop_reason="cancelled", text=translator.final_text())
        yield ending

    async def _polled(self, wire: A2AWire, params: dict[str, Any]) -> AsyncIterator[Any]:
        """A turn without streaming: the ``SendMessage`` result, then the task every
        ``poll_interval`` seconds until it settles."""
        timeout = self._seconds("request_timeout")
        result = await wire.call("SendMessage", params, timeout=timeout)
        yield result
        task = result.get("task") if isinstance(result, dict) else None
        while isinstance(task, dict) and _state(task) not in TERMINAL | INTERRUPTED:
            task_id = task.get("id")
            if not isinstance(task_id, str):
                return
            await asyncio.sleep(self._seconds("poll_interval"))
            task = await wire.call("GetTask", {"id": task_id}, timeout=timeout)
            yield {"task": task}


async def _pump(source: AsyncIterator[Any], queue: asyncio.Queue[object]) -> None:
    """Move what ``source`` yields into ``queue``; then its failure, or the end."""
    try:
        async for item in source:
            queue.put_nowait(item)
    except SeamlineError as exc:
        queue.put_nowait(exc)
        return
    except Exception as exc:  # noqa: BLE001 - a bug below becomes the turn's classified failure
        queue.put_nowait(exc)
        return
    queue.put_nowait(_END)


def _state(task: dict[str, Any]) -> str | None:
    status = task.get("status")
    state = status.get("state") if isinstance(status, dict) else None
    return state if isinstance(state, str) else None


def _ended_early(state: str | None) -> SeamlineError:
    return ProviderFailure(f"a2a: the agent's answer ended before the task settled (last state: {state or 'none'})")
