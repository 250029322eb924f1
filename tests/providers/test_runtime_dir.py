"""The session's runtime folder is a real folder of this user's: a link found at its name
(or at its ``expose`` subfolder's) is replaced, never followed."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from seamline.providers.programs.runtime_dir import ensure_expose_dir, ensure_runtime_dir, remove_runtime_dir


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    return xdg / "seamline"


def _name(session_id: str) -> str:
    return hashlib.sha256(f"{session_id}:{os.getpid()}".encode()).hexdigest()[:12]


def test_a_link_at_the_session_folder_is_replaced_by_a_folder_of_ours(root: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root.mkdir(mode=0o700)
    (root / _name("s1")).symlink_to(elsewhere)
    state: dict[str, object] = {}
    folder = ensure_runtime_dir("s1", state)
    assert folder == root / _name("s1") and state["runtime_dir"] == folder
    assert not folder.is_symlink() and folder.is_dir()
    assert stat.S_IMODE(folder.lstat().st_mode) == 0o700
    (folder / "x").write_text("ours")
    assert list(elsewhere.iterdir()) == []  # the link's target was never used


def test_a_kept_folder_that_became_a_link_is_not_used(root: Path, tmp_path: Path) -> None:
    state: dict[str, object] = {}
    folder = ensure_runtime_dir("s2", state)
    folder.rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder.symlink_to(elsewhere)
    again = ensure_runtime_dir("s2", state)
    assert again == folder and not again.is_symlink() and again.is_dir()


def test_the_expose_folder_is_a_real_folder_and_goes_with_the_runtime_folder(root: Path, tmp_path: Path) -> None:
    state: dict[str, object] = {}
    folder = ensure_runtime_dir("s3", state)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (folder / "expose").symlink_to(elsewhere)
    expose = ensure_expose_dir(folder)
    assert expose == folder / "expose" and not expose.is_symlink() and expose.is_dir()
    remove_runtime_dir(state)
    assert not folder.exists() and elsewhere.is_dir()
