"""Bytes that are not UTF-8 inside a JSON string, in a trace or an event: msgspec raises
``UnicodeDecodeError`` (not ``DecodeError``) for them, and every reader still classifies the
line as malformed instead of failing with a traceback."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from seamline.events import decode_event
from seamline.telemetry.live import spans_of_trace
from seamline.trace.listing import header_run_id, list_traces
from seamline.trace.records import GENESIS, decode_body, encode_line

BAD_BODY = b'{"seq":0,"kind":"run_start","at":1.0,"d":{"pipeline":"\x80"},"o":{"run_id":"r\xff"}}'


def test_a_body_that_is_not_utf8_is_a_decode_error() -> None:
    with pytest.raises(msgspec.DecodeError, match="not UTF-8"):
        decode_body(BAD_BODY)


def test_an_event_that_is_not_utf8_is_a_decode_error() -> None:
    with pytest.raises(msgspec.DecodeError, match="not UTF-8"):
        decode_event(b'{"type": "text_delta", "text": "\xc3"}')


def test_trace_list_and_spans_skip_a_record_that_is_not_utf8(tmp_path: Path) -> None:
    trace = tmp_path / "r1.jsonl"
    trace.write_bytes(encode_line(GENESIS, BAD_BODY))
    (entry,) = list_traces(tmp_path)
    assert (entry.run_id, entry.pipeline, entry.outcome) == ("r1", None, None)
    assert header_run_id(trace) is None
    assert spans_of_trace(trace) == []
