"""Each event class's ``Literal`` ``type`` is its wire tag, so narrowing by ``type`` and
decoding agree."""

from __future__ import annotations

import typing

from seamline import events


def test_each_event_type_literal_is_its_wire_tag() -> None:
    classes = typing.get_args(events.Event)
    assert len(classes) == len(events.EVENT_TYPES)
    for kind in classes:
        tag = kind.__struct_config__.tag
        hint = typing.get_type_hints(kind.type.fget)["return"]
        assert typing.get_args(hint) == (tag,), kind.__name__
    assert events.decode_event(b'{"type":"text_delta","text":"x"}').type == "text_delta"
    assert events.Complete(outcome="completed", stop_reason="end_turn").type == "complete"
