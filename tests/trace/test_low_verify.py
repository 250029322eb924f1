"""`trace verify` reads a trace an editor or a transfer touched (CRLF, a BOM, blank lines
at the end), checks the run id, and checks the head against the one the store kept, so a
trace rewritten whole (with a consistent chain of its own) fails."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

from seamline.trace.records import GENESIS, chain_hash, encode_line, split_line
from seamline.trace.verify import verify_trace


def sh(cmd: list[str], env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def pipeline_run(cmd: list[str], env: dict[str, str], workspace: Path) -> tuple[str, Path]:
    done = sh(cmd, env, "run", "--pipeline", "single", "--json", "-w", str(workspace), "What is a provider?")
    assert done.returncode == 0, done.stderr
    run_id = next(json.loads(ln)["payload"]["run_id"] for ln in done.stdout.splitlines() if '"run_id"' in ln)
    trace = Path(env["SEAMLINE_STORE"]).parent / "traces" / f"{run_id}.jsonl"
    assert trace.is_file()
    return run_id, trace


def rewritten(data: bytes, old: bytes, new: bytes) -> bytes:
    """What a forger who knows the format does: change a record, rechain every hash."""
    out, previous = [], GENESIS
    for line in data.splitlines():
        parts = split_line(line)
        assert parts is not None
        body = parts[1].replace(old, new)
        previous = chain_hash(previous, body)
        out.append(encode_line(previous, body))
    return b"".join(out)


def test_crlf_bom_and_trailing_blank_lines_verify_with_notes(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    _, trace = pipeline_run(seamline_cmd, cli_env, tmp_path)
    data = trace.read_bytes()
    touched = b"\xef\xbb\xbf" + data.replace(b"\n", b"\r\n") + b"\r\n\r\n"
    verification = verify_trace(touched)
    assert verification.ok, [str(p) for p in verification.problems]
    assert verification.head_hash == verify_trace(data).head_hash
    assert verification.notes == [
        "a UTF-8 byte order mark at the start, ignored",
        "CRLF line ends, read as LF",
        "2 blank line(s) at the end, ignored",
    ]
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(touched)
    done = sh(seamline_cmd, cli_env, "trace", "verify", "--file", str(copy))
    assert done.returncode == 0, done.stderr
    assert "note: CRLF line ends, read as LF" in done.stderr


def test_the_run_id_inside_must_be_the_run_asked_for(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    run_id, trace = pipeline_run(seamline_cmd, cli_env, tmp_path)
    other = "f" * 32
    shutil.copy(trace, trace.with_name(f"{other}.jsonl"))
    done = sh(seamline_cmd, cli_env, "trace", "verify", other)
    assert done.returncode == 1
    assert f"identity: the trace is of run '{run_id}', not of run '{other}'" in done.stderr
    assert not verify_trace(trace.read_bytes(), run_id=other).ok
    assert verify_trace(trace.read_bytes(), run_id=run_id).ok


def test_a_trace_rewritten_whole_fails_against_the_head_the_store_kept(
    seamline_cmd: list[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    run_id, trace = pipeline_run(seamline_cmd, cli_env, tmp_path)
    summary = json.loads(sh(seamline_cmd, cli_env, "trace", "show", run_id, "--json").stdout)
    with sqlite3.connect(cli_env["SEAMLINE_STORE"]) as db:
        kept = db.execute("SELECT head_hash, records FROM trace_heads WHERE run_id = ?", (run_id,)).fetchall()
    assert kept == [(summary["head_hash"], summary["records"])]
    ok = sh(seamline_cmd, cli_env, "trace", "verify", run_id)
    assert ok.returncode == 0 and "head in store    yes" in ok.stdout, ok.stdout
    forged = rewritten(trace.read_bytes(), b"What is a provider?", b"What is a forgery?")
    assert verify_trace(forged).ok  # its own chain is consistent: only the store tells
    trace.write_bytes(forged)
    done = sh(seamline_cmd, cli_env, "trace", "verify", run_id)
    assert done.returncode == 1
    assert "anchor: the store keeps head" in done.stderr and "rewritten or cut" in done.stderr
    exported = tmp_path / "exported.jsonl"
    exported.write_bytes(forged)
    by_file = sh(seamline_cmd, cli_env, "trace", "verify", "--file", str(exported))
    assert by_file.returncode == 1 and "anchor:" in by_file.stderr
