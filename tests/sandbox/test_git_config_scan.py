"""Reading a file as git reads a configuration file (seamline.sandbox.git_config_scan): the
keys that make git run a program, checked against the real `git config --file F --list`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seamline.sandbox.git_config_scan import config_entries, dangerous_keys, reads_as_config

EXAMPLES = [
    (b"[core]\n\tfsmonitor = touch /tmp/x\n", ["core.fsmonitor"]),
    (b"[core]\n\tfsmonitor = false\n\tpager = less\n", ["core.pager"]),
    (b"[core] hooksPath = .hooks", ["core.hookspath"]),  # a key on the header's line
    (b'[alias]\n\tst = status\n\tx = "!sh -c id"\n\ty = -c core.pager=sh log\n', ["alias.x", "alias.y"]),
    (b'[filter "LFS"]\n\tclean = a\n\tsmudge = b\n\trequired\n', ["filter.LFS.clean", "filter.LFS.smudge"]),
    (b"[filter.lfs]\n\tprocess = x\n", ["filter.lfs.process"]),  # the old [section.subsection] form
    (
        b'[includeIf "gitdir:~/w/"]\n\tpath = ../x\n[include]\n\tpath = y\n',
        ["includeif.gitdir:~/w/.path", "include.path"],
    ),
    (b"[credential]\n\thelper = store\n[diff]\n\texternal = d\n", ["credential.helper", "diff.external"]),
    (
        b'[uploadpack]\n\tpackObjectsHook = x\n[protocol "ext"]\n\tallow = always\n',
        ["uploadpack.packobjectshook", "protocol.ext.allow"],
    ),
    (b"[pager]\n\tlog = false\n\tdiff = sh -c id\n", ["pager.diff"]),
    (b'[submodule "a"]\n\tpath = a\n\tupdate = !sh\n', ["submodule.a.update"]),
    (b"\xef\xbb\xbf[core]\r\n\teditor = vim\r\n", ["core.editor"]),  # BOM and CRLF
    (b"[core]\n\tfsmonitor = a \\\n b\n", ["core.fsmonitor"]),  # a continued value
    (b"[core]\n\tbare = false\n\tpager = x\n{", ["core.pager"]),  # found before the refused line
    (b"{\n[core]\n\tpager = x\n", []),  # git refuses the first line: reads nothing
    (b"import os\n", []),
    (b"[user]\n\tname = A\n[tool.poe.tasks.x]\n\tcmd = pytest\n", []),  # no git section
]


@pytest.mark.parametrize(("data", "keys"), EXAMPLES)
def test_dangerous_keys(data: bytes, keys: list[str]) -> None:
    assert dangerous_keys(config_entries(data).entries) == keys


def test_reads_as_config_judges_a_head() -> None:
    assert reads_as_config(b"# a comment\n[core]\n\tbare = false\n\tpager = ver")  # cut in a value
    assert reads_as_config(b"[core]\n\tbare = false\n[sect")  # cut in a header
    assert not reads_as_config(b"a,b,c\n1,2,3\n")
    assert not reads_as_config(b"\x00\x01binary")
    assert not reads_as_config(b"#!/bin/sh\necho hi\n")


_NAME = st.sampled_from(["core", "Core", "alias", "filter", "include", "user", "x-y", "a.b", ""])
_SUB = st.text(alphabet='abC .-_"\\/!#', max_size=6)
_KEY = st.sampled_from(["fsmonitor", "pager", "hooksPath", "name", "clean", "st", "path", "k-1", "9bad", "a_b"])
_VALUE = st.text(alphabet='ab !#;"\\ntx=\t-', max_size=12)
_LINE = st.one_of(
    st.builds(lambda n: f"[{n}]", _NAME),
    st.builds(lambda n, s: f'[{n} "{s}"]', _NAME, _SUB),
    st.builds(lambda k, v: f"\t{k} = {v}", _KEY, _VALUE),
    st.builds(lambda k, v: f"{k}={v}", _KEY, _VALUE),
    _KEY,
    st.sampled_from(["", "# c", "; c", "  ", "{", "[", "k =", "\\"]),
)


@pytest.mark.real  # runs the real git
@settings(max_examples=250, deadline=None)
@given(lines=st.lists(_LINE, max_size=8), crlf=st.booleans())
def test_what_git_accepts_is_read_the_same(
    tmp_path_factory: pytest.TempPathFactory, lines: list[str], crlf: bool
) -> None:
    data = ("\r\n" if crlf else "\n").join(lines).encode()
    path = Path(tmp_path_factory.mktemp("cfg")) / "config"
    path.write_bytes(data)
    git = subprocess.run(
        ["git", "config", "--file", str(path), "--null", "--list"], capture_output=True, timeout=30, check=False
    )
    if git.returncode != 0:
        return  # git reads nothing of a file it refuses; we may have read a prefix (stricter is fine)
    theirs: list[tuple[str, str | None]] = []
    for item in git.stdout.split(b"\0")[:-1]:
        name, newline, value = item.partition(b"\n")
        theirs.append((name.decode().lower(), value.decode() if newline else None))
    read = config_entries(data)
    assert read.error_at is None, (data, git.stdout)
    assert [(n.lower(), v) for n, v in read.entries] == theirs
