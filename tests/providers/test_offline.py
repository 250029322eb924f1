"""The offline provider answers from the workspace through real tool calls, deterministically."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from seamline.events import Complete, FileChange, Text, ToolCall, ToolResult, Usage, encode_event
from seamline.runner import run

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "install.md").write_text(
        "# Installing\n\nRun the setup script to install everything.\nIt creates a virtual environment.\n\n"
        "# Unrelated\n\nBananas are yellow.\n"
    )
    (tmp_path / "README.md").write_text("# Project\n\nA small project about fruit.\n")
    (tmp_path / "data.bin").write_bytes(b"\x00\x01")
    return tmp_path


def test_answer_cites_file_and_lines_through_tool_calls(corpus: Path) -> None:
    result = asyncio.run(run("How do I install it?", workspace=corpus))
    names = [e.name for e in result.events if isinstance(e, ToolCall)]
    assert names[0] == "list_dir" and "read_file" in names
    read = {e.arguments["path"] for e in result.events if isinstance(e, ToolCall) and e.name == "read_file"}
    assert "guide/install.md" in read and "data.bin" not in read
    assert all(not r.is_error for r in result.events if isinstance(r, ToolResult))
    assert any(isinstance(e, FileChange) and e.path == "guide/install.md" for e in result.events)
    assert result.outcome == "completed"
    assert "guide/install.md:1-4" in result.text
    assert "Run the setup script to install everything." in result.text
    assert "Bananas" not in result.text
    usages = [e for e in result.events if isinstance(e, Usage)]
    assert usages and all(u.priced and u.cost_usd == 0.0 for u in usages)


def test_same_input_same_output_byte_for_byte(corpus: Path) -> None:
    def transcript() -> bytes:
        result = asyncio.run(run("How do I install it?", workspace=corpus))
        # the session id is minted per run; everything else must match exactly
        return b"\n".join(encode_event(e) for e in result.events[1:])

    first = transcript()
    assert first == transcript()
    assert first.endswith(
        encode_event(
            Complete(
                outcome="completed",
                stop_reason="end_turn",
                text=asyncio.run(run("How do I install it?", workspace=corpus)).text,
            )
        )
    )


def test_nothing_relevant_says_so(corpus: Path) -> None:
    result = asyncio.run(run("quantum chromodynamics lattice", workspace=corpus))
    assert result.outcome == "completed"
    assert result.text.startswith("I found nothing in the workspace")


def test_answers_about_the_projects_own_docs() -> None:
    result = asyncio.run(run("How do I add a provider?", workspace=DOCS))
    assert result.outcome == "completed"
    assert "providers.md:" in result.text
    texts = [e for e in result.events if isinstance(e, Text)]
    assert texts and texts[-1].text == result.text
