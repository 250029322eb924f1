"""Mistakes end as one classified line on stderr and a non-zero exit, never a traceback;
errors shown during a run are one line each, and a refused tool call is reported once."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from seamline.cli.display import TextDisplay
from seamline.events import Error, PermissionDecision, ToolCall, ToolResult


def sh(cmd: list[str], env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=120, cwd=cwd, check=False)


def assert_one_line_error(done: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    assert done.returncode == code, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("seamline: "), done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("wrong-type.json", b'[{"tool_calls": 5}]', "tool_calls must be a list"),
        ("bad-usage.json", b'[{"text": "x", "usage": {"input_tokens": "many"}}]', "usage.input_tokens"),
        ("bad-error.json", b'[{"error": "boom"}]', "error must be an object"),
        ("bad-delay.json", b'[{"text": "x", "delay": "soon"}]', "delay"),
        ("binary.json", bytes(range(256)) * 4, "not UTF-8 text"),
        ("nul.json", b"[\x00]", "not text"),
        ("deep.json", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        ("deep.yaml", b"- " * 3000 + b"x\n", "nested too deeply"),
    ],
)
def test_bad_scripts_are_one_line_usage_errors(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path, name: str, content: bytes, needle: str
) -> None:
    script = tmp_path / name
    script.write_bytes(content)
    done = sh(seamline_cmd, cli_env, "run", "--provider", "scripted", "-o", f"script={script}", "hi")
    assert_one_line_error(done, 2, "invalid_request error", needle)


def test_trace_export_to_a_bad_path_is_a_usage_error(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    done = sh(seamline_cmd, cli_env, "run", "--pipeline", "single", "--json", "hi", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run_id = next(json.loads(ln)["payload"]["run_id"] for ln in done.stdout.splitlines() if '"run_id"' in ln)
    done = sh(seamline_cmd, cli_env, "trace", "export", run_id, "-o", str(tmp_path / "missing" / "dir" / "x"))
    assert_one_line_error(done, 2, "cannot write", "No such file or directory")


def test_a_failure_with_a_long_message_is_one_line(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    script = tmp_path / "s.json"
    message = "the tool failed:\n" + "output line\n" * 2000
    script.write_text(json.dumps([{"error": {"kind": "provider", "message": message}}]))
    done = sh(
        seamline_cmd, cli_env, "run", "--provider", "scripted", "-o", f"script={script}", "-w", str(tmp_path), "hi"
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == "seamline: provider error: the tool failed: […]", lines[:3]
    assert len(lines) == 2 and lines[1] == "seamline: turn failed (provider)", lines[:3]


def test_display_errors_are_one_line() -> None:
    out, err = io.StringIO(), io.StringIO()
    display = TextDisplay(out, err, progress=False)
    display.show(Error(kind="provider", message="boom\n" + "stack line\n" * 2000))
    assert err.getvalue() == "seamline: provider error: boom […]\n"
    display.show(Error(kind="provider", message="x" * 1000))
    assert err.getvalue().splitlines()[1].endswith("x […]") and len(err.getvalue().splitlines()[1]) < 400


def test_a_refused_tool_call_is_reported_once_on_the_terminal() -> None:
    out, err = io.StringIO(), io.StringIO()
    display = TextDisplay(out, err, progress=True)
    display.show(ToolCall(call_id="c1", name="shell", arguments={"command": "rm -rf /"}))
    display.show(PermissionDecision(request_id="c1", decision="deny", reason="shell needs approval"))
    display.show(Error(kind="permission", message="shell needs approval"))
    display.show(
        ToolResult(call_id="c1", output="permission denied: shell needs approval", is_error=True, name="shell")
    )
    lines = err.getvalue().splitlines()
    assert sum("shell needs approval" in ln for ln in lines) == 1, lines
    assert lines[-1] == "  ✗ shell permission denied: shell needs approval"
