"""The recursive-delete hard denial reads the command as a shell does (issue 13)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seamline.tools import tool
from seamline.tools.permissions import recursive_delete_outside_workspace
from seamline.tools.shell_parse import read_shell


@tool(tool_class="execute")
def shell(command: str) -> str:
    """Run a command."""
    return command


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "sub" / "build").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", root / "link_out")
    return root


def denied(command: str, ws: Path) -> str | None:
    return recursive_delete_outside_workspace(shell, {"command": command}, ws)


BYPASSES = [
    "echo hi\nrm -rf ../outside",
    "cd .. && rm -rf outside",
    "cd ..; rm -rf outside",
    "( rm -rf ../outside )",
    "{ rm -rf ../outside; }",
    "bash -c 'rm -rf ../outside'",
    "sh -c 'cd .. && rm -rf outside'",
    "bash -lc 'rm -rf ../outside'",
    "sudo -u root sh -c 'rm -rf ../outside'",
    "find .. -delete",
    "find ../outside -name x -delete",
    "find /tmp -exec rm -rf {} +",
    "find . ../outside -type f -exec rm {} ;",
    "ls | xargs rm -rf",
    "xargs -0 rm -r < list",
    "A=1 env B=2 rm -rf ../outside",
    "env -i nice -n 5 nohup rm -fr ../outside",
    "timeout 5 rm -rf ../outside",
    "command rm -rf ../outside",
    "exec rm -rf ../outside",
    "echo $(rm -rf ../outside)",
    "echo `rm -rf ../outside`",
    "cat <(rm -rf ../outside)",
    "x=$(rm -rf ../outside)",
    "if true; then rm -rf ../outside; fi",
    "for d in a b; do rm -rf ../$d; done",
    "while true; do rm -rf ../outside; done",
    "f() { rm -rf ../outside; }; f",
    "\\rm -rf ../outside",
    "r''m -rf ../outside",
    "'rm' -rf ../outside",
    "/bin/rm -rf ../outside",
    "rm ../outside -rf",
    "rm --recursive --force ../outside",
    "rm --rec ../outside",
    "rm -rf -- ../outside",
    "rm -rf .*",
    "rm -rf ../*",
    "rm -rf {..,x}",
    "rm -rf $HOME",
    "rm -rf ~",
    "rm -rf ~/projects",
    "rm -rf link_out/",
    "cd link_out && rm -rf x",
    "cd sub && rm -rf ../../outside",
    "cd sub; cd ..; cd ..; rm -rf outside",
    "for d in a b; do cd ..; done; rm -rf x",
    "cd $SOMEWHERE && rm -rf x",
    "cd && rm -rf x",
    "eval 'rm -rf ../outside'",
    'eval "$CMD" rm -rf x',
    "X=rm; $X -rf ../outside",
    "$'\\x72m' -rf ../outside",
    "$(echo rm) -rf ../outside",
    "cat <<EOF | bash\nrm -rf ../outside\nEOF",
    "bash <<EOF\nrm -rf ../outside\nEOF",
    "bash <<< 'rm -rf ../outside'",
    "echo 'rm -rf ../outside' | sh",
    "rsync -a --delete src/ ../outside/",
    "env -C .. rm -rf outside",
    "case x in x) rm -rf ../outside;; esac",
    "time rm -rf ../outside",
    "echo 'unterminated; rm -rf ../outside",
    "su -c 'rm -rf ../outside'",
    "runuser --command='rm -rf ../outside'",
    "flock /tmp/lock -c 'rm -rf ../outside'",
    "watch -n 1 'rm -rf ../outside'",
    "find . -maxdepth 1 -exec sh -c 'rm -rf ../outside' \\;",
    "find . -execdir rm -rf ../outside \\;",
    "xargs -I{} sh -c 'rm -rf {}'",
    "env -S 'rm -rf ../outside'",
    "env --split-string='rm -rf ../outside'",
    "python3 -c \"import shutil; shutil.rmtree('..')\"",
    "node -e \"require('fs').rmSync('..', {recursive: true})\"",
    "rm -rf /",
    "rm -r -f /etc",
    "sudo rm --recursive /var/lib/x",
]


@pytest.mark.parametrize("command", BYPASSES)
def test_every_form_of_a_recursive_delete_outside_is_denied(command: str, ws: Path) -> None:
    reason = denied(command, ws)
    assert reason is not None and reason.startswith("recursive delete outside the workspace"), command


ALLOWED = [
    "rm -rf build dist",
    "rm -rf ./node_modules/.cache",
    "cd sub && rm -rf build",
    "cd sub; rm -rf build",
    "(cd .. && ls) && rm -rf build",
    "rm -rf *",
    "rm /etc/passwd-copy",
    "echo rm -rf /",
    "echo 'rm -rf ..'",
    "git status",
    "ls -la .. && cat ../README",
    "find . -name '*.pyc' -delete",
    "find sub -type d -exec rm -rf {} +",
    "bash -c 'rm -rf build'",
    'eval "$(ssh-agent)"',
    "make -j4 && pytest -x",
    "bash script.sh",
    "grep -r foo ..",
    "cp -r ../outside/x here",
    "for f in *.txt; do echo $f; done",
    "echo a > out.txt 2>&1",
    "rm -rf sub/build/../build",
    "find . -exec rm -rf {} +",
    "env -S 'ls -l'",
    "python3 -c 'print(1)'",
    "watch -n 1 ls",
    "command -v rm",
    "rm -rf .[!.]*",
]


@pytest.mark.parametrize("command", ALLOWED)
def test_ordinary_commands_are_not_denied(command: str, ws: Path) -> None:
    assert denied(command, ws) is None


def test_cd_in_a_subshell_does_not_leak(ws: Path) -> None:
    reading = read_shell("(cd .. && ls); rm -rf build", cwd=str(ws))
    rm = reading.commands[-1]
    assert rm.words == ("rm", "-rf", "build") and rm.cwds == frozenset({str(ws)})


def test_a_cd_that_may_fail_keeps_both_folders(ws: Path) -> None:
    reading = read_shell("cd sub; rm -rf build", cwd=str(ws))
    assert reading.commands[-1].cwds == frozenset({str(ws), str(ws / "sub")})


def test_without_a_workspace_dotdot_and_absolute_paths_are_outside() -> None:
    assert recursive_delete_outside_workspace(shell, {"command": "cd .. && rm -rf x"}, None) is not None
    assert recursive_delete_outside_workspace(shell, {"command": "rm -rf build"}, None) is None


_WORDS = st.sampled_from(
    [
        "rm",
        "-rf",
        "-r",
        "..",
        "../x",
        "/",
        "cd",
        "x",
        "&&",
        ";",
        "|",
        "\n",
        "(",
        ")",
        "$(",
        "`",
        "'",
        '"',
        "bash",
        "-c",
        "find",
        "-delete",
        "xargs",
        "eval",
        "<<",
        "EOF",
        "{",
        "}",
        "$X",
        "~",
        "*",
        "env",
        "A=1",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_WORDS, max_size=14).map(" ".join))
def test_denial_never_crashes_on_shell_like_text(command: str) -> None:
    reason = recursive_delete_outside_workspace(shell, {"command": command}, Path("/work/ws"))
    assert reason is None or reason.startswith("recursive delete outside the workspace")


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["rm -rf ../x", "rm -r /etc", "find .. -delete", "rm -fr ~/x"]),
    st.sampled_from(
        [
            "{}",
            "( {} )",
            "echo ok; {}",
            "true && {}",
            "false || {}",
            "bash -c '{}'",
            "echo $({})",
            'sh -c "cd . && {}"',
            "A=1 {}",
            "sudo {}",
            "nice {}",
            "{} &",
            "if true; then {}; fi",
        ]
    ),
    st.sampled_from(["{}", "{}\nls", "ls\n{}", "{} | cat", "cat x | {}"]),
)
def test_a_delete_outside_is_found_in_any_wrapping(inner: str, wrap: str, outer: str) -> None:
    command = outer.format(wrap.format(inner))
    assert recursive_delete_outside_workspace(shell, {"command": command}, Path("/work/ws")) is not None, command


def test_a_command_too_long_to_read_fails_closed(ws: Path) -> None:
    long = "echo a; " * 10_000
    assert denied(long + "rm -rf ../outside", ws) is not None
    assert denied(long + "ls", ws) is None


def test_text_that_hangs_the_parser_is_refused_not_waited_on() -> None:
    import subprocess
    import sys

    # bashlex 0.18 loops forever on this; run it in a child so a regression cannot hang the suite.
    script = (
        "from seamline.tools.shell_parse import read_shell\n"
        "r = read_shell(\"$' ${ $' ; rm -rf ..\", cwd='/ws')\n"
        "print(r.opaque[0] if r.opaque else 'read')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "cannot be parsed" in done.stdout


# Issue 28: wrappers, deleting programs, flags built at run time, links and moves made in
# the same command. Each was allowed under --yes before.
ISSUE_28_BYPASSES = [
    "chroot / rm -rf /etc",
    "flock /tmp/lock rm -rf ../outside",
    "prlimit --nofile=100 rm -rf ../outside",
    "unshare -r rm -rf ../outside",
    "setpriv --reuid=1000 rm -rf ../outside",
    "strace -f -o /dev/null rm -rf ../outside",
    "fakeroot rm -rf ../outside",
    "somewrapper --opt rm -rf ../outside",
    "git -C .. clean -fdx",
    "git --work-tree=.. clean -fd",
    "git -C .. rm -r -q outside",
    "git clean -fdx ..",
    "git -c alias.x='!rm -rf ../outside' x",
    "git config alias.x '!rm -rf ../outside' && git x",
    "awk 'BEGIN { system(\"rm -rf ../outside\") }'",
    "sed '1e rm -rf ../outside' notes.txt",
    "tar --remove-files -cf /dev/null ../outside",
    "tar -C .. --remove-files -cf x.tar outside",
    "zip -rm x.zip ../outside",
    "zip -r -m x.zip ../outside",
    "F=-rf; rm $F ../outside",
    "F='-rf /'; rm $F x",
    "ln -s .. up && rm -rf up/",
    "ln -s ../outside l; rm -rf l/*",
    "mv ../outside inner && rm -rf inner",
]


@pytest.mark.parametrize("command", ISSUE_28_BYPASSES)
def test_wrappers_deleting_programs_and_run_time_flags_are_denied(command: str, ws: Path) -> None:
    reason = denied(command, ws)
    assert reason is not None and reason.startswith("recursive delete outside the workspace"), command


ISSUE_28_ALLOWED = [
    "git clean -fdx",
    "git rm -r --cached sub/build",
    "git -C sub clean -fd",
    "tar -czf out.tgz sub",
    "tar --remove-files -cf out.tar sub/build",
    "zip -r out.zip sub",
    "awk '{print $1}' notes.txt",
    "sed -i 's/a/b/' notes.txt",
    "ln -s sub/build b && ls b",
    "timeout 60 pytest -x",
    "strace -f ls",
    "nice -n 5 make",
    "fakeroot make install",
    'rm -f -- "$tmp"',
    "rm -rf sub/build && ln -s x y",
    "echo rm -rf /",
    "grep -r rm -r .",
]


@pytest.mark.parametrize("command", ISSUE_28_ALLOWED)
def test_ordinary_work_with_those_programs_is_allowed(command: str, ws: Path) -> None:
    assert denied(command, ws) is None, command
