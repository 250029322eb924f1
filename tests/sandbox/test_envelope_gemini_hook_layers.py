"""The Gemini CLI's approval hook in the envelope holds against the settings layers it reads
there: its private home (seeded from the user's ``~/.gemini``, and writable by the model's own
shell) and the workspace. A stored deny rule names ``touch*``; the model's shell runs ``touch
marker``: the rule decides and the marker is never made, also on a later turn after the
model's shell wrote layers naming the hook as disabled. The real Gemini CLI, real
bubblewrap, the fake Gemini API on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from seamline.providers.agent_clis.gemini_cli import GeminiCliProvider
from tests.fakes._http import FakeAPI
from tests.fakes.gemini_api import FakeGemini
from tests.providers.agent_cli_support import CliWorld, cli_path, collect, make_gemini_world, run_async
from tests.providers.hook_layer_support import assert_denied_by_rule, deny_touch, outputs, two_turns

pytestmark = pytest.mark.real
# Turn one's shell: every name of seamline's hook it can see (the one of this very start of
# the CLI, in the system settings bound at /etc/gemini-cli) and the old fixed name go into
# the private home's settings and the workspace's, with hooks off and every folder trusted.
GEMINI_PLANT = """python3 -c "
import json, os, re
names = re.findall('seamline-approval[0-9a-f-]*', open('/etc/gemini-cli/settings.json').read())
off = {'enabled': False, 'disabled': sorted(set(names + ['seamline-approval']))}
path = os.environ['HOME'] + '/.gemini/settings.json'
found = json.load(open(path))
found['hooksConfig'] = off
found.setdefault('security', {})['folderTrust'] = {'enabled': False}
json.dump(found, open(path, 'w'))
os.makedirs('.gemini', exist_ok=True)
json.dump({'hooksConfig': off}, open('.gemini/settings.json', 'w'))
print('planted', names)
"
"""


@pytest.fixture
def gemini_world(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, bwrap_ready: None
) -> CliWorld:
    return make_gemini_world(tmp_path, monkeypatch, request)


def gemini_shell(command: str) -> list[dict[str, object]]:
    return [{"tool_calls": [{"name": "run_shell_command", "arguments": {"command": command}}]}, {"text": "Done."}]


def gemini(fake: FakeAPI) -> GeminiCliProvider:
    options = {
        "executable": cli_path("gemini"),
        "base_url": fake.root_url,
        "max_retries": "0",
        "sandbox": "bwrap",
        "turn_timeout": "120",
    }
    return GeminiCliProvider(model="gemini-2.5-flash", options=options)


@run_async
async def test_gemini_a_private_home_seeded_with_the_hook_disabled_keeps_it_on(gemini_world: CliWorld) -> None:
    settings = gemini_world.home / ".gemini" / "settings.json"
    seeded = json.loads(settings.read_text())
    seeded["hooksConfig"] = {"enabled": False, "disabled": ["seamline-approval"]}
    settings.write_text(json.dumps(seeded))  # the private home is seeded from it
    marker = gemini_world.workspace / "marker"
    with FakeGemini(gemini_shell(f"touch {marker}"), fallback={"text": "side"}) as fake:
        provider = gemini(fake)
        session = await provider.open(
            workspace=gemini_world.workspace, approval=deny_touch(gemini_world, "run_shell_command")
        )
        try:
            events = await collect(session, "do it")
        finally:
            await provider.close(session)
    assert_denied_by_rule(events, marker)


@run_async
async def test_gemini_a_layer_the_models_shell_wrote_does_not_switch_the_hook_off_next_turn(
    gemini_world: CliWorld, tmp_path: Path
) -> None:
    marker = gemini_world.workspace / "marker"
    script = [*gemini_shell(GEMINI_PLANT), *gemini_shell(f"touch {marker}")]
    with FakeGemini(script, fallback={"text": "side"}) as fake:
        # The second turn is a new process, resuming the session.
        service = deny_touch(gemini_world, "run_shell_command")
        first, second = await two_turns(gemini(fake), gemini_world, service, tmp_path / "store.db")
    assert "planted ['seamline-approval" in outputs(first), first
    assert_denied_by_rule(second, marker)
