"""Property checks every agent-CLI parser must pass, on damaged copies of real output.

- no input makes a parser raise;
- a damaged line (cut short, or bytes garbled so it is no longer JSON) gives only ``raw``
  and classified ``error`` events;
- every event a parser gave before the damage is kept exactly (feeding is incremental);
- whatever the lines, ``finish`` ends the turn with exactly one ``complete``.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from seamline.errors import ERROR_KINDS
from seamline.events import Complete, Error, Event, Raw
from seamline.providers.agent_clis.parsers.base import StreamParser

ParserFactory = Callable[[], StreamParser]


def _events(parser: StreamParser, lines: list[bytes]) -> list[Event]:
    out: list[Event] = []
    for line in lines:
        out.extend(parser.feed(line))
    return out


def check_damage(factory: ParserFactory, lines: list[bytes]) -> Callable[[], None]:
    @settings(max_examples=60, deadline=None)
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        at = data.draw(st.integers(min_value=0, max_value=len(lines) - 1), label="damaged line")
        line = lines[at]
        how = data.draw(st.sampled_from(["truncate", "garble", "prefix"]), label="damage")
        if how == "truncate" and len(line) > 1:
            cut = data.draw(st.integers(min_value=1, max_value=len(line) - 1), label="cut")
            damaged = line[:cut]
        elif how == "garble":
            damaged = data.draw(st.binary(min_size=1, max_size=64), label="bytes") + b"\x00{"
        else:
            damaged = b"\xff" + line
        clean = _events(factory(), lines[:at])
        parser = factory()
        before = _events(parser, lines[:at])
        assert before == clean  # everything before the damage is kept, unchanged
        after = parser.feed(damaged)
        for event in after:
            assert isinstance(event, Raw | Error), event
            if isinstance(event, Error):
                assert event.kind in ERROR_KINDS
        rest = _events(parser, lines[at + 1 :])
        ending = parser.finish(returncode=1)
        assert all(not isinstance(e, Complete) for e in [*before, *after, *rest])
        assert sum(isinstance(e, Complete) for e in ending) == 1 and isinstance(ending[-1], Complete)

    return run


def check_shuffled(factory: ParserFactory, lines: list[bytes]) -> Callable[[], None]:
    @settings(max_examples=60, deadline=None)
    @given(order=st.permutations(lines), drop=st.integers(min_value=0, max_value=len(lines)))
    def run(order: list[bytes], drop: int) -> None:
        parser = factory()
        events = _events(parser, order[drop:])
        ending = parser.finish(returncode=0)
        assert not [e for e in events if isinstance(e, Complete)]
        assert sum(isinstance(e, Complete) for e in ending) == 1

    return run


def check_random(factory: ParserFactory) -> Callable[[], None]:
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
        max_leaves=20,
    )
    kinds = st.sampled_from(
        ["system", "assistant", "user", "result", "stream_event", "thread.started", "item.completed",
         "item.started", "turn.completed", "turn.failed", "error", "init", "message", "tool_use",
         "tool_result", "x"]
    )  # fmt: skip
    frames = st.builds(
        lambda kind, body: {**body, "type": kind} if isinstance(body, dict) else body,
        kinds,
        st.dictionaries(
            st.sampled_from(
                [
                    "message",
                    "item",
                    "session_id",
                    "thread_id",
                    "subtype",
                    "usage",
                    "content",
                    "event",
                    "is_error",
                    "status",
                    "stats",
                    "error",
                    "tool_id",
                    "role",
                    "delta",
                    "result",
                    "text",
                ]
            ),
            json_values,
            max_size=6,
        ),
    )

    @settings(max_examples=200, deadline=None)
    @given(st.lists(frames, max_size=12))
    def run(items: list[object]) -> None:
        import json

        parser = factory()
        for item in items:
            parser.feed(json.dumps(item).encode())
        ending = parser.finish(returncode=0)
        assert sum(isinstance(e, Complete) for e in ending) == 1

    return run
