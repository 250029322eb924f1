"""The settle invariants of one turn, kept for :meth:`ProviderSession.send`.

Whatever a provider's hooks do, the turn starts with a ``session`` event and ends with
exactly one ``complete``; the provider's session id is captured once; a usage figure is
counted once (a repeated ``usage_id`` is dropped) and priced if it came unpriced; the
budget stops the turn once passed; and the raw log holds every input and output, written
before ``complete`` is emitted.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Final, Literal, Protocol

import msgspec

from seamline.errors import SeamlineError
from seamline.events import Complete, Error, Event, Raw, ReasoningDelta, Session, TextDelta, Usage, encode_event
from seamline.sessions.portable_store import SessionStore
from seamline.usage import Rates, UsageTotals, priced_usage

__all__ = ["RawLog", "SettledBackend", "SettledSession", "TurnSettler", "set_status_quietly"]


class SettledBackend(Protocol):
    """What the settler reads of a provider: its name, model and prices."""

    @property
    def name(self) -> str: ...
    @property
    def model(self) -> str | None: ...
    def rates(self, model: str | None) -> Rates | None: ...


class SettledSession(Protocol):
    """What the settler reads and marks of a session
    (:class:`~seamline.providers.base.ProviderSession` is one; the settler needs no more,
    so this module does not import the base and the two stay out of a circle)."""

    totals: UsageTotals
    aborted: bool

    @property
    def provider(self) -> SettledBackend: ...
    @property
    def session_id(self) -> str: ...
    @property
    def store(self) -> SessionStore | None: ...
    @property
    def turn(self) -> int: ...
    @property
    def provider_session_id(self) -> str | None: ...
    @property
    def turn_hooks(self) -> Sequence[Callable[[int, Complete], Awaitable[None]]]: ...
    def capture_provider_session_id(self, provider_session_id: str) -> bool: ...


_SEEN_AS_LIST: Final = 16
"""A turn's usage ids seen so far are a list up to this many, then a set: most turns have a
few model calls, and a set of a few strings costs 500 bytes more per run in flight."""

TurnStatus = Literal["completed", "failed", "aborted", "budget", "paused"]

_STATUS: Final[dict[str, TurnStatus]] = {
    "completed": "completed",
    "failed": "failed",
    "aborted": "aborted",
    "budget": "budget",
}


class RawLog:
    """Buffers raw-log rows of one turn; consecutive deltas are coalesced into one row."""

    __slots__ = ("_delta", "_delta_kind", "_session_id", "_store", "_turn", "stored")

    def __init__(self, store: SessionStore | None, session_id: str, turn: int) -> None:
        self._store = store
        self.stored = store is not None  # without a store every write is a no-op
        self._session_id = session_id
        self._turn = turn
        self._delta_kind: type[TextDelta] | type[ReasoningDelta] | None = None
        self._delta: list[str] = []

    def record_input(self, source: str, payload: str) -> None:
        if self._store is not None:
            self._store.append_raw(self._session_id, self._turn, "in", source, msgspec.json.encode(payload).decode())

    def delta(self, event: TextDelta) -> None:
        if self._store is None:
            return
        if self._delta_kind is not TextDelta:
            self._flush_delta()
            self._delta_kind = TextDelta
        self._delta.append(event.text)

    def record(self, event: Event) -> None:
        store = self._store
        if store is None:
            return
        if isinstance(event, TextDelta | ReasoningDelta):
            kind = type(event)
            if self._delta_kind is not kind:
                self._flush_delta()
                self._delta_kind = kind
            self._delta.append(event.text)
            return
        if self._delta:
            self._flush_delta()
        if isinstance(event, Raw):
            payload = msgspec.json.encode(event.payload).decode()
            store.append_raw(self._session_id, self._turn, "out", event.source, payload)
        else:
            store.append_raw(self._session_id, self._turn, "out", "event", encode_event(event).decode())

    async def record_usage(self, usage: Usage) -> None:
        """Write the usage figure and every row before it now: a crash keeps what was spent.
        Concurrent sessions on one store share the commit."""
        if self._store is not None:
            self._flush_delta()
            await self._store.record_usage_grouped(self._session_id, self._turn, usage)

    def _flush_delta(self) -> None:
        if self._delta and self._store is not None and self._delta_kind is not None:
            merged = self._delta_kind(text="".join(self._delta))
            self._store.append_raw(self._session_id, self._turn, "out", "event", encode_event(merged).decode())
        self._delta = []
        self._delta_kind = None

    async def finish(self, status: TurnStatus) -> None:
        """Write what is queued and the session's final status together (group commit)."""
        if self._store is not None:
            self._flush_delta()
            await self._store.finish_turn_grouped(self._session_id, status)

    def flush(self, *, quiet: bool = False) -> None:
        self._flush_delta()
        if self._store is None:
            return
        try:
            self._store.flush()
        except SeamlineError:
            if not quiet:
                raise


class TurnSettler:
    """One turn of a session on its way to its one ``complete``: what each event the
    provider sends turns into, and how the turn ends."""

    __slots__ = ("budget_usd", "final", "log", "seen_usage", "session", "totals")

    def __init__(self, session: SettledSession, budget_usd: float | None) -> None:
        self.session = session
        self.budget_usd = budget_usd
        self.log = RawLog(session.store, session.session_id, session.turn)
        self.totals = session.totals = UsageTotals()
        self.seen_usage: list[str] | set[str] = []  # a set once past _SEEN_AS_LIST
        self.final: Complete | None = None

    def opening(self) -> Session:
        """The turn's first event: which session, provider and model."""
        session = self.session
        first = Session(
            session_id=session.session_id,
            provider=session.provider.name,
            model=session.provider.model,
            provider_session_id=session.provider_session_id,
        )
        self.log.record(first)
        return first

    def provider_session(self, event: Session) -> Event | None:
        """What the consumer sees of a ``session`` event the provider sent (its own id),
        logged; other events the caller logs itself (one call less per event)."""
        session = self.session
        psid = event.provider_session_id
        if not psid or psid == session.provider_session_id:
            return None
        out: Event
        if session.capture_provider_session_id(psid):
            provider = session.provider
            out = Session(
                session_id=session.session_id,
                provider=provider.name,
                model=event.model or provider.model,
                provider_session_id=psid,
            )
        else:
            out = Error(
                kind="provider",
                message=f"provider reported a second session id {psid!r}; keeping {session.provider_session_id!r}",
            )
        self.log.record(out)
        return out

    def count(self, event: Usage) -> Usage | None:
        """A usage figure, priced if it came unpriced, added to the turn's totals and logged;
        ``None`` for one already counted (its ``usage_id`` seen before). The caller writes it
        (:meth:`RawLog.record_usage`) before passing it on: a crash keeps what was spent."""
        if (usage_id := event.usage_id) is not None:
            seen = self.seen_usage
            if usage_id in seen:
                self.log.record(Raw(source="seamline", payload={"dropped_duplicate_usage": usage_id}))
                return None
            if isinstance(seen, set):
                seen.add(usage_id)
            else:
                seen.append(usage_id)
                if len(seen) > _SEEN_AS_LIST:
                    self.seen_usage = set(seen)
        usage = event
        if not usage.priced:
            provider = self.session.provider
            model = usage.model or provider.model
            usage = priced_usage(usage, model=model, rates=provider.rates(model))
        self.totals.add(usage)
        if self.log.stored:
            self.log.record(usage)
        return usage

    def over_budget(self) -> Error | None:
        """After a usage: the ``budget`` error that ends the turn, once the budget is passed."""
        budget_usd = self.budget_usd
        if budget_usd is None or self.totals.cost_usd <= budget_usd:
            return None
        message = f"cost {self.totals.cost_usd:.6f} USD passed the budget of {budget_usd:.6f} USD"
        err = Error(kind="budget", message=message)
        self.log.record(err)
        self.final = Complete(outcome="budget", stop_reason="budget", text="")
        self.session.aborted = True
        return err

    def fail(self, err: Error, final: Complete) -> Error:
        """The provider's stream broke: the error is logged, the turn will end ``final``."""
        self.log.record(err)
        self.final = final
        return err

    def cancelled(self) -> None:
        """Cancelled from outside: what was recorded stays, the session is marked."""
        self.log.record(Complete(outcome="aborted", stop_reason="cancelled"))
        self.log.flush(quiet=True)
        set_status_quietly(self.session, "aborted")

    def unfinished(self) -> Error | None:
        """The error of a provider that ended the turn without a result, if it did."""
        if self.final is not None:
            return None
        message = f"provider {self.session.provider.name} ended the turn without a result"
        return self.fail(Error(kind="provider", message=message), Complete(outcome="failed", stop_reason="no_result"))

    def plain_end(self) -> Complete | None:
        """The turn's ``complete`` when :meth:`finish` would do nothing but yield it (no turn
        hooks, no store), else None."""
        return self.final if not self.session.turn_hooks and not self.log.stored else None

    async def finish(self) -> AsyncIterator[Event]:
        """Run the session's turn hooks, write what is queued and the final status
        together, then end the turn. A hook that fails with a classified error fails the
        turn; the turn still ends with its one ``complete``."""
        final = self.final
        assert final is not None
        for hook in self.session.turn_hooks:  # a worktree run commits the turn (seamline.worktrees)
            try:
                await hook(self.session.turn, final)
            except SeamlineError as exc:
                failure = exc.to_event()
                self.log.record(failure)
                yield failure
                final = Complete(outcome="failed", stop_reason=exc.kind, text=final.text)
            except BaseException:
                self.cancelled()
                raise
        self.log.record(final)
        # A turn paused at its budget leaves the session ``paused`` (raise the budget to go on).
        status = "paused" if final.stop_reason == "paused" and final.outcome == "budget" else _STATUS[final.outcome]
        try:
            await self.log.finish(status)
        except SeamlineError as exc:
            yield exc.to_event()
            final = Complete(outcome="failed", stop_reason=exc.kind, text=final.text)
            set_status_quietly(self.session, "failed")
        yield final


def set_status_quietly(
    session: SettledSession, status: Literal["open", "completed", "failed", "aborted", "budget", "paused"]
) -> None:
    """Mark the session; a store that cannot be written now must not hide the turn's end."""
    if session.store is not None:
        try:
            session.store.set_status(session.session_id, status)
        except SeamlineError:
            pass
