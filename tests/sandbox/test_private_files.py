"""seamline's own files in folders a sandboxed program may write: no link is ever followed,
a file is replaced (never written into), and a folder of ours is a real folder."""

from __future__ import annotations

import doctest
import os
import stat
from pathlib import Path

import pytest

from seamline.sandbox import private_files
from seamline.sandbox.private_files import (
    PrivatePathRefused,
    ensure_private_folder,
    open_folder,
    read_file_beneath,
    replace_file_at,
    write_private_file,
)


@pytest.fixture
def host_file(tmp_path: Path) -> Path:
    found = tmp_path / "host.txt"
    found.write_bytes(b"host\n")
    return found


def test_a_link_at_the_name_is_replaced_and_its_target_untouched(tmp_path: Path, host_file: Path) -> None:
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "hook.py").symlink_to(host_file)
    (folder / "dangling").symlink_to(tmp_path / "made-through-a-link")
    write_private_file(folder, "hook.py", "ours", mode=0o700)
    write_private_file(folder, "dangling", b"ours")
    assert host_file.read_bytes() == b"host\n" and not (tmp_path / "made-through-a-link").exists()
    assert (folder / "hook.py").read_text() == "ours" and not (folder / "hook.py").is_symlink()
    assert stat.S_IMODE((folder / "hook.py").stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "dangling").stat().st_mode) == 0o600
    assert sorted(p.name for p in folder.iterdir()) == ["dangling", "hook.py"]  # no temp file left


def test_a_hard_link_at_the_name_is_replaced_not_written_into(tmp_path: Path, host_file: Path) -> None:
    folder = tmp_path / "f"
    folder.mkdir()
    os.link(host_file, folder / "settings.json")
    write_private_file(folder, "settings.json", "{}")
    assert host_file.read_bytes() == b"host\n" and (folder / "settings.json").read_text() == "{}"


def test_a_linked_folder_is_refused_at_the_end_or_on_the_way(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(PrivatePathRefused, match="link"):
        write_private_file(tmp_path / "link", "x", "y")
    (real / "sub").symlink_to(tmp_path)
    with pytest.raises(PrivatePathRefused, match="link"), open_folder(real, ["sub", "deeper"], create=True):
        pass
    assert not (tmp_path / "deeper").exists() and list(real.iterdir()) == [real / "sub"]
    with pytest.raises(PrivatePathRefused, match="plain"), open_folder(real, [".."]):
        pass
    with open_folder(real, ["a", "b"], create=True) as fd:
        replace_file_at(fd, "c", b"made", times_ns=(1_000_000_000, 2_000_000_000))
    assert (real / "a" / "b" / "c").read_bytes() == b"made"
    assert (real / "a" / "b" / "c").stat().st_mtime_ns == 2_000_000_000


def test_read_refuses_links_and_what_is_not_a_regular_file(tmp_path: Path, host_file: Path) -> None:
    root = tmp_path / "home"
    (root / "d").mkdir(parents=True)
    (root / "d" / "t.jsonl").write_bytes(b"line\n")
    data, status = read_file_beneath(root, ("d", "t.jsonl"))
    assert data == b"line\n" and stat.S_ISREG(status.st_mode)
    (root / "d" / "linked.jsonl").symlink_to(host_file)
    (root / "up").symlink_to(tmp_path)
    os.mkfifo(root / "d" / "fifo")
    with pytest.raises(PrivatePathRefused):
        read_file_beneath(root, ("d", "linked.jsonl"))
    with pytest.raises(PrivatePathRefused):
        read_file_beneath(root, ("up", "host.txt"))
    with pytest.raises(PrivatePathRefused, match="regular"):
        read_file_beneath(root, ("d", "fifo"))  # and does not block on it
    with pytest.raises(PrivatePathRefused, match="larger"):
        read_file_beneath(root, ("d", "t.jsonl"), limit=2)


def test_a_private_folder_replaces_a_link_or_a_file_and_is_0700(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    (tmp_path / "a").symlink_to(elsewhere)
    (tmp_path / "b").write_text("a file")
    (tmp_path / "c").mkdir(mode=0o755)
    for name in ("a", "b", "c", "d"):
        made = ensure_private_folder(tmp_path / name)
        assert made.is_dir() and not made.is_symlink() and stat.S_IMODE(made.lstat().st_mode) == 0o700
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o755


def test_the_docstring_example_runs() -> None:
    failed, attempted = doctest.testmod(private_files, optionflags=doctest.ELLIPSIS)
    assert attempted > 0 and failed == 0
