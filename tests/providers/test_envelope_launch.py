"""Carrying a session's files from one envelope home to another (resume, fork): both homes
are folders an enveloped program wrote, so a link planted in the new home is replaced,
never written through, and a link in the old one is never read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from seamline.providers.programs.envelope_launch import _carry_session_files, envelope_home

SID = "0b1916a6-e769-4381-999f-eca06c76e359"


@pytest.fixture
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    old, new = envelope_home("claude-code", "old"), envelope_home("claude-code", "new")
    (old / ".claude" / "projects" / "ws").mkdir(parents=True)
    (old / ".claude" / "projects" / "ws" / f"{SID}.jsonl").write_text('{"turn": 1}\n')
    new.mkdir(parents=True)
    return old, new


def test_a_file_is_carried_with_its_times(homes: tuple[Path, Path]) -> None:
    old, new = homes
    source = old / ".claude" / "projects" / "ws" / f"{SID}.jsonl"
    os.utime(source, ns=(1_000_000_000, 2_000_000_000))
    _carry_session_files(new, SID)
    carried = new / ".claude" / "projects" / "ws" / f"{SID}.jsonl"
    assert carried.read_text() == '{"turn": 1}\n' and carried.stat().st_mtime_ns == 2_000_000_000


def test_a_link_planted_in_the_new_home_is_replaced_not_written_through(
    homes: tuple[Path, Path], tmp_path: Path
) -> None:
    _old, new = homes
    host_file = tmp_path / "host.txt"
    host_file.write_text("host\n")
    dangling = tmp_path / "made-through-a-link"
    target = new / ".claude" / "projects" / "ws" / f"{SID}.jsonl"
    target.parent.mkdir(parents=True)
    target.symlink_to(dangling)
    _carry_session_files(new, SID)
    assert not dangling.exists() and host_file.read_text() == "host\n"
    assert not target.is_symlink() and target.read_text() == '{"turn": 1}\n'


def test_a_linked_folder_in_the_new_home_is_refused(homes: tuple[Path, Path], tmp_path: Path) -> None:
    _old, new = homes
    host_folder = tmp_path / "host"
    host_folder.mkdir()
    (new / ".claude").symlink_to(host_folder)
    _carry_session_files(new, SID)
    assert list(host_folder.iterdir()) == []


def test_a_link_in_the_old_home_is_never_read(homes: tuple[Path, Path], tmp_path: Path) -> None:
    old, new = homes
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET\n")
    (old / ".claude" / "projects" / "ws" / f"{SID}.jsonl").unlink()
    (old / ".claude" / "projects" / "ws" / f"{SID}.jsonl").symlink_to(secret)
    (old / ".claude" / "projects" / "up").symlink_to(tmp_path)
    (tmp_path / f"{SID}-leak.txt").write_text("SECRET\n")
    _carry_session_files(new, SID)
    assert not [p for p in new.rglob("*") if p.is_file() and "SECRET" in p.read_text()]
