"""What the envelope tests share: a second local server that must stay unreachable, the
command a model runs to try it, how to read `seamline run --json` output, and the stored
rules and reverts the approval and journal tests use."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.providers.agent_cli_support import ROOT


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.server.hits.append(self.path)  # type: ignore[attr-defined]
        body = b"SECOND-SERVER-REACHED\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextmanager
def second_server() -> Iterator[tuple[int, list[str]]]:
    """An HTTP server on 127.0.0.1 that is on no allowlist: (port, paths it was asked for)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.hits = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], server.hits  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def reach_command(port: int) -> str:
    """A shell command that tries the second server directly, then through the proxy."""
    return (
        f"curl -sS -m 10 http://127.0.0.1:{port}/direct; echo; "
        f'env -u NO_PROXY -u no_proxy curl -sS -m 10 -x "$HTTP_PROXY" http://127.0.0.1:{port}/proxied'
    )


def json_events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def tool_outputs(events: list[dict[str, Any]]) -> str:
    return "\n".join(str(e["output"]) for e in events if e["type"] == "tool_result")


def refused(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        e["payload"]
        for e in events
        if e["type"] == "raw" and e.get("source") == "seamline" and e["payload"].get("egress") == "refused"
    ]


def envelope_summary(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The turn's one envelope report (``{"envelope": "bwrap", "egress_refused", …}``),
    checked to come after every refusal it counts and before the turn's ``complete``."""
    at = [i for i, e in enumerate(events) if e["type"] == "raw" and "egress_refused" in e.get("payload", {})]
    assert len(at) == 1, events
    last_refusal = max((i for i, e in enumerate(events) if e in _refusal_events(events)), default=-1)
    assert last_refusal < at[0] < len(events) - 1 and events[-1]["type"] == "complete", events
    payload: dict[str, Any] = events[at[0]]["payload"]
    assert payload["envelope"] == "bwrap"
    return payload


def _refusal_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "raw" and e.get("payload", {}).get("egress") == "refused"]


def seamline_cli(*argv: str, store: Path) -> subprocess.CompletedProcess[str]:
    """``python -m seamline ARGV`` against the store file ``store``."""
    env = {**os.environ, "SEAMLINE_STORE": str(store)}
    command = [sys.executable, "-m", "seamline", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env, check=False)


def add_deny_rule(store: Path, tool: str, pattern: str) -> None:
    """A stored rule, added as a user adds one: ``seamline permissions add deny``."""
    added = seamline_cli("permissions", "add", "deny", "--tool", tool, "--pattern", pattern, store=store)
    assert added.returncode == 0, added.stderr


def assert_denied_by_rule(events: list[dict[str, Any]]) -> None:
    """One ``permission_decision``, a deny by the stored rule, and the turn completed."""
    decisions = [e for e in events if e["type"] == "permission_decision"]
    assert [d["decision"] for d in decisions] == ["deny"], events
    assert "denied by rule" in decisions[0]["reason"], decisions
    assert events[-1]["type"] == "complete" and events[-1]["outcome"] == "completed", events[-1]


def revert_run(store: Path, events: list[dict[str, Any]]) -> None:
    """``seamline revert RUN`` for the run whose ``--json`` events these are."""
    done = seamline_cli("revert", str(events[0]["session_id"]), "--store", str(store), store=store)
    assert done.returncode == 0, done.stderr


#: Runs a script (model answers) with `--sandbox bwrap --store STORE` against the backend's fake.
EnvelopedRun = Callable[[list[dict[str, object]], Path], "subprocess.CompletedProcess[str]"]
Shell = Callable[[str], dict[str, object]]


def check_a_deny_rule_holds(run: EnvelopedRun, shell: Shell, *, tool: str, workspace: Path, store: Path) -> None:
    """A stored deny rule refuses the agent's own shell call inside the envelope: the
    decision is the rule's, the command never runs."""
    marker = workspace / "marker"
    add_deny_rule(store, tool, "command=touch*")
    done = run([shell(f"touch {marker}"), {"text": "Done."}], store)
    assert done.returncode == 0, done.stderr
    assert_denied_by_rule(json_events(done.stdout))
    assert not marker.exists()


def check_revert_undoes_a_write(run: EnvelopedRun, shell: Shell, *, workspace: Path, store: Path) -> None:
    """`seamline revert` undoes a file the agent wrote with its own shell inside the envelope."""
    done = run([shell("printf new > made.txt"), {"text": "Done."}], store)
    assert done.returncode == 0, done.stderr
    assert (workspace / "made.txt").read_text() == "new"
    revert_run(store, json_events(done.stdout))
    assert not (workspace / "made.txt").exists()
