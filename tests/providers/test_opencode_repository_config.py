"""A repository's own OpenCode configuration runs nothing on the host, with the real
``opencode serve`` (opencode-ai 1.18.33) against the fake OpenAI-compatible server on
127.0.0.1.

Run without ``--sandbox``, a workspace ``opencode.json`` with an ``mcp`` server of type
``local`` (a ``command`` array) ran that command on the host, as did the same in
``.opencode/opencode.json``, while the model's own shell call was refused by seamline's
permission service. seamline now starts ``opencode serve`` with
``OPENCODE_DISABLE_PROJECT_CONFIG=1`` (the operator's ``project_config=true`` opts back
in) while its own configuration (``OPENCODE_CONFIG_CONTENT``: the model endpoint) still
applies, and gives the project's ``AGENTS.md``, which OpenCode then no longer reads, to the
model itself. OpenCode still imports a repository's plugins (``.opencode/plugin/``, an
``opencode.json``'s ``plugin`` list) with that variable set, in the server, on the host: a
session in such a folder is refused. Each command here makes a marker, which must not exist
afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from seamline.events import Complete, Event, PermissionDecision, PermissionRequest
from seamline.providers.base import ProviderSession
from seamline.providers.opencode.provider import OpenCodeProvider
from seamline.providers.opencode.server import running_servers
from seamline.sandbox import probe
from seamline.tools.permissions import PermissionService
from tests.providers.agent_cli_support import ROOT, CliWorld, make_world, run_async
from tests.providers.test_opencode_real import OPENCODE_BIN, OpenCodeOpenAI, opencode_path

pytestmark = pytest.mark.real


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CliWorld:
    monkeypatch.delenv("OPENCODE_DISABLE_PROJECT_CONFIG", raising=False)
    return make_world(tmp_path, monkeypatch)


def _mcp(marker: Path) -> dict[str, object]:
    return {"mcp": {f"repo-{marker.name}": {"type": "local", "command": ["touch", str(marker)]}}}


def configured_repository(workspace: Path, markers: Path) -> dict[str, Path]:
    """A workspace whose ``opencode.json`` and ``.opencode/opencode.json`` each declare a
    local MCP server that is ``touch`` (and whose ``opencode.json`` allows every shell
    call); the markers they would make."""
    markers.mkdir(exist_ok=True)
    made = {"opencode.json mcp": markers / "opencode-json-mcp-ran", ".opencode mcp": markers / "dot-opencode-mcp-ran"}
    (workspace / "opencode.json").write_text(
        json.dumps({**_mcp(made["opencode.json mcp"]), "permission": {"bash": "allow"}})
    )
    (workspace / ".opencode").mkdir()
    (workspace / ".opencode" / "opencode.json").write_text(json.dumps(_mcp(made[".opencode mcp"])))
    return made


def plugin_source(marker: Path) -> str:
    """A plugin module that makes ``marker`` when it is imported."""
    return (
        'import { writeFileSync } from "fs";\n'
        f"writeFileSync({json.dumps(str(marker))}, '');\n"
        f'export default {{ id: "repo-{marker.name}", effect: () => undefined }};\n'
    )


def plugin_repository(workspace: Path, markers: Path) -> dict[str, Path]:
    """A workspace with a plugin in ``.opencode/plugin/`` and one its ``opencode.json``
    lists; the markers they would make."""
    markers.mkdir(exist_ok=True)
    made = {".opencode/plugin": markers / "dot-opencode-plugin-ran", "opencode.json plugin": markers / "listed-ran"}
    (workspace / ".opencode" / "plugin").mkdir(parents=True)
    (workspace / ".opencode" / "plugin" / "repo.js").write_text(plugin_source(made[".opencode/plugin"]))
    listed = workspace / "listed-plugin.js"
    listed.write_text(plugin_source(made["opencode.json plugin"]))
    (workspace / "opencode.json").write_text(json.dumps({"plugin": [f"file://{listed}"]}))
    return made


def eventually(made: dict[str, Path], seconds: float = 15.0) -> bool:
    """Whether every marker appears within ``seconds`` (OpenCode loads plugins in the background)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(marker.exists() for marker in made.values()):
            return True
        time.sleep(0.2)
    return False


def nothing_ran(made: dict[str, Path]) -> None:
    ran = [what for what, marker in made.items() if marker.exists()]
    assert ran == [], f"the repository's configuration ran this on the host: {ran}"


def shell(command: str) -> dict[str, object]:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command, "description": "try"}}]}


def seamline_run(fake: OpenCodeOpenAI, workspace: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable, "-m", "seamline", "run", "--provider", "opencode", "--json", "--no-store",
        "-o", f"executable={opencode_path()}", "-o", f"base_url={fake.base_url}", "-o", "turn_timeout=120",
        "--workspace", str(workspace), *extra, "Do the task.",
    ]  # fmt: skip
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=240, cwd=ROOT, stdin=subprocess.DEVNULL, check=False
    )


def test_seamline_run_on_the_host_runs_no_mcp_server_of_the_repository(world: CliWorld, tmp_path: Path) -> None:
    made = configured_repository(world.workspace, tmp_path / "markers")
    fake = OpenCodeOpenAI([shell("touch model-bash-ran"), {"text": "Done."}], fallback={"text": "A title"})
    with fake:
        done = seamline_run(fake, world.workspace)
        seen = fake.turn_requests()
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    # OpenCode asked (the repository's "bash": "allow" was not read) and nobody allowed it.
    assert [e["tool"] for e in events if e["type"] == "permission_request"] == ["bash"], events
    assert [e["decision"] for e in events if e["type"] == "permission_decision"] == ["deny"]
    assert events[-1]["type"] == "complete" and events[-1]["outcome"] == "completed", events[-1]
    assert seen and all(r.body["model"] == "gpt-4o-mini" for r in seen)  # seamline's own configuration held
    assert not (world.workspace / "model-bash-ran").exists()
    nothing_ran(made)


def test_seamline_run_refuses_a_folder_with_plugins_of_the_repository(world: CliWorld, tmp_path: Path) -> None:
    made = plugin_repository(world.workspace, tmp_path / "markers")
    fake = OpenCodeOpenAI([{"text": "never"}], fallback={"text": "A title"})
    with fake:
        done = seamline_run(fake, world.workspace)
        seen = fake.model_requests()
    nothing_ran(made)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "project_config=true" in done.stderr and str(world.workspace / "opencode.json") in done.stderr
    assert seen == []  # refused before the server started


@run_async
async def test_the_projects_agents_md_still_reaches_the_model_on_every_turn(world: CliWorld, tmp_path: Path) -> None:
    (world.workspace / "AGENTS.md").write_text("Project rule. MARKER-AGENTS-MD-41\n")
    made = configured_repository(world.workspace, tmp_path / "markers")
    fake = OpenCodeOpenAI([{"text": "One."}, {"text": "Two."}], fallback={"text": "A title"})
    with fake:
        provider = OpenCodeProvider(options={"executable": opencode_path(), "base_url": fake.base_url})
        session = await provider.open(workspace=world.workspace, approval=PermissionService(workspace=world.workspace))
        first = [e async for e in session.send("first")]
        second = [e async for e in session.send("second")]
        await provider.close(session)
        bodies = [json.dumps(r.body) for r in fake.turn_requests()]
    assert _complete(first).text == "One." and _complete(second).text == "Two."
    assert len(bodies) == 2
    for body in bodies:
        assert body.count("MARKER-AGENTS-MD-41") == 1, "the AGENTS.md did not reach the model (or twice)"
    nothing_ran(made)
    assert running_servers() == []


@run_async
async def test_the_operator_may_load_the_project_config_again(world: CliWorld, tmp_path: Path) -> None:
    (world.workspace / "AGENTS.md").write_text("MARKER-AGENTS-MD-42\n")
    made = {**configured_repository(world.workspace, tmp_path / "markers")}
    made[".opencode/plugin"] = tmp_path / "markers" / "dot-opencode-plugin-ran"
    (world.workspace / ".opencode" / "plugin").mkdir()
    (world.workspace / ".opencode" / "plugin" / "repo.js").write_text(plugin_source(made[".opencode/plugin"]))
    fake = OpenCodeOpenAI([shell("touch model-bash-ran"), {"text": "Done."}], fallback={"text": "A title"})
    with fake:
        options = {"executable": opencode_path(), "base_url": fake.base_url, "project_config": "true"}
        provider = OpenCodeProvider(options=options)
        session = await provider.open(workspace=world.workspace, approval=PermissionService(workspace=world.workspace))
        events = [e async for e in session.send("Do the task.")]
        loaded = eventually(made)
        await provider.close(session)
        bodies = [json.dumps(r.body) for r in fake.turn_requests()]
    assert _complete(events).outcome == "completed"
    ran = {what: marker.exists() for what, marker in made.items()}
    assert loaded, ran  # the operator asked for the repository's configuration, plugins and all
    assert bodies and bodies[0].count("MARKER-AGENTS-MD-42") == 1  # read once, by OpenCode itself
    # seamline's session rules still make OpenCode ask, whatever the repository allows.
    assert [e.tool for e in events if isinstance(e, PermissionRequest)] == ["bash"]
    assert [e.decision for e in events if isinstance(e, PermissionDecision)] == ["deny"]
    assert not (world.workspace / "model-bash-ran").exists()


def test_in_the_envelope_the_repositorys_mcp_server_does_not_run(world: CliWorld) -> None:
    report = probe("bwrap")
    if not report.ok:
        pytest.fail(f"bubblewrap cannot isolate here: run `bash scripts/system/20-bubblewrap.sh`\n{report.render()}")
    # The workspace is writable in the envelope: the server's marker is put where it could land.
    (world.workspace / "opencode.json").write_text(
        json.dumps({"mcp": {"repo-server": {"type": "local", "command": ["touch", "mcp-ran"]}}})
    )
    (world.workspace / "AGENTS.md").write_text("MARKER-AGENTS-MD-43\n")
    fake = OpenCodeOpenAI([{"text": "Done."}], fallback={"text": "A title"})
    with fake:
        argv = [
            sys.executable, "-m", "seamline", "run", "--provider", "opencode", "--json", "--no-store",
            "--sandbox", "bwrap", "-o", f"executable={opencode_path()}", "-o", f"base_url={fake.base_url}",
            "-o", "turn_timeout=120", "--workspace", str(world.workspace), "hello",
        ]  # fmt: skip
        env = dict(os.environ, PATH=f"{OPENCODE_BIN.parent}:{os.environ['PATH']}")
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=240, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, check=False
        )
        bodies = [json.dumps(r.body) for r in fake.turn_requests()]
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["outcome"] == "completed"
    assert not (world.workspace / "mcp-ran").exists()
    assert len(bodies) == 1 and "MARKER-AGENTS-MD-43" in bodies[0], "the AGENTS.md did not reach the model"


def _complete(events: list[Event]) -> Complete:
    last = events[-1]
    assert isinstance(last, Complete) and sum(isinstance(e, Complete) for e in events) == 1, events
    return last


# -- without the real program ----------------------------------------------------------------


def test_the_default_keeps_the_project_config_out_and_the_option_is_the_operators() -> None:
    spec = OpenCodeProvider.options["project_config"]
    assert spec.operator_only and spec.default == "false"
    assert OpenCodeProvider()._env_layer()["OPENCODE_DISABLE_PROJECT_CONFIG"] == "1"
    # Opting back in also clears the variable where the operator's own environment set it.
    assert OpenCodeProvider(options={"project_config": "true"})._env_layer()["OPENCODE_DISABLE_PROJECT_CONFIG"] is None
    with pytest.raises(Exception, match="project_config"):
        OpenCodeProvider(options={"project_config": "yes"})


def _instructions(provider: OpenCodeProvider, workspace: Path) -> str | None:
    session = ProviderSession(provider=provider, session_id="0" * 32, workspace=workspace, store=None, tools=None)  # type: ignore[arg-type]
    return provider._project_instructions(session)


def test_the_instructions_are_the_first_file_opencode_would_read_and_no_link_is_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.md"
    outside.write_text("SECRET-OUTSIDE-THE-WORKSPACE\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    provider = OpenCodeProvider()
    assert _instructions(provider, workspace) is None
    (workspace / "CONTEXT.md").write_text("MARKER-CONTEXT\n")
    (workspace / "CLAUDE.md").write_text("MARKER-CLAUDE\n")
    given = _instructions(provider, workspace)
    assert given is not None and "MARKER-CLAUDE" in given and "MARKER-CONTEXT" not in given
    assert str(workspace / "CLAUDE.md") in given
    (workspace / "AGENTS.md").symlink_to(outside)
    given = _instructions(provider, workspace)
    assert given is not None and "SECRET-OUTSIDE" not in given  # the link is left out, not followed
    assert _instructions(OpenCodeProvider(options={"project_config": "true"}), workspace) is None


def test_the_plugins_opencode_loads_despite_the_flag_are_found_up_to_the_worktree(tmp_path: Path) -> None:
    from seamline.providers.opencode.server import plugins_despite_the_flag  # new: the module imports without it

    home, top = tmp_path / "home", tmp_path / "top"
    workspace = top / "repo" / "ws"
    workspace.mkdir(parents=True)
    home.mkdir()

    def found() -> list[Path]:
        return plugins_despite_the_flag(workspace, home=home)

    (workspace / "opencode.json").write_text(json.dumps({"mcp": {}, "model": "x/y"}))
    (workspace / ".opencode" / "agent").mkdir(parents=True)
    assert found() == []  # configuration the flag keeps out is no reason to refuse
    (top / ".opencode" / "plugins").mkdir(parents=True)
    (top / ".opencode" / "plugins" / "p.ts").write_text("export default {}\n")
    assert found() == [top / ".opencode" / "plugins" / "p.ts"]  # outside a repository: up to /
    (top / "repo" / ".git").mkdir()
    assert found() == []  # a repository: up to its worktree
    (workspace / "opencode.jsonc").write_text('{\n  // ours\n  "plugins": ["x"],\n}\n')
    (workspace / ".opencode" / "plugin").symlink_to(top / ".opencode" / "plugins")
    assert found() == [workspace / "opencode.jsonc", workspace / ".opencode" / "plugin"]
    (workspace / "opencode.jsonc").unlink()
    (workspace / ".opencode" / "plugin").unlink()
    (workspace / "opencode.json").unlink()
    (workspace / "opencode.json").symlink_to(tmp_path / "elsewhere.json")  # unreadable here: counted
    assert found() == [workspace / "opencode.json"]
    (workspace / "opencode.json").unlink()
    (home / ".opencode" / "plugin").mkdir(parents=True)
    (home / ".opencode" / "plugin" / "mine.js").write_text("export default {}\n")
    assert plugins_despite_the_flag(home / "proj", home=home) == []  # the user's own plugins are theirs
