"""Property tests of the ACP translator: random, truncated and reordered ``session/update``
payloads never crash it, and its invariants hold (one ``tool_call`` per call id, a result
only after its call, the final text is what streamed in the last block)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from seamline.events import Text, TextDelta, ToolCall, ToolResult
from seamline.providers.acp.provider import AcpTranslator
from tests.providers.agent_cli_support import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "acp"


def captured_updates() -> list[dict[str, Any]]:
    found = []
    for path in sorted(FIXTURES.glob("*/*.jsonl")):
        for line in path.read_text().splitlines():
            message = json.loads(line).get("message") or {}
            update = (message.get("params") or {}).get("update")
            if message.get("method") == "session/update" and isinstance(update, dict):
                found.append(update)
    return found


UPDATES = captured_updates()
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
random_update = st.dictionaries(
    st.sampled_from(["sessionUpdate", "toolCallId", "rawInput", "status", "title", "kind", "content", "_meta"]),
    json_value,
    max_size=6,
)
mutated_update = st.builds(
    lambda u, drop: {k: v for i, (k, v) in enumerate(u.items()) if i not in drop},
    st.sampled_from(UPDATES),
    st.sets(st.integers(0, 8), max_size=4),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(UPDATES), mutated_update, random_update), max_size=40))
def test_translator_never_crashes_and_keeps_its_invariants(updates: list[dict[str, Any]]) -> None:
    translator = AcpTranslator()
    events = []
    for update in updates:
        events.extend(translator.feed(update))
    events.extend(translator.closing())
    announced: set[str] = set()
    for event in events:
        if isinstance(event, ToolCall):
            assert event.call_id not in announced
            announced.add(event.call_id)
        elif isinstance(event, ToolResult):
            assert event.call_id in announced
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert "".join(e.text for e in events if isinstance(e, Text)) == streamed
