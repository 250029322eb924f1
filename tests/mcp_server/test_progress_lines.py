"""What a tool call's progress messages say: the streamed text once, a step's whole text
where it was not streamed, and the tool activity by name."""

from __future__ import annotations

from seamline.events import FileChange, Text, TextDelta, ToolCall, ToolResult, Usage
from seamline.mcp_server.server import ProgressLines


def test_whole_text_is_said_only_where_it_was_not_streamed() -> None:
    lines = ProgressLines()
    assert lines.message([Text(text="Looking.")]) == "Looking."
    assert lines.message([TextDelta(text="Do"), TextDelta(text="ne.")]) == "Done."
    assert lines.message([Text(text="Done.")]) is None  # already said, delta by delta
    assert lines.message([Text(text="Next.")]) == "Next."


def test_tool_activity_names_the_tool_and_what_changed() -> None:
    lines = ProgressLines()
    call = ToolCall(call_id="c1", name="write_file", arguments={"path": "a.txt"})
    assert lines.message([call]) == 'tool write_file {"path": "a.txt"}'
    said = lines.message([FileChange(path="a.txt", kind="created"), ToolResult(call_id="c1", output="ok")])
    assert said == "created a.txt · tool write_file done"
    assert lines.message([Usage(input_tokens=1, output_tokens=1)]) is None
