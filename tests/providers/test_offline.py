"""The offline provider answers from the workspace through real tool calls, deterministically."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from seamline.events import Complete, FileChange, Text, ToolCall, ToolResult, Usage, encode_event
from seamline.providers.local._outline import file_outline
from seamline.providers.local.offline import _choose_files
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


def test_nothing_relevant_says_so_and_what_it_read(corpus: Path) -> None:
    result = asyncio.run(run("quantum chromodynamics lattice", workspace=corpus))
    assert result.outcome == "completed"
    assert result.text.startswith('No passage I read answers "quantum chromodynamics lattice" in its words.')
    # what it read, summarised, rather than "found nothing"
    assert "README.md:1-3: Project: A small project about fruit." in result.text
    assert "guide/install.md:1-8: Installing: Run the setup script" in result.text


def test_nothing_read_says_so(tmp_path: Path) -> None:
    (tmp_path / "data.bin").write_bytes(b"\x00\x01")
    result = asyncio.run(run("quantum chromodynamics lattice", workspace=tmp_path))
    assert result.text.startswith("I found nothing in the workspace") and "I read: nothing." in result.text


def test_answers_about_the_projects_own_docs() -> None:
    result = asyncio.run(run("How do I add a provider?", workspace=DOCS))
    assert result.outcome == "completed"
    assert "providers.md:" in result.text
    texts = [e for e in result.events if isinstance(e, Text)]
    assert texts and texts[-1].text == result.text


CALC = '''"""A tiny calculator: add, subtract, multiply and divide two numbers."""


def add(a, b):
    """Return a + b."""
    return a + b


def subtract(a, b):
    return a - b


def divide(a, b):
    """Divide a by b; raises ZeroDivisionError when b is 0."""
    return a / b


class Calculator:
    """Keeps a running total."""

    def __init__(self):
        self.total = 0
'''


@pytest.fixture
def calc(tmp_path: Path) -> Path:
    (tmp_path / "calc.py").write_text(CALC)
    (tmp_path / "main.py").write_text("import calc\n\nprint(calc.add(1, 2))\n")
    (tmp_path / "README.md").write_text("# Demo\n\nA small demo project.\n\nRun `python calc.py` to try it.\n")
    (tmp_path / "docs").mkdir()
    for name in ("usage", "design", "faq", "history", "roadmap", "style"):
        (tmp_path / "docs" / f"{name}.md").write_text(f"# {name.title()}\n\nNotes on {name}.\n")
    return tmp_path


def _read_paths(result_events: list[object]) -> list[str]:
    return [str(e.arguments["path"]) for e in result_events if isinstance(e, ToolCall) and e.name == "read_file"]


def test_a_file_named_in_the_question_is_read_first_and_summarised(calc: Path) -> None:
    result = asyncio.run(run("What does calc.py do?", workspace=calc))
    assert _read_paths(list(result.events))[0] == "calc.py"
    assert result.outcome == "completed"
    # the answer is about calc.py, not README.md's line that mentions it
    first_cited = re.search(r"\b([\w./-]+\.\w+):\d+", result.text)
    assert first_cited is not None and first_cited.group(1) == "calc.py", result.text
    assert "A tiny calculator: add, subtract, multiply and divide two numbers." in result.text
    for name, line in (("add(a, b)", 4), ("subtract(a, b)", 9), ("divide(a, b)", 13), ("class Calculator", 18)):
        assert f"calc.py:{line}" in result.text and name in result.text
    assert "Divide a by b; raises ZeroDivisionError when b is 0." in result.text
    assert "found nothing" not in result.text


def test_a_named_file_no_passage_matches_is_still_summarised(calc: Path) -> None:
    (calc / "README.md").write_text("# Demo\n\nA small demo project.\n")
    result = asyncio.run(run("What does calc.py do?", workspace=calc))
    assert not result.text.startswith("I found nothing"), result.text
    assert "calc.py:1" in result.text and "A tiny calculator" in result.text and "class Calculator" in result.text


def test_a_named_file_outside_the_usual_suffixes_is_read(calc: Path) -> None:
    (calc / "web").mkdir()
    (calc / "web" / "calc.js").write_text(
        "// The calculator's page.\nexport function add(a, b) {\n  return a + b;\n}\n"
    )
    result = asyncio.run(run("What is in web/calc.js?", workspace=calc))
    assert _read_paths(list(result.events))[0] == "web/calc.js"
    assert "web/calc.js:1" in result.text and "add" in result.text


def test_the_cli_answers_what_a_named_file_does(calc: Path, cli_env: dict[str, str]) -> None:
    argv = [sys.executable, "-m", "seamline", "run", "--provider", "offline", "What does calc.py do?"]
    done = subprocess.run(argv, cwd=calc, env=cli_env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "calc.py:1" in done.stdout and "A tiny calculator" in done.stdout and "found nothing" not in done.stdout


_SEGMENT = st.from_regex(r"[a-z][a-z0-9_-]{0,7}", fullmatch=True)
_PATH = st.builds(
    lambda dirs, stem, suffix: "/".join([*dirs, stem + suffix]),
    st.lists(_SEGMENT, max_size=3),
    _SEGMENT,
    st.sampled_from([".py", ".md", ".js", ".txt", ".toml", ".rs", ".csv", ".bin"]),
)
_ASKS = ("What does {} do?", "explain {}", "Summarise `{}` please.", "what is in ./{}?", "{}: how is it used")


@given(paths=st.lists(_PATH, min_size=1, max_size=25, unique=True), limit=st.integers(1, 6), data=st.data())
def test_the_chooser_reads_a_named_file_first(paths: list[str], limit: int, data: st.DataObject) -> None:
    named = data.draw(st.sampled_from(paths))
    base = named.rsplit("/", 1)[-1]
    by_base = data.draw(st.booleans()) and sum(p.rsplit("/", 1)[-1] == base for p in paths) == 1
    question = data.draw(st.sampled_from(_ASKS)).format(base if by_base else named)
    folders = {p.rsplit("/", 1)[0] + "/" for p in paths if "/" in p}
    listing = "\n".join(sorted(folders | set(paths)))
    chosen = _choose_files(question, listing, limit)
    assert chosen and chosen[0] == named
    assert len(chosen) == len(set(chosen)) <= limit
    assert set(chosen) <= set(paths)


@given(paths=st.lists(_PATH, max_size=25, unique=True), question=st.text(max_size=60), limit=st.integers(1, 6))
def test_the_chooser_picks_only_listed_files_within_the_limit(paths: list[str], question: str, limit: int) -> None:
    chosen = _choose_files(question, "\n".join(paths), limit)
    assert len(chosen) == len(set(chosen)) <= limit
    # a file not listed is read only when the question names it by a path (deeper than the listing)
    assert all(p in paths or ("/" in p and p in question) for p in chosen)
    assert chosen == _choose_files(question, "\n".join(reversed(paths)), limit)  # listing order does not matter


def _numbered(text: str, start: int = 1) -> str:
    return "\n".join(f"{n}\t{line}" for n, line in enumerate(text.splitlines(), start))


def test_a_python_file_that_does_not_parse_is_outlined_by_its_def_lines() -> None:
    cut = _numbered(CALC.split("class Calculator")[0] + "def broken(x:\n") + "\n[40 more lines; use offset]"
    outline = file_outline("calc.py", cut)
    assert outline is not None and outline.parts[-1] == (18, "broken(x:)")
    assert [line for line, _ in outline.parts] == [4, 9, 13, 18]
    assert outline.summary == "A tiny calculator: add, subtract, multiply and divide two numbers."


def test_a_document_is_outlined_by_its_title_paragraph_and_sections() -> None:
    text = "# Guide\n\nHow to use it.\nIn short.\n\n```\n# not a heading\n```\n\n## Install\n\nRun it.\n"
    outline = file_outline("guide.md", _numbered(text))
    assert outline is not None
    assert (outline.summary, outline.parts, outline.label) == (
        "Guide: How to use it. In short.",
        ((10, "Install"),),
        "sections",
    )


@given(text=st.text(max_size=400), start=st.integers(1, 50), suffix=st.sampled_from(["py", "md", "js", "toml", ""]))
def test_any_text_outlines_without_error_and_cites_its_own_lines(text: str, start: int, suffix: str) -> None:
    outline = file_outline(f"f.{suffix}" if suffix else "f", _numbered(text, start))
    if outline is None:
        return
    assert outline.first <= outline.last
    assert all(outline.first <= line <= outline.last for line, _ in outline.parts)
