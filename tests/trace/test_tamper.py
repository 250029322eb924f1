"""Tamper tests: each kind of damage is rejected by verify, naming the record and reason."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from seamline.pipeline import resolve_pipeline
from seamline.trace.records import GENESIS, chain_hash, encode_line, split_line
from seamline.trace.verify import verify_trace
from tests.pipeline.support import make_workspace, run_pipeline


@pytest.fixture(scope="module")
def trace_lines(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    root = tmp_path_factory.mktemp("tamper")
    path = root / "run.jsonl"
    run_pipeline(
        resolve_pipeline("answer-review"), "How do I add a provider?", workspace=make_workspace(root), trace_file=path
    )
    lines = path.read_bytes().splitlines(keepends=True)
    assert verify_trace(b"".join(lines)).ok
    return lines


def rechain(lines: list[bytes]) -> list[bytes]:
    """What a forger who knows the format would do: recompute every hash."""
    out, previous = [], GENESIS
    for line in lines:
        parts = split_line(line.rstrip(b"\n"))
        assert parts is not None
        previous = chain_hash(previous, parts[1])
        out.append(encode_line(previous, parts[1]))
    return out


def index_of(lines: list[bytes], needle: bytes) -> int:
    return next(i for i, line in enumerate(lines) if needle in line)


def verify_cli(tmp_path: Path, data: bytes, seamline_cmd: list[str], cli_env: dict[str, str]) -> tuple[int, str]:
    file = tmp_path / "tampered.jsonl"
    file.write_bytes(data)
    done = subprocess.run(
        [*seamline_cmd, "trace", "verify", "--file", str(file)], capture_output=True, text=True, env=cli_env, timeout=60
    )
    return done.returncode, done.stderr


def test_untouched_trace_verifies(
    tmp_path: Path, trace_lines: list[bytes], seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    code, err = verify_cli(tmp_path, b"".join(trace_lines), seamline_cmd, cli_env)
    assert code == 0 and err == ""


def test_flipped_byte(
    tmp_path: Path, trace_lines: list[bytes], seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    lines = list(trace_lines)
    k = index_of(lines, b'"kind":"prompt"')
    at = lines[k].index(b'"prompt":"') + len(b'"prompt":"')
    lines[k] = lines[k][:at] + bytes([lines[k][at] ^ 0x01]) + lines[k][at + 1 :]
    problems = verify_trace(b"".join(lines)).problems
    assert [(p.seq, p.check) for p in problems] == [(k, "chain")]
    assert "hash does not match" in problems[0].reason
    code, err = verify_cli(tmp_path, b"".join(lines), seamline_cmd, cli_env)
    assert code == 1 and f"record {k} (line {k + 1}): chain: hash does not match" in err


def test_dropped_record(
    tmp_path: Path, trace_lines: list[bytes], seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    lines = list(trace_lines)
    k = index_of(lines, b'"kind":"role_end"')
    del lines[k]
    reasons = [str(p) for p in verify_trace(b"".join(lines)).problems]
    assert (
        f"record {k + 1} (line {k + 1}): chain: seq {k + 1} where {k} was expected (record dropped or moved)" in reasons
    )
    code, err = verify_cli(tmp_path, b"".join(lines), seamline_cmd, cli_env)
    assert code == 1 and "record dropped or moved" in err


def test_two_records_swapped(
    tmp_path: Path, trace_lines: list[bytes], seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    lines = list(trace_lines)
    k = index_of(lines, b'"kind":"phase_start"')
    lines[k], lines[k + 1] = lines[k + 1], lines[k]
    problems = verify_trace(b"".join(lines)).problems
    assert {p.seq for p in problems if "hash does not match" in p.reason} >= {k, k + 1}
    assert any(p.seq == k + 1 and f"where {k} was expected" in p.reason for p in problems)
    # even re-chained, the swap is caught: by seq, and by the lifecycle (a role before its phase)
    rechained = verify_trace(b"".join(rechain(lines))).problems
    assert not any("hash does not match" in p.reason for p in rechained)
    assert any(p.seq == k + 1 and p.check == "grammar" and "outside its phase" in p.reason for p in rechained)
    code, err = verify_cli(tmp_path, b"".join(lines), seamline_cmd, cli_env)
    assert code == 1 and f"record {k + 1} (line {k + 1})" in err


def test_illegal_transition_injected(
    tmp_path: Path, trace_lines: list[bytes], seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    lines = list(trace_lines)
    k = index_of(lines, b'"from":"write","reason":"next","to":"review"')
    lines[k] = lines[k].replace(b'"to":"review"', b'"to":"done"')
    forged = b"".join(rechain(lines))  # the chain holds; only the grammar can catch it
    problems = verify_trace(forged).problems
    assert problems[0].seq == k and problems[0].check == "grammar"
    assert problems[0].reason == "transition write -> done is not allowed by the definition"
    code, err = verify_cli(tmp_path, forged, seamline_cmd, cli_env)
    assert code == 1 and f"record {k} (line {k + 1}): grammar: transition write -> done is not allowed" in err


def test_truncated_file(
    tmp_path: Path, trace_lines: list[bytes], seamline_cmd: list[str], cli_env: dict[str, str]
) -> None:
    data = b"".join(trace_lines)
    cut = data[: len(data) - len(trace_lines[-1]) // 2]  # half of the last record is gone
    reasons = [str(p) for p in verify_trace(cut).problems]
    n = len(trace_lines)
    assert f"unreadable record (line {n}): chain: the last line is cut short (truncated file)" in reasons
    assert any("ends without run_end" in r for r in reasons)
    at_boundary = b"".join(trace_lines[:-3])
    boundary = verify_trace(at_boundary).problems
    assert [p.check for p in boundary] == ["completeness"] and "ends without run_end" in boundary[0].reason
    code, err = verify_cli(tmp_path, cut, seamline_cmd, cli_env)
    assert code == 1 and "truncated" in err


def test_garbage_and_empty_files() -> None:
    assert "empty" in str(verify_trace(b"").problems[0])
    problems = verify_trace(b"not json at all\n").problems
    assert problems[0].reason.startswith("not a trace record")
