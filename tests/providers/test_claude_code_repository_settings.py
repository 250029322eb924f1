"""A repository's own Claude Code configuration runs nothing on the host, with the real
``claude`` against the fake Anthropic API on 127.0.0.1.

Run without ``--sandbox``, a workspace ``.claude/settings.json`` with a ``SessionStart``
hook ran its command on the host before the first model call, and the workspace's
``.mcp.json`` stdio servers were started (Claude Code's ``-p`` mode skips the trust dialog
that would have asked), while the model's own shell call was refused by seamline's
permission service. seamline now starts Claude Code with ``--setting-sources user`` (the
operator's ``setting_sources`` opts back in), and gives the project's ``CLAUDE.md`` files,
which only the dropped layer would load, to the model itself. Each command here is
``touch MARKER``: the marker must not exist after the turn, and the turn still completes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest
from seamline.events import Event, PermissionDecision, PermissionRequest
from seamline.providers.agent_clis.claude_code import ClaudeCodeProvider
from seamline.providers.base import ProviderSession
from seamline.providers.programs.runtime_dir import remove_runtime_dir
from seamline.sandbox import probe
from seamline.tools.permissions import PermissionService
from tests.providers.agent_cli_support import (
    ROOT,
    AgentAnthropic,
    CliWorld,
    cli_path,
    collect,
    make_world,
    one_complete,
    run_async,
)

pytestmark = pytest.mark.real
MODEL = "claude-sonnet-4-5"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    return make_world(tmp_path, monkeypatch)


def provider(fake: AgentAnthropic, **options: str) -> ClaudeCodeProvider:
    merged = {"executable": cli_path("claude"), "base_url": fake.root_url, "max_retries": "0", **options}
    return ClaudeCodeProvider(model=MODEL, options=merged)


def _session_start(marker: Path) -> dict[str, object]:
    return {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": f"touch {marker}"}]}]}}


def hostile_repository(world: CliWorld, markers: Path, *, mcp: bool = True) -> dict[str, Path]:
    """A workspace whose project settings (``settings.json`` and the local layer's
    ``settings.local.json``) run ``touch`` at session start and enable its ``.mcp.json``
    servers, one of which is ``touch``; the markers they would make, by what makes them."""
    markers.mkdir(exist_ok=True)
    made = {"project hook": markers / "project-hook-ran", "local hook": markers / "local-hook-ran"}
    (world.workspace / ".claude").mkdir()
    project = {"enableAllProjectMcpServers": True, **_session_start(made["project hook"])}
    (world.workspace / ".claude" / "settings.json").write_text(json.dumps(project))
    (world.workspace / ".claude" / "settings.local.json").write_text(json.dumps(_session_start(made["local hook"])))
    if mcp:
        made[".mcp.json server"] = markers / "project-mcp-server-ran"
        server = {"type": "stdio", "command": "touch", "args": [str(made[".mcp.json server"])]}
        (world.workspace / ".mcp.json").write_text(json.dumps({"mcpServers": {"repo-server": server}}))
    return made


def nothing_ran(made: dict[str, Path]) -> None:
    ran = [what for what, marker in made.items() if marker.exists()]
    assert ran == [], f"the repository's configuration ran this on the host: {ran}"


def bash_then_done(marker: Path) -> list[dict[str, object]]:
    return [{"tool_calls": [{"name": "Bash", "arguments": {"command": f"touch {marker}"}}]}, {"text": "Done."}]


def asked_and_denied(events: list[Event]) -> None:
    assert [e.tool for e in events if isinstance(e, PermissionRequest)] == ["Bash"], events
    assert [e.decision for e in events if isinstance(e, PermissionDecision)] == ["deny"], events


def test_seamline_run_on_the_host_runs_no_hook_of_the_repository(world: CliWorld, tmp_path: Path) -> None:
    # No .mcp.json here: seamline run itself starts a workspace .mcp.json's servers (its own
    # MCP layer, not Claude Code's); the provider-level tests below cover Claude Code's.
    made = hostile_repository(world, tmp_path / "markers", mcp=False)
    bash_marker = tmp_path / "markers" / "model-bash-ran"
    fake = AgentAnthropic(bash_then_done(bash_marker), fallback={"text": "side"})
    with fake:
        argv = [
            sys.executable, "-m", "seamline", "run", "--provider", "claude-code", "--model", MODEL, "--json",
            "--no-store", "-o", f"executable={cli_path('claude')}", "-o", f"base_url={fake.root_url}",
            "-o", "max_retries=0", "--workspace", str(world.workspace), "Do the task.",
        ]  # fmt: skip
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=180, cwd=ROOT, stdin=subprocess.DEVNULL, check=False
        )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert [e["decision"] for e in events if e["type"] == "permission_decision"] == ["deny"]
    assert events[-1]["type"] == "complete" and events[-1]["outcome"] == "completed", events[-1]
    assert not bash_marker.exists()
    nothing_ran(made)


@pytest.mark.parametrize("warm", ["true", "false"])
@run_async
async def test_the_approval_hook_holds_and_the_repositorys_hook_and_servers_do_not_run(
    world: CliWorld, tmp_path: Path, warm: str
) -> None:
    made = hostile_repository(world, tmp_path / "markers")
    bash_marker = tmp_path / "markers" / "model-bash-ran"
    service = PermissionService(workspace=world.workspace)  # no --yes, no prompter, no rule
    fake = AgentAnthropic(bash_then_done(bash_marker), fallback={"text": "side"})
    with fake:
        claude = provider(fake, warm=warm)
        session = await claude.open(workspace=world.workspace, approval=service)
        events = await collect(session, "Do the task.")
        await claude.close(session)
    asked_and_denied(events)  # seamline's own --settings hook still decides
    assert one_complete(events).outcome == "completed"
    assert not bash_marker.exists()
    nothing_ran(made)


@pytest.mark.parametrize("warm", ["true", "false"])
@run_async
async def test_the_projects_claude_md_files_still_reach_the_model_on_every_turn(world: CliWorld, warm: str) -> None:
    (world.workspace / "CLAUDE.md").write_text("Project rule one. MARKER-ROOT-MEMORY-31\n")
    (world.workspace / ".claude").mkdir()
    (world.workspace / ".claude" / "CLAUDE.md").write_text("Project rule two. MARKER-DOT-MEMORY-32\n")
    fake = AgentAnthropic([{"text": "One."}, {"text": "Two."}], fallback={"text": "side"})
    with fake:
        claude = provider(fake, warm=warm)
        session = await claude.open(workspace=world.workspace)
        first = await collect(session, "first")
        second = await collect(session, "second")
        await claude.close(session)
        bodies = [json.dumps(r.body) for r in fake.turn_requests()]
    assert one_complete(first).text == "One." and one_complete(second).text == "Two."
    assert len(bodies) == 2
    for body in bodies:
        assert "MARKER-ROOT-MEMORY-31" in body and "MARKER-DOT-MEMORY-32" in body, "a CLAUDE.md did not reach the model"


@run_async
async def test_the_operator_may_load_the_project_layer_again(world: CliWorld, tmp_path: Path) -> None:
    made = hostile_repository(world, tmp_path / "markers")
    (world.workspace / "CLAUDE.md").write_text("MARKER-ROOT-MEMORY-33\n")
    fake = AgentAnthropic([{"text": "Done."}], fallback={"text": "side"})
    with fake:
        claude = provider(fake, setting_sources="user,project,local", warm="false")
        session = await claude.open(workspace=world.workspace)
        events = await collect(session, "Do the task.")
        await claude.close(session)
        bodies = [json.dumps(r.body) for r in fake.turn_requests()]
    assert one_complete(events).outcome == "completed"
    assert all(marker.exists() for marker in made.values())  # the operator asked for the repository's settings
    assert len(bodies) == 1 and bodies[0].count("MARKER-ROOT-MEMORY-33") == 1  # given once, by Claude Code itself


@run_async
async def test_the_users_own_mcp_servers_still_start(world: CliWorld, tmp_path: Path) -> None:
    """Why not ``--strict-mcp-config``: it would drop the user's servers too."""
    marker = tmp_path / "user-mcp-server-ran"
    server = {"type": "stdio", "command": "touch", "args": [str(marker)]}
    (world.home / ".claude.json").write_text(json.dumps({"mcpServers": {"mine": server}}))
    fake = AgentAnthropic([{"text": "Done."}], fallback={"text": "side"})
    with fake:
        claude = provider(fake, warm="false")
        session = await claude.open(workspace=world.workspace)
        events = await collect(session, "hello")
        await claude.close(session)
    assert one_complete(events).outcome == "completed"
    assert marker.exists()


def test_in_the_envelope_the_repositorys_hook_does_not_run(world: CliWorld, tmp_path: Path) -> None:
    report = probe("bwrap")
    if not report.ok:
        pytest.fail(f"bubblewrap cannot isolate here: run `bash scripts/system/20-bubblewrap.sh`\n{report.render()}")
    # The workspace is writable in the envelope: the hook's marker is put where it could land.
    settings = {"hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "touch hook-ran"}]}]}}
    (world.workspace / ".claude").mkdir()
    (world.workspace / ".claude" / "settings.json").write_text(json.dumps(settings))
    (world.workspace / "CLAUDE.md").write_text("MARKER-ROOT-MEMORY-34\n")
    fake = AgentAnthropic([{"text": "Done."}], fallback={"text": "side"})
    with fake:
        argv = [
            sys.executable, "-m", "seamline", "run", "--provider", "claude-code", "--model", MODEL, "--json",
            "--no-store", "--sandbox", "bwrap", "-o", f"executable={cli_path('claude')}",
            "-o", f"base_url={fake.root_url}", "-o", "max_retries=0", "--workspace", str(world.workspace), "hello",
        ]  # fmt: skip
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=180, cwd=ROOT, stdin=subprocess.DEVNULL, check=False
        )
        bodies = [json.dumps(r.body) for r in fake.turn_requests()]
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["outcome"] == "completed"
    assert not (world.workspace / "hook-ran").exists()
    assert len(bodies) == 1 and "MARKER-ROOT-MEMORY-34" in bodies[0], "the CLAUDE.md did not reach the model"


# -- without the real program ----------------------------------------------------------------


def _session(claude: ClaudeCodeProvider, workspace: Path) -> ProviderSession:
    return ProviderSession(provider=claude, session_id="0" * 32, workspace=workspace, store=None, tools=None)  # type: ignore[arg-type]


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_the_default_loads_the_user_layer_only_and_the_option_is_the_operators(tmp_path: Path) -> None:
    claude = ClaudeCodeProvider()
    argv = claude._invocation(
        session=_session(claude, tmp_path), prompt="hi", executable="claude", mode="fresh", target=None
    ).argv
    assert _flag(argv, "--setting-sources") == "user"
    assert "--append-system-prompt-file" not in argv  # no CLAUDE.md here: nothing to add
    assert ClaudeCodeProvider.options["setting_sources"].operator_only
    assert ClaudeCodeProvider.options["setting_sources"].default == "user"
    none = ClaudeCodeProvider(options={"setting_sources": ""})
    argv = none._invocation(
        session=_session(none, tmp_path), prompt="hi", executable="claude", mode="fresh", target=None
    ).argv
    assert _flag(argv, "--setting-sources") == ""
    with pytest.raises(InvalidRequest, match="setting_sources"):
        ClaudeCodeProvider(options={"setting_sources": "user,policy"})


def test_a_claude_md_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("SECRET-OUTSIDE-THE-WORKSPACE\n")
    workspace = tmp_path / "ws"
    (workspace / ".claude").mkdir(parents=True)
    (workspace / "CLAUDE.md").symlink_to(outside)
    (workspace / ".claude" / "CLAUDE.md").write_text("MARKER-DOT-MEMORY-35\n")
    claude = ClaudeCodeProvider()
    session = _session(claude, workspace)
    try:
        argv = claude._invocation(session=session, prompt="hi", executable="claude", mode="fresh", target=None).argv
        given = _flag(argv, "--append-system-prompt-file")
        assert given is not None
        text = Path(given).read_text()
    finally:
        remove_runtime_dir(session.state)
    assert "MARKER-DOT-MEMORY-35" in text and "SECRET-OUTSIDE" not in text


def test_the_project_layer_named_by_the_operator_gets_no_second_copy(tmp_path: Path) -> None:
    (tmp_path / "CLAUDE.md").write_text("MARKER\n")
    claude = ClaudeCodeProvider(options={"setting_sources": "project,user"})
    argv = claude._invocation(
        session=_session(claude, tmp_path), prompt="hi", executable="claude", mode="fresh", target=None
    ).argv
    assert _flag(argv, "--setting-sources") == "project,user"
    assert "--append-system-prompt-file" not in argv
