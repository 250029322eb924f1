"""Failover: a turn that fails for want of capacity is sent again on the next backend.

A run given fallbacks (``seamline run --fallback PROVIDER[:MODEL]``, ``fallback=`` of
:class:`~seamline.runner.RunOptions` and :class:`~seamline.Agent`, ``fallback`` in an agents
file) drives its session through a :class:`Failover`. When a turn ends ``failed`` with an
error that says the backend has no capacity now (:func:`fails_over`: ``quota``, which is a
rate limit past the retry bound or credit run out, or a retryable ``provider`` failure, which
is an overloaded backend, Anthropic's 529, or a 5xx past the retry bound), the session is
handed over to the next fallback (the handoff of :mod:`seamline.sessions.handoffs`: the new
backend continues with the transcript as its history) and the same prompt is sent again as
the same turn. The fallbacks are tried in order, each at most once per turn; when none is
left the turn ends with its last failure. The budget of the turn covers every attempt.

What is recorded: the failed attempt stays in the raw log and the ledger, followed by a raw
row ``handoff`` (from, to, reason, message); the session's ``metadata["handoffs"]`` gets
the switch with its ``reason``; the transcript keeps the attempt that answered (a turn's
rows before its last prompt are left out of it, see :mod:`seamline.sessions.transcript`), so
the prompt is there once. The stream shows the failed attempt's events (its ``error``
included, but not its ``complete``), then ``raw`` ``handoff``, then the new backend's
``session`` and the rest of the turn: still one ``complete``.

>>> parse_fallback("openai:gpt-4o-mini")
Fallback(provider='openai', model='gpt-4o-mini', options=None)
>>> parse_fallback("offline")
Fallback(provider='offline', model=None, options=None)
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seamline.errors import InvalidRequest, SeamlineError
from seamline.events import Complete, Error, Event, Raw
from seamline.loop.messages import Message
from seamline.providers.base import Provider, ProviderSession, messages_from_transcript
from seamline.providers.registry import create_provider, provider_class
from seamline.providers.settings import ProviderSettings
from seamline.sessions.handoffs import handoffs_of

__all__ = ["Fallback", "FallbackChoice", "Failover", "fails_over", "fallback_backends", "parse_fallback"]


@dataclass(frozen=True, slots=True)
class Fallback:
    """A backend to hand a session to when its turn fails for want of capacity: a provider
    by name, its model (``None``: the provider's default) and its own options (a fallback
    gets none of the primary's)."""

    provider: str
    model: str | None = None
    options: Mapping[str, str] | None = None


FallbackChoice = str | Fallback | Provider | ProviderSettings
"""A fallback as ``fallback=`` takes it: ``"PROVIDER[:MODEL]"``, a :class:`Fallback`,
typed settings or a provider object."""


def parse_fallback(text: str, *, options: Mapping[str, str] | None = None) -> Fallback:
    """``PROVIDER[:MODEL]`` as a :class:`Fallback` (the model may hold colons itself), the
    provider checked to exist; :class:`~seamline.errors.InvalidRequest` if not."""
    name, _, model = text.strip().partition(":")
    if not name:
        raise InvalidRequest(f"fallback {text!r}: give PROVIDER or PROVIDER:MODEL")
    provider_class(name)  # an unknown provider fails here, naming the known ones
    return Fallback(provider=name, model=model or None, options=dict(options) if options else None)


def fallback_backends(choices: Sequence[FallbackChoice], *, budget_usd: float | None = None) -> list[Provider]:
    """The fallbacks as provider objects, each checked (its name, options and whether the
    budget can be enforced on it) before anything starts."""
    found: list[Provider] = []
    for choice in choices:
        if isinstance(choice, Provider):
            backend = choice
        elif isinstance(choice, ProviderSettings):
            backend = choice.create()
        else:
            given = parse_fallback(choice) if isinstance(choice, str) else choice
            backend = create_provider(given.provider, model=given.model, options=given.options)
        backend.check_budget(budget_usd)
        found.append(backend)
    return found


def fails_over(error: Error) -> bool:
    """Whether a turn that ended with ``error`` goes to the next backend: the backend has
    no capacity now (rate limited or out of quota, overloaded or failing with a 5xx past
    the retry bound). An invalid request, a refused key or a broken tool does not."""
    return error.kind == "quota" or (error.kind == "provider" and error.retryable)


class Failover:
    """The turns of one session with fallbacks: :meth:`send` as
    :meth:`ProviderSession.send <seamline.providers.base.ProviderSession.send>`, handing the
    session over when a turn fails for want of capacity. Sessions it opens it closes in
    :meth:`aclose`; the first one is its opener's to close. ``on_open`` hears each session
    it opens (a CLI aborts the latest one on Ctrl-C)."""

    def __init__(
        self,
        session: ProviderSession,
        backups: Sequence[Provider],
        *,
        on_open: Callable[[ProviderSession], None] | None = None,
    ) -> None:
        if session.store is None:
            raise InvalidRequest("fallback= needs a store: the next backend continues from the stored transcript")
        self.session = session
        self._backups = tuple(backups)
        self._at: int | None = None  # which fallback holds the session (None: the first backend)
        self._opened: list[ProviderSession] = []
        self._on_open = on_open

    @property
    def session_id(self) -> str:
        return self.session.session_id

    async def send(
        self,
        prompt: str,
        *,
        max_steps: int = 50,
        budget_usd: float | None = None,
        params: Mapping[str, object] | None = None,
    ) -> AsyncIterator[Event]:
        """Run one turn, on the next backends in turn while it fails for want of capacity;
        the last event is the turn's only ``complete``."""
        tried: set[int | None] = {self._at}
        spent = 0.0
        while True:
            session = self.session
            left = None if budget_usd is None else max(budget_usd - spent, 0.0)
            final: Complete | None = None
            last_error: Error | None = None
            events = session.send(prompt, max_steps=max_steps, budget_usd=left, params=params)
            try:
                async for event in events:
                    if isinstance(event, Complete):
                        final = event
                        continue
                    if isinstance(event, Error):
                        last_error = event
                    yield event
            finally:
                if isinstance(events, AsyncGenerator):
                    await events.aclose()  # a reader that stopped early ends the attempt now
            assert final is not None  # the seam ends every turn with one
            spent += session.totals.cost_usd
            handed: Raw | None = None
            if _wanted(final, last_error):
                assert last_error is not None
                while handed is None and (nxt := self._next(tried)) is not None:
                    tried.add(nxt)
                    taken = await self._hand_over(nxt, last_error)
                    if isinstance(taken, Raw):
                        handed = taken
                        continue
                    yield taken  # this fallback could not take the session: the next one may
                    final = Complete(outcome="failed", stop_reason=taken.kind)
            if handed is None:
                yield final
                return
            yield handed
            if session.aborted:  # stopped (Ctrl-C) while the next backend was made ready: no new attempt
                yield Complete(outcome="aborted", stop_reason="aborted")
                return

    def _next(self, tried: set[int | None]) -> int | None:
        return next((i for i in range(len(self._backups)) if i not in tried), None)

    async def _hand_over(self, index: int, error: Error) -> Raw | Error:
        """Give the session to fallback ``index`` for the failed turn; the ``raw`` event
        that says so, or the error of a fallback that could not take it."""
        old, backend = self.session, self._backups[index]
        store = old.store
        assert store is not None
        turn = old.turn
        switch: dict[str, Any] = {
            "from": old.provider.name,
            "from_model": old.provider.model,
            "to": backend.name,
            "to_model": backend.model,
            "reason": error.kind,
            "message": error.message,
            "turn": turn,
        }
        store.flush()  # the failed attempt's rows, for the transcript the next backend starts from
        try:
            _can_take(backend)  # before the record is switched: a fallback that cannot start leaves it be
            # Recorded here, not by resume(handoff=True): a fallback on the same provider is a switch too.
            store.hand_over(old.session_id, provider=backend.name, model=backend.model)
            new = await backend.resume(
                old.session_id, store=store, tools=old.tools, observers=old.observers, approval=old.approval
            )
        except SeamlineError as exc:
            return exc.to_event()
        store.append_raw(old.session_id, turn, "out", "handoff", json.dumps(switch))  # after the failed attempt
        store.flush()
        _carry_over(old, new)
        _note_reason(new, switch)
        self._opened.append(new)
        self.session, self._at = new, index
        if self._on_open is not None:
            self._on_open(new)
        return Raw(source="handoff", payload=switch)

    async def aclose(self) -> None:
        """Close the sessions opened here, newest first."""
        while self._opened:
            session = self._opened.pop()
            await session.provider.close(session)


def _can_take(backend: Provider) -> None:
    """The checks :meth:`Provider.resume` makes first (real calls allowed, a key present…);
    made here, in the seam's room, because the record is switched before the resume."""
    backend._check_allowed()  # pyright: ignore[reportPrivateUsage]
    backend._ready()  # pyright: ignore[reportPrivateUsage]
    if backend.resume_support == "none":
        raise InvalidRequest(f"provider {backend.name} cannot resume a session, so it cannot take one over")


def _wanted(final: Complete, error: Error | None) -> bool:
    return final.outcome == "failed" and error is not None and error.kind == final.stop_reason and fails_over(error)


def _carry_over(old: ProviderSession, new: ProviderSession) -> None:
    """The new backend's session sends the failed turn again: its history is the transcript
    before that turn, with the old session's instructions, stages and turn hooks."""
    store = new.store
    assert store is not None
    earlier = [e for e in store.transcript(new.session_id) if e.turn < old.turn]
    new.history = earlier
    new.messages = messages_from_transcript(earlier)
    if old.messages and old.messages[0].role == "system":
        new.messages.insert(0, Message(role="system", content=old.messages[0].content))
    new.turn = old.turn - 1  # send() numbers the attempt as the failed turn again
    new.stages = old.stages
    new.turn_hooks = list(old.turn_hooks)  # a worktree run commits the turn, whoever answered it


def _note_reason(new: ProviderSession, switch: Mapping[str, Any]) -> None:
    """The handoff entry the resume recorded, made a failover's: why, and that the failed
    turn belongs to the new backend (it answers it)."""
    store = new.store
    assert store is not None
    record = store.require(new.session_id)
    handoffs = handoffs_of(record.metadata)
    if not handoffs:
        return
    entry = handoffs[-1]
    turn = int(switch["turn"])
    entry.update(
        after_turn=turn - 1,
        at_message=len(new.history),
        reason=switch["reason"],
        message=switch["message"],
        failover=True,
    )
    store.update_metadata(new.session_id, {"handoffs": [*handoffs[:-1], entry]})
