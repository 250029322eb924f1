"""`seamline run` and `seamline providers` as a user runs them: a real subprocess."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

from seamline.events import EVENT_TYPES

DOCS = Path(__file__).resolve().parents[2] / "docs"


def sh(
    cmd: list[str], env: dict[str, str], *args: str, cwd: Path | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=120, cwd=cwd, input=stdin)


def events_of(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_json_stream_shape(seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    done = sh(seamline_cmd, cli_env, "run", "--json", "--workspace", str(DOCS), "What does the store keep?")
    assert done.returncode == 0, done.stderr
    events = events_of(done.stdout)
    assert all(e["type"] in EVENT_TYPES for e in events)
    assert events[0]["type"] == "session" and events[0]["provider"] == "offline"
    assert [e["type"] for e in events].count("complete") == 1 and events[-1]["type"] == "complete"
    assert events[-1]["outcome"] == "completed"
    assert "cli.md:" in str(events[-1]["text"])
    assert {"tool_call", "tool_result", "usage"} <= {str(e["type"]) for e in events}
    assert done.stderr == ""


def test_json_complete_carries_the_run_totals(seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    done = sh(seamline_cmd, cli_env, "run", "--json", "--workspace", str(DOCS), "What does the store keep?")
    events = events_of(done.stdout)
    usages = [e for e in events if e["type"] == "usage"]
    totals = events[-1]["totals"]
    assert isinstance(totals, dict) and usages, events[-1]
    for key in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        assert totals[key] == sum(int(u[key]) for u in usages), (key, totals)  # type: ignore[call-overload]
    assert totals["input_tokens"] > 0
    assert totals["priced"] == all(u["priced"] for u in usages)
    assert (totals["cost_usd"] is None) == any(u["cost_usd"] is None for u in usages)
    # A pipeline's last complete carries the whole run's: every role's usage summed.
    piped = sh(seamline_cmd, cli_env, "run", "--pipeline", "answer-review", "--json", "-w", str(DOCS), "events")
    lines = events_of(piped.stdout)
    role_usage = [e for e in lines if e["type"] == "usage"]
    whole = lines[-1]["totals"]
    assert lines[-1]["type"] == "complete" and isinstance(whole, dict), lines[-1]
    assert whole["output_tokens"] == sum(int(u["output_tokens"]) for u in role_usage)  # type: ignore[call-overload]


def test_text_mode_prints_the_answer(seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    done = sh(seamline_cmd, cli_env, "run", "--workspace", str(DOCS), "How do I add a provider?")
    assert done.returncode == 0
    assert done.stdout.startswith("From the workspace") and "Sources: " in done.stdout


def test_prompt_from_stdin(seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    done = sh(seamline_cmd, cli_env, "run", "--json", "--workspace", str(DOCS), "-", stdin="exit codes")
    assert done.returncode == 0 and "cli.md" in events_of(done.stdout)[-1]["text"]  # type: ignore[operator]


def test_store_holds_the_run(seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path) -> None:
    store = tmp_path / "explicit.db"
    done = sh(seamline_cmd, cli_env, "run", "--json", "--store", str(store), "--workspace", str(DOCS), "events")
    sid = events_of(done.stdout)[0]["session_id"]
    conn = sqlite3.connect(store)
    assert conn.execute("SELECT status FROM sessions WHERE id = ?", (sid,)).fetchone() == ("completed",)
    rows = conn.execute("SELECT source, packed FROM raw_log WHERE substr(skey, 15) = ? ORDER BY seq", (sid,)).fetchall()
    assert rows[0] == ("prompt", 1) and sum(n for source, n in rows if source == "event") >= 5  # events in packs


def test_usage_errors_are_one_line_and_exit_2(seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path) -> None:
    cases = [
        (["run", "-p", "nope", "x"], "unknown provider 'nope'"),
        (["run", "-o", "bogus=1", "x"], "unknown option(s) for provider offline: bogus"),
        (["run", "-o", "noequals", "x"], "KEY=VALUE"),
        (["run", "--workspace", str(tmp_path / "missing"), "x"], "not a folder"),
        (["run", "--store", str(tmp_path), "x"], "is a directory"),
        (["run", "--allow", "rm_rf", "x"], "unknown tool(s) in allowlist: rm_rf"),
        (["run", " "], "the prompt is empty"),
    ]
    for args, message in cases:
        done = sh(seamline_cmd, cli_env, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stdout == ""
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("seamline: ") and message in lines[0], (args, done.stderr)


def test_corrupt_store_is_refused_and_kept(seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"precious user data, not sqlite" * 5)
    done = sh(seamline_cmd, cli_env, "run", "--store", str(junk), "x")
    assert done.returncode == 2 and "not a seamline store" in done.stderr
    assert junk.read_bytes() == b"precious user data, not sqlite" * 5


def write_script(tmp_path: Path, body: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def test_escaping_path_is_a_classified_error_event(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    script = write_script(
        tmp_path, '- tool_calls: [{name: read_file, arguments: {path: "../../etc/passwd"}}]\n- text: done\n'
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    done = sh(seamline_cmd, cli_env, "run", "--json", "-p", "scripted", "-o", f"script={script}", "-w", str(ws), "x")
    events = events_of(done.stdout)
    assert done.returncode == 0
    errors = [e for e in events if e["type"] == "error"]
    assert errors and errors[0]["kind"] == "sandbox"
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["is_error"] is True and "leaves the workspace" in str(result["output"])


def test_write_needs_yes(seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path) -> None:
    script = write_script(
        tmp_path,
        '[{"tool_calls": [{"name": "write_file", "arguments": {"path": "o.txt", "content": "hi"}}]}, {"text": "ok"}]',
        "s.json",
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    base = ["run", "--json", "-p", "scripted", "-o", f"script={script}", "-w", str(ws), "write it"]
    denied = sh(seamline_cmd, cli_env, *base)
    assert not (ws / "o.txt").exists()
    assert any(e["type"] == "permission_decision" and e["decision"] == "deny" for e in events_of(denied.stdout))
    allowed = sh(seamline_cmd, cli_env, *base, "--yes")
    assert allowed.returncode == 0 and (ws / "o.txt").read_text() == "hi"
    assert any(e["type"] == "file_change" and e["kind"] == "created" for e in events_of(allowed.stdout))


def test_provider_failure_mid_stream_keeps_the_record(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    script = write_script(
        tmp_path, "- text: first step\n  tool_calls: [{name: list_dir, arguments: {}}]\n- raise: decoder exploded\n"
    )
    store = tmp_path / "s.db"
    done = sh(
        seamline_cmd,
        cli_env,
        "run",
        "--json",
        "--store",
        str(store),
        "-p",
        "scripted",
        "-o",
        f"script={script}",
        "x",
        cwd=tmp_path,
    )
    assert done.returncode == 1
    events = events_of(done.stdout)
    assert events[-1]["outcome"] == "failed"
    assert any(
        e["type"] == "error" and e["kind"] == "provider" and "decoder exploded" in str(e["message"]) for e in events
    )
    assert done.stderr.strip().splitlines()[-1] == "seamline: turn failed (provider_error)"
    conn = sqlite3.connect(store)
    payloads = " ".join(r[0] for r in conn.execute("SELECT payload FROM raw_log"))
    assert "first step" in payloads and "decoder exploded" in payloads


def test_budget_and_quota_exit_codes(seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path) -> None:
    costly = write_script(
        tmp_path,
        "- tool_calls: [{name: list_dir, arguments: {}}]\n  usage: {input_tokens: 10, output_tokens: 1, cost_usd: 2.0}\n- text: never\n",
    )
    done = sh(
        seamline_cmd,
        cli_env,
        "run",
        "--json",
        "--budget-usd",
        "1",
        "-p",
        "scripted",
        "-o",
        f"script={costly}",
        "x",
        cwd=tmp_path,
    )
    assert done.returncode == 3
    assert events_of(done.stdout)[-1]["outcome"] == "budget"
    quota = write_script(tmp_path, "- error: {kind: quota, message: too many requests}\n", "q.yaml")
    done = sh(seamline_cmd, cli_env, "run", "--json", "-p", "scripted", "-o", f"script={quota}", "x", cwd=tmp_path)
    assert done.returncode == 1
    assert [e["kind"] for e in events_of(done.stdout) if e["type"] == "error"] == ["quota"]


def test_providers_list_and_check(seamline_cmd: list[str], cli_env: dict[str, str]) -> None:
    listed = sh(seamline_cmd, cli_env, "providers", "list", "--json")
    rows = {r["name"]: r for r in map(json.loads, listed.stdout.splitlines())}
    assert rows["offline"]["capabilities"]["runs_own_tools"] is False
    assert rows["offline"]["capabilities"]["real"] is False
    assert "script" in rows["scripted"]["options"]
    check = sh(seamline_cmd, cli_env, "providers", "check", "offline")
    assert check.returncode == 0 and check.stdout.startswith("ok")
    help_text = sh(seamline_cmd, cli_env, "run", "--help").stdout
    assert "exit codes" in help_text and "--provider-option" in help_text
