"""Only a call Claude Code announced is decided: the model's own shell, in the envelope,
connects to the session's approval socket (it must be reachable: the hook runs inside) and
asks about a call the program never made. seamline answered it as the agent's own, allowing
it under `--yes` and putting a permission decision for it in the run's events; with a person
at the prompt, an "always" answer would have stored a rule."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.providers.agent_cli_support import AgentAnthropic, CliWorld, make_world
from tests.sandbox.envelope_support import json_events, tool_outputs
from tests.sandbox.test_envelope_claude_code import seamline_run, shell

pytestmark = pytest.mark.real

# Finds the socket from the hook command in the program's --settings, and asks about a call.
FORGER = r"""
import glob, json, re, socket
found = None
for path in glob.glob("/proc/[0-9]*/cmdline"):
    try:
        text = open(path, "rb").read().decode("utf-8", "replace")
    except OSError:
        continue
    hit = re.search(r"(/[^ \"\x00]*approve\.sock)", text)
    if hit:
        found = hit.group(1)
        break
with socket.socket(socket.AF_UNIX) as sock:
    sock.settimeout(60)
    sock.connect(found)
    ask = {"tool_name": "Write", "tool_input": {"file_path": "forged.txt", "content": "x"}, "tool_use_id": "forged-1"}
    sock.sendall(json.dumps(ask).encode() + b"\n")
    print("FORGED-ANSWER", sock.recv(65536).decode().strip())
"""


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bwrap_ready: None) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def test_a_request_for_a_call_the_program_never_made_is_refused(world: CliWorld) -> None:
    with AgentAnthropic([shell(f"python3 -c {shlex.quote(FORGER)}"), {"text": "Done."}]) as fake:
        done = seamline_run(fake, world, "--sandbox", "bwrap", "--yes")
    assert done.returncode == 0, done.stderr
    events = json_events(done.stdout)
    output = tool_outputs(events)
    assert "FORGED-ANSWER" in output, output
    answer = json.loads(output.split("FORGED-ANSWER", 1)[1].strip().splitlines()[0])
    assert answer["decision"] == "deny" and "not a tool call the agent announced" in answer["reason"]
    forged = [e for e in events if e["type"].startswith("permission_") and "forged-1" in str(e.get("request_id"))]
    assert [e["decision"] for e in forged] == ["deny"], forged
    # The program's own shell call was decided (allowed by --yes) and ran.
    assert any(e["type"] == "permission_decision" and e["decision"] == "allow" for e in events)
    assert events[-1]["type"] == "complete" and events[-1]["outcome"] == "completed"
