"""The seam keeps its settle invariants whatever a provider does: proven with bad providers."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import ClassVar

import pytest

from seamline.errors import QuotaExceeded
from seamline.events import Complete, Error, Event, Session, Text, TextDelta, Usage
from seamline.loop.messages import ModelRequest
from seamline.providers.base import Provider, ProviderSession, new_session_id
from seamline.sessions.sqlite_store import SQLiteStore


class OwnToolsProvider(Provider):
    """A provider that runs its own tools and plays a fixed list of events."""

    name: ClassVar[str] = "own-tools"
    runs_own_tools = True
    real = False
    script: ClassVar[list[Event | BaseException]] = []

    async def _turn(self, session: ProviderSession, prompt: str) -> AsyncIterator[Event]:
        for item in self.script:
            if isinstance(item, BaseException):
                raise item
            yield item


def make(script: list[Event | BaseException]) -> type[OwnToolsProvider]:
    return type("P", (OwnToolsProvider,), {"script": script})


async def turn(
    provider: Provider, store: SQLiteStore | None = None, prompt: str = "hi"
) -> tuple[ProviderSession, list[Event]]:
    session = await provider.open(store=store)
    events = [e async for e in session.send(prompt)]
    return session, events


def check_shape(events: list[Event]) -> Complete:
    assert isinstance(events[0], Session)
    completes = [e for e in events if isinstance(e, Complete)]
    assert len(completes) == 1
    assert events[-1] is completes[0]
    return completes[0]


def test_events_after_complete_are_dropped() -> None:
    cls = make([Text(text="a"), Complete(outcome="completed", stop_reason="end_turn", text="a"), Text(text="late")])
    _, events = asyncio.run(turn(cls()))
    final = check_shape(events)
    assert final.outcome == "completed"
    assert not any(isinstance(e, Text) and e.text == "late" for e in events)


def test_two_completes_give_one() -> None:
    cls = make([Complete(outcome="completed", stop_reason="a"), Complete(outcome="failed", stop_reason="b")])
    _, events = asyncio.run(turn(cls()))
    assert check_shape(events).stop_reason == "a"


def test_missing_complete_is_supplied_as_failure() -> None:
    cls = make([TextDelta(text="x")])
    _, events = asyncio.run(turn(cls()))
    final = check_shape(events)
    assert final.outcome == "failed"
    assert any(isinstance(e, Error) and "without a result" in e.message for e in events)


def test_exception_mid_stream_is_classified_and_record_kept(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    cls = make([Text(text="before the crash"), RuntimeError("kaboom")])
    session, events = asyncio.run(turn(cls(), store))
    final = check_shape(events)
    assert final.outcome == "failed"
    errors = [e for e in events if isinstance(e, Error)]
    assert errors and errors[0].kind == "provider" and "kaboom" in errors[0].message
    store.close()
    reopened = SQLiteStore(tmp_path / "s.db")
    payloads = [r.payload for r in reopened.raw_rows(session.session_id)]
    assert any("before the crash" in p for p in payloads)
    assert any("kaboom" in p for p in payloads)
    assert reopened.get(session.session_id).status == "failed"  # type: ignore[union-attr]


def test_classified_exception_keeps_its_kind() -> None:
    cls = make([QuotaExceeded("rate limited")])
    _, events = asyncio.run(turn(cls()))
    final = check_shape(events)
    assert final.stop_reason == "quota"
    assert [e.kind for e in events if isinstance(e, Error)] == ["quota"]


def test_provider_session_id_captured_once_and_stored(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    cls = make(
        [
            Session(session_id="ignored", provider="x", model=None, provider_session_id="native-1"),
            Session(session_id="ignored", provider="x", model=None, provider_session_id="native-1"),
            Session(session_id="ignored", provider="x", model=None, provider_session_id="native-2"),
            Complete(outcome="completed", stop_reason="end_turn"),
        ]
    )
    session, events = asyncio.run(turn(cls(), store))
    check_shape(events)
    sessions = [e for e in events if isinstance(e, Session)]
    assert [s.provider_session_id for s in sessions] == [None, "native-1"]
    assert all(s.session_id == session.session_id for s in sessions)
    assert any(isinstance(e, Error) and "second session id" in e.message for e in events)
    assert session.provider_session_id == "native-1"
    assert store.get(session.session_id).provider_session_id == "native-1"  # type: ignore[union-attr]


def test_usage_is_never_counted_twice() -> None:
    u = Usage(input_tokens=10, output_tokens=5, cost_usd=0.25, priced=True, usage_id="u1")
    cls = make(
        [
            u,
            u,
            Usage(input_tokens=1, output_tokens=1, cost_usd=0.5, priced=True, usage_id="u2"),
            Complete(outcome="completed", stop_reason="end_turn"),
        ]
    )
    session, events = asyncio.run(turn(cls()))
    check_shape(events)
    usages = [e for e in events if isinstance(e, Usage)]
    assert [x.usage_id for x in usages] == ["u1", "u2"]
    assert session.totals.input_tokens == 11
    assert session.totals.cost_usd == pytest.approx(0.75)


def test_usage_is_never_counted_twice_in_a_turn_of_many_model_calls() -> None:
    """The ids seen are kept as a list for a few figures, then as a set: a repeat is
    dropped on either side of the change, and every other figure is counted."""
    figures = [Usage(input_tokens=1, output_tokens=0, cost_usd=0.0, priced=True, usage_id=f"u{k}") for k in range(40)]
    repeats = [figures[3], figures[30], figures[0], figures[39]]
    cls = make(
        [*figures[:20], *repeats[:1], *figures[20:], *repeats[1:], Complete(outcome="completed", stop_reason="x")]
    )
    session, events = asyncio.run(turn(cls()))
    check_shape(events)
    assert [e.usage_id for e in events if isinstance(e, Usage)] == [f"u{k}" for k in range(40)]
    assert session.totals.input_tokens == 40


def test_unpriced_usage_stays_unknown() -> None:
    cls = make(
        [
            Usage(input_tokens=10, output_tokens=5, model="mystery-model-1"),
            Complete(outcome="completed", stop_reason="x"),
        ]
    )
    session, events = asyncio.run(turn(cls()))
    usage = next(e for e in events if isinstance(e, Usage))
    assert usage.priced is False and usage.cost_usd is None
    assert session.totals.cost_known is False


def test_budget_stops_the_turn() -> None:
    cls = make(
        [
            Usage(cost_usd=1.0, priced=True, usage_id="a"),
            Usage(cost_usd=1.0, priced=True, usage_id="b"),
            Text(text="never"),
            Complete(outcome="completed", stop_reason="end_turn"),
        ]
    )

    async def go() -> list[Event]:
        session = await cls().open()
        return [e async for e in session.send("x", budget_usd=1.5)]

    events = asyncio.run(go())
    final = check_shape(events)
    assert final.outcome == "budget"
    assert not any(isinstance(e, Text) for e in events)
    assert any(isinstance(e, Error) and e.kind == "budget" for e in events)


class StepRaises(Provider):
    name: ClassVar[str] = "step-raises"
    real = False

    async def _steps(self, request: ModelRequest) -> AsyncIterator[Event]:
        yield TextDelta(text="partial ")
        raise ValueError("broken decoder")

    def _step(self, request: ModelRequest) -> AsyncIterator[Event]:
        return self._steps(request)


def test_loop_provider_raising_mid_stream(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    session, events = asyncio.run(turn(StepRaises(), store))
    final = check_shape(events)
    assert final.outcome == "failed"
    assert any(isinstance(e, Error) and e.kind == "provider" and "broken decoder" in e.message for e in events)
    store.flush()
    assert any("partial" in r.payload for r in store.raw_rows(session.session_id))


def test_unknown_option_is_refused() -> None:
    from seamline.errors import InvalidRequest
    from seamline.providers.local.offline import OfflineProvider

    with pytest.raises(InvalidRequest, match=r"unknown option.*bogus.*known: max_files, passages"):
        OfflineProvider(options={"bogus": "1"})


def test_block_switch_refuses_real_providers() -> None:
    from seamline.errors import PermissionDenied

    class RealOne(Provider):
        name: ClassVar[str] = "real-one"
        real = True

    with pytest.raises(PermissionDenied, match="SEAMLINE_BLOCK_REAL_PROVIDERS"):
        asyncio.run(RealOne().open())


def test_capabilities_are_read_from_class_attributes() -> None:
    caps = OwnToolsProvider.capabilities()
    assert caps.runs_own_tools is True
    assert caps.forking == "emulated"


def test_a_new_session_id_is_a_version_4_uuid_in_hex() -> None:
    ids = {new_session_id() for _ in range(2000)}
    assert len(ids) == 2000
    for sid in ids:
        parsed = uuid.UUID(hex=sid)
        assert (parsed.version, parsed.variant, parsed.hex) == (4, uuid.RFC_4122, sid)


def test_session_ids_made_at_once_differ_in_their_first_eight_characters() -> None:
    """Users see and type the head of an id: `sessions list` and every message show 12
    characters, a unique prefix of 4 or more names a session, and a worktree run's branch is
    ``seamline/<first 8>``. Ids made in the same millisecond (a race's racers) must not share
    it, so a time-ordered id (UUIDv7, its first 12 digits the time) is no choice here."""
    heads = [new_session_id()[:8] for _ in range(1000)]
    assert len(set(heads)) >= 990
    assert len({h[:4] for h in heads}) >= 900
