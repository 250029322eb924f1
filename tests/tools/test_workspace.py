"""The workspace rule and the six built-in tools."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest, SandboxViolation, TimeoutFailure
from seamline.events import Event, FileChange
from seamline.tools import WORKSPACE_TOOL_NAMES, ToolContext, Workspace, workspace_tools


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "a.md").write_text("alpha\nbeta\ngamma\n")
    (root / "notes.txt").write_text("one beta\n")
    (tmp_path / "secret.txt").write_text("outside")
    return Workspace(root)


def call(ws: Workspace, name: str, emitted: list[Event] | None = None, **arguments: object) -> str:
    tool = workspace_tools(ws).get(name)
    assert tool is not None
    ctx = ToolContext(call_id="c1", session_id="s", turn_id=1, emit=(emitted if emitted is not None else []).append)
    return asyncio.run(tool.invoke(arguments, ctx))


def test_names_and_classes(ws: Workspace) -> None:
    tools = workspace_tools(ws)
    assert tools.names() == list(WORKSPACE_TOOL_NAMES)
    assert {t.name: t.tool_class for t in tools} == {
        "read_file": "read",
        "list_dir": "read",
        "grep": "read",
        "write_file": "write",
        "edit_file": "write",
        "shell": "execute",
    }


@pytest.mark.parametrize("bad", ["../secret.txt", "docs/../../secret.txt", "/etc/passwd", "~/x", "a\x00b"])
def test_paths_leaving_the_workspace_are_refused(ws: Workspace, bad: str) -> None:
    with pytest.raises(SandboxViolation):
        call(ws, "read_file", path=bad)
    with pytest.raises(SandboxViolation):
        call(ws, "write_file", path=bad, content="x")


def test_symlink_out_is_refused_and_inner_symlink_allowed(ws: Workspace, tmp_path: Path) -> None:
    os.symlink(tmp_path / "secret.txt", ws.root / "escape")
    os.symlink(tmp_path, ws.root / "escape_dir")
    os.symlink(ws.root / "notes.txt", ws.root / "inner")
    with pytest.raises(SandboxViolation, match="outside"):
        call(ws, "read_file", path="escape")
    with pytest.raises(SandboxViolation):
        call(ws, "write_file", path="escape_dir/new.txt", content="x")
    assert not (tmp_path / "new.txt").exists()
    assert "one beta" in call(ws, "read_file", path="inner")
    assert call(ws, "read_file", path="docs/../notes.txt").endswith("one beta")


def test_read_file_numbers_lines_and_reports_the_read(ws: Workspace) -> None:
    emitted: list[Event] = []
    assert call(ws, "read_file", emitted, path="docs/a.md", offset=2, limit=1) == "2\tbeta\n[1 more lines; use offset]"
    assert emitted == [FileChange(path="docs/a.md", kind="read", call_id="c1")]


def test_list_dir_and_grep(ws: Workspace) -> None:
    assert call(ws, "list_dir", path=".", depth=2).splitlines() == ["docs/", "docs/a.md", "notes.txt"]
    assert call(ws, "grep", pattern="beta").splitlines() == ["docs/a.md:2:beta", "notes.txt:1:one beta"]
    assert call(ws, "grep", pattern="beta", glob="*.md") == "docs/a.md:2:beta"
    with pytest.raises(InvalidRequest, match="bad regular expression"):
        call(ws, "grep", pattern="(")


def test_write_and_edit_report_file_changes(ws: Workspace) -> None:
    emitted: list[Event] = []
    call(ws, "write_file", emitted, path="new/dir/f.txt", content="hello world")
    call(ws, "edit_file", emitted, path="new/dir/f.txt", old="world", new="there")
    assert (ws.root / "new/dir/f.txt").read_text() == "hello there"
    assert [(e.path, e.kind) for e in emitted if isinstance(e, FileChange)] == [
        ("new/dir/f.txt", "created"),
        ("new/dir/f.txt", "edited"),
    ]
    with pytest.raises(InvalidRequest, match="not found"):
        call(ws, "edit_file", path="new/dir/f.txt", old="absent", new="x")
    (ws.root / "twice.txt").write_text("x x")
    with pytest.raises(InvalidRequest, match="occurs 2 times"):
        call(ws, "edit_file", path="twice.txt", old="x", new="y")


def test_shell_runs_in_the_workspace_and_times_out(ws: Workspace) -> None:
    assert call(ws, "shell", command="cat notes.txt; exit 3") == "exit code 3\none beta\n"
    with pytest.raises(TimeoutFailure):
        call(ws, "shell", command="sleep 30", timeout=0.2)


def test_workspace_must_exist(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="not a folder"):
        Workspace(tmp_path / "missing")


def test_grep_does_not_follow_links_out_of_the_workspace(ws: Workspace, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("password=hunter2\n")
    os.symlink(tmp_path / "secret.txt", ws.root / "escape")
    os.symlink(tmp_path, ws.root / "escape_dir")
    out = call(ws, "grep", pattern="hunter2")
    assert "hunter2" not in out and out.startswith("no matches")
    with pytest.raises(SandboxViolation):
        call(ws, "grep", pattern="hunter2", path="escape")


def _swap_after_check(monkeypatch: pytest.MonkeyPatch, ws: Workspace, folder: str, target: Path) -> None:
    """Replace ``folder`` by a link to ``target`` right after the path check passed: the
    race a sandboxed shell can win, made deterministic."""
    checked = Workspace.resolve

    def resolve_then_swap(self: Workspace, path: str) -> Path:
        real = checked(self, path)
        victim = ws.root / folder
        if victim.is_dir() and not victim.is_symlink():
            victim.rename(ws.root / (folder + ".moved"))
            os.symlink(target, victim)
        return real

    monkeypatch.setattr(Workspace, "resolve", resolve_then_swap)


def test_a_folder_swapped_for_a_link_after_the_check_is_not_written_through(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.md").write_text("outside\n")
    _swap_after_check(monkeypatch, ws, "docs", outside)
    with pytest.raises(SandboxViolation, match="link"):
        call(ws, "write_file", path="docs/a.md", content="pwned")
    assert (outside / "a.md").read_text() == "outside\n"
    assert sorted(p.name for p in outside.iterdir()) == ["a.md"]


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("read_file", {"path": "docs/a.md"}),
        ("grep", {"pattern": "outside", "path": "docs"}),
        ("edit_file", {"path": "docs/a.md", "old": "outside", "new": "pwned"}),
        ("write_file", {"path": "docs/new.txt", "content": "pwned"}),
        ("list_dir", {"path": "docs"}),
    ],
)
def test_every_file_tool_refuses_a_link_swapped_in_after_the_check(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, arguments: dict[str, object]
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.md").write_text("outside\n")
    _swap_after_check(monkeypatch, ws, "docs", outside)
    with pytest.raises(SandboxViolation, match="link"):
        call(ws, name, **arguments)
    assert (outside / "a.md").read_text() == "outside\n"
    assert sorted(p.name for p in outside.iterdir()) == ["a.md"]


def test_a_file_swapped_for_a_link_is_refused(ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checked = Workspace.resolve

    def resolve_then_swap(self: Workspace, path: str) -> Path:
        real = checked(self, path)
        (ws.root / "notes.txt").unlink()
        os.symlink(tmp_path / "secret.txt", ws.root / "notes.txt")
        return real

    monkeypatch.setattr(Workspace, "resolve", resolve_then_swap)
    with pytest.raises(SandboxViolation, match="link"):
        call(ws, "write_file", path="notes.txt", content="pwned")
    assert (tmp_path / "secret.txt").read_text() == "outside"


def test_a_hard_linked_file_is_not_written(ws: Workspace, tmp_path: Path) -> None:
    os.link(tmp_path / "secret.txt", ws.root / "linked.txt")
    with pytest.raises(SandboxViolation, match="hard link"):
        call(ws, "write_file", path="linked.txt", content="pwned")
    with pytest.raises(SandboxViolation, match="hard link"):
        call(ws, "edit_file", path="linked.txt", old="outside", new="pwned")
    assert (tmp_path / "secret.txt").read_text() == "outside"
    assert "outside" in call(ws, "read_file", path="linked.txt")  # reading it is harmless
