"""A JSON-RPC line nested past what the decoder takes (msgspec raises RecursionError, not
DecodeError) is a parse error, and `seamline acp` goes on serving (issue 29)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from seamline.errors import ProviderFailure
from seamline.transport.jsonrpc import decode_message
from tests.acp_agent.support import WRITE_NOTE, agent_argv, agent_env, write_script

pytestmark = pytest.mark.real


def _deep(depth: int, request_id: int) -> bytes:
    return b'{"jsonrpc": "2.0", "id": %d, "method": "initialize", "params": %s%s}' % (
        request_id,
        b"[" * depth,
        b"]" * depth,
    )


def test_a_deeply_nested_line_is_a_parse_error_and_seamline_acp_goes_on(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    argv = agent_argv(write_script(tmp_path, "note", WRITE_NOTE), tmp_path / "s.db")
    proc = subprocess.Popen(
        argv,
        env=agent_env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        requests = [
            _deep(1000, 1),
            _deep(100_000, 2),
            b'{"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {"protocolVersion": 1}}',
        ]
        out, err = proc.communicate(b"\n".join(requests) + b"\n", timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err
    answers = [json.loads(line) for line in out.splitlines()]
    parse_errors = [m for m in answers if "error" in m and m["error"]["code"] == -32700]
    assert len(parse_errors) == 2 and all("nested too deep" in m["error"]["message"] for m in parse_errors)
    assert next(m for m in answers if m.get("id") == 3)["result"]["protocolVersion"] == 1
    assert b"Traceback" not in err


def test_a_deeply_nested_line_from_a_program_is_a_classified_failure() -> None:
    with pytest.raises(ProviderFailure, match="nested too deep"):
        decode_message(_deep(1000, 1))
