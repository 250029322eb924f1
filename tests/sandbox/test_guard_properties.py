"""Property tests: whatever text arrives, the guard answers pass or a classified refusal."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from seamline.errors import PermissionDenied, SandboxViolation
from seamline.sandbox.guard import CommandGuard
from seamline.sandbox.policy import SandboxPolicy

GUARD = CommandGuard(workspace_root=Path("/nonexistent-seamline-ws"), policy=SandboxPolicy())
WORDS = st.sampled_from(
    ["cat", "echo", "ls", "..", "/", "/inputs/a", "/proc/1/root", "~", "$HOME", "'", '"', ">", ">>", "|", ";", "&&",
     "$(", ")", "`", "\\", "\n", "<<EOF", "EOF", "127.0.0.1", "http://", "/workspace/x", "-rf", "=", "*", "\x00"]
)  # fmt: skip


def _guard_answers(command: str) -> None:
    try:
        GUARD.check(command)
    except (SandboxViolation, PermissionDenied) as exc:
        assert exc.message


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_random_text_never_crashes_the_guard(command: str) -> None:
    _guard_answers(command)


@settings(max_examples=300, deadline=None)
@given(st.lists(WORDS, max_size=30).map(" ".join))
def test_shell_like_text_never_crashes_the_guard(command: str) -> None:
    _guard_answers(command)


@given(st.sampled_from(["cat", "head", "wc -c", "grep x"]), st.sampled_from(["../etc/passwd", "a/../../b"]))
def test_dotdot_out_of_the_workspace_is_always_refused(verb: str, path: str) -> None:
    try:
        GUARD.check(f"{verb} {path}")
    except SandboxViolation:
        return
    raise AssertionError("not refused")
