"""The scripted provider records what it was sent (`calls`, `last_call`), each call as it
was at the time, so users' tests can assert on requests."""

from __future__ import annotations

from pathlib import Path

import seamline
from seamline.testing import scripted


def test_calls_are_recorded_in_order_each_as_it_was_sent(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("the secret line\n")
    fake = scripted(
        [{"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.md"}}]}, {"text": "Read it."}],
        model="m1",
    )
    assert fake.last_call is None
    agent = seamline.Agent(provider=fake, workspace=tmp_path, store=None)
    assert agent.run_sync("What do the notes say?").text == "Read it."
    first, second = fake.calls
    assert fake.last_call is second
    assert [m.role for m in first.messages] == ["user"]  # not grown by what came after
    assert [m.role for m in second.messages] == ["user", "assistant", "tool"]
    assert "the secret line" in str(second.messages[-1].content)
    assert {t.name for t in first.tools} == {"read_file", "list_dir", "grep"} and first.model == "m1"
