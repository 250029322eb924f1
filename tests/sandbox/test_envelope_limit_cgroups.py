"""The envelope's limits without an agent program: the options and policy that give them,
the cgroups made per envelope start (a real pids cgroup refusing real forks, removed
afterwards), the report, the refusal where a limit asked for cannot hold, and what
`seamline sandbox check` says."""

from __future__ import annotations

import asyncio
import doctest
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest, SandboxViolation
from seamline.providers.programs.envelope_launch import Enveloped, enter_envelope, sandbox_mode
from seamline.providers.programs.runtime_dir import remove_runtime_dir
from seamline.sandbox import envelope_limits
from seamline.sandbox.egress import AllowList, EgressGate
from seamline.sandbox.envelope_limits import (
    DEFAULT_MAX_PROCESSES,
    EnvelopeLimits,
    default_memory_bytes,
    open_envelope_cgroups,
    policy_limit_options,
)
from seamline.sandbox.memory import memory_cgroup_base
from seamline.sandbox.pids import pids_cgroup_base
from tests.providers.agent_cli_support import ROOT

_SPAWN = (
    "import subprocess\n"
    "started = []\n"
    "for _ in range(50):\n"
    "    try:\n"
    "        started.append(subprocess.Popen(['sleep', '30']))\n"
    "    except OSError:\n"
    "        break\n"
    "print(len(started))\n"
    "for p in started:\n"
    "    p.kill()\n"
    "    p.wait()\n"
)


def test_the_options_give_the_limits_and_say_which_were_asked_for() -> None:
    default = EnvelopeLimits.from_options({})
    assert default.max_processes == DEFAULT_MAX_PROCESSES and default.explicit == frozenset()
    assert default.memory_bytes == default_memory_bytes() >= 2 * 1024**3
    given = EnvelopeLimits.from_options({"max_processes": "64", "memory_bytes": "1000000", "tmp_bytes": ""})
    assert (given.max_processes, given.memory_bytes) == (64, 1000000)
    assert given.explicit == {"max_processes", "memory_bytes"}
    with pytest.raises(InvalidRequest, match="max_processes"):
        EnvelopeLimits.from_options({"max_processes": "0"})
    mode = sandbox_mode({"sandbox": "bwrap", "max_processes": "64"})
    assert mode == "bwrap" and mode != "none" and mode.limits.max_processes == 64


def test_the_default_memory_is_half_of_what_seamline_may_use() -> None:
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert 2 * 1024**3 <= default_memory_bytes() <= max(total // 2, 2 * 1024**3)


def test_a_policy_gives_its_limits_and_refuses_those_of_one_command(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text('[network]\nallow = ["pypi.org"]\n[limits]\nmax_processes = 64\nmemory_bytes = 268435456\n')
    assert policy_limit_options(policy) == {"max_processes": "64", "memory_bytes": "268435456"}
    policy.write_text("network = false\n")
    assert policy_limit_options(policy) == {}
    as_json = tmp_path / "policy.json"
    as_json.write_text(json.dumps({"limits": {"wall_s": 5, "tmp_bytes": 1048576}}))
    with pytest.raises(InvalidRequest, match="wall_s") as refused:
        policy_limit_options(as_json)
    assert "Nothing was run" in refused.value.message


@pytest.mark.real
def test_a_pids_cgroup_per_envelope_refuses_forks_counts_them_and_is_removed() -> None:
    if pids_cgroup_base()[0] is None or memory_cgroup_base()[0] is None:
        pytest.fail("this machine gives seamline no pids and memory cgroups; the envelope tests need them")
    cgroups = open_envelope_cgroups(EnvelopeLimits(max_processes=8, memory_bytes=256 * 1024**2), who="test")
    assert cgroups.pids is not None and cgroups.memory is not None and cgroups.unenforced == ()
    paths = [cgroups.pids.path, cgroups.memory.path]
    try:
        argv = cgroups.launcher([sys.executable, "-I", "-S", "-c", _SPAWN])
        assert argv[:2] == ["/bin/sh", "-c"] and argv[-5] == sys.executable
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert 0 < int(done.stdout) < 10  # 8 and bubblewrap's 2, the launcher (now python) among them
        refused = cgroups.forks_refused()
        assert refused is not None and refused >= 1 and cgroups.oom_kills() == 0
        envelope = Enveloped(argv=argv, env={}, gate=_gate(), home=Path("/nonexistent"), limits=cgroups)
        first = envelope.summary().payload
        assert first["forks_refused"] == refused and first["oom_kills"] == 0 and "limits_unenforced" not in first
        assert envelope.summary().payload["forks_refused"] == 0  # counted once, in the turn it happened
    finally:
        cgroups.remove()
    assert not any(p.exists() for p in paths)
    assert cgroups.forks_refused() == refused  # the count outlives the cgroup, for a report made after close


def test_a_limit_asked_for_that_cannot_hold_is_refused_and_a_default_says_it_does_not_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(envelope_limits, "pids_cgroup_base", lambda: (None, "no pids cgroup here"))
    monkeypatch.setattr(envelope_limits, "memory_cgroup_base", lambda: (None, "no memory cgroup here"))
    monkeypatch.setattr("seamline.sandbox.envelope_limits.os.geteuid", lambda: 0)
    for asked in ({"max_processes": "64"}, {"memory_bytes": "268435456"}):
        with pytest.raises(SandboxViolation, match="Nothing was run") as refused:
            open_envelope_cgroups(EnvelopeLimits.from_options(asked), who="claude-code", prlimit="/usr/bin/prlimit")
        assert next(iter(asked)) in refused.value.message
    fallback = open_envelope_cgroups(EnvelopeLimits(), who="claude-code", prlimit="/usr/bin/prlimit")
    assert fallback.pids is None and fallback.memory is None and fallback.launcher(["bwrap"]) == ["bwrap"]
    assert [u.split(":")[0] for u in fallback.unenforced] == ["max_processes", "memory_bytes"]
    envelope = Enveloped(argv=[], env={}, gate=_gate(), home=Path("/nonexistent"), limits=fallback)
    payload = envelope.summary().payload
    assert "forks_refused" not in payload and "oom_kills" not in payload
    assert payload["limits_unenforced"] == list(fallback.unenforced)


def test_without_a_pids_cgroup_a_user_not_root_falls_back_to_rlimit_nproc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(envelope_limits, "pids_cgroup_base", lambda: (None, "no pids cgroup here"))
    monkeypatch.setattr(envelope_limits, "memory_cgroup_base", lambda: (None, "no memory cgroup here"))
    monkeypatch.setattr("seamline.sandbox.envelope_limits.os.geteuid", lambda: 1000)
    limits = EnvelopeLimits.from_options({"max_processes": "64"})
    made = open_envelope_cgroups(limits, who="claude-code", prlimit="/usr/bin/prlimit")
    assert made.inner_prefix() == ["/usr/bin/prlimit", "--nproc=66", "--"]
    assert [u.split(":")[0] for u in made.unenforced] == ["memory_bytes"]


@pytest.mark.real
def test_sandbox_check_says_how_the_envelope_is_limited() -> None:
    done = _seamline("sandbox", "check")
    assert "agent envelope process limit: pids cgroup per envelope" in done.stdout, done.stdout
    assert "agent envelope memory limit: memory cgroup per envelope" in done.stdout, done.stdout
    report = json.loads(_seamline("sandbox", "check", "--json").stdout)
    assert report["envelope_process_limit"].startswith("pids cgroup per envelope")
    assert report["envelope_memory_limit"].startswith("memory cgroup per envelope")


@pytest.mark.parametrize("policy_text", ["[limits]\nwall_s = 5\n", "[limits]\nmax_processes = 0\n"])
def test_seamline_acp_refuses_a_policy_whose_limits_cannot_apply(tmp_path: Path, policy_text: str) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(policy_text)
    done = _seamline("acp", "--provider", "claude-code", "--sandbox", "bwrap", "--sandbox-policy", str(policy))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert ("wall_s" in done.stderr or "max_processes" in done.stderr) and "Traceback" not in done.stderr


def _seamline(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "seamline", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _gate() -> EgressGate:
    """A gate that is never started: :meth:`Enveloped.summary` only reads it."""
    return EgressGate(folder=Path("/nonexistent"), allow=AllowList(()))


@pytest.mark.real
def test_the_mode_from_the_options_carries_the_limits_into_a_real_envelope(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bwrap_ready: None
) -> None:
    """What every backend does (``enter_envelope(mode=sandbox_mode(options), …)``), with
    python3 as the program: bubblewrap and all inside are born in the cgroups, a fork past
    ``max_processes`` is refused and reported, and closing removes the cgroups."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    workspace = tmp_path / "ws"
    workspace.mkdir()

    async def run() -> tuple[subprocess.CompletedProcess[str], dict[str, object], list[Path]]:
        state: dict[str, object] = {}
        envelope = await enter_envelope(
            who="test",
            mode=sandbox_mode({"sandbox": "bwrap", "max_processes": "24", "memory_bytes": str(512 * 1024**2)}),
            session_id="limits-test",
            state=state,
            workspace=workspace,
            argv=["/usr/bin/python3", "-I", "-S", "-c", _SPAWN],
            env={"PATH": "/usr/bin:/bin"},
            keep_env=lambda name: False,
            endpoints=[],
            allow_hosts=None,
            seed=lambda home: None,
        )
        try:
            assert envelope.limits is not None and envelope.limits.pids is not None
            assert envelope.limits.memory is not None
            groups = [envelope.limits.pids.path, envelope.limits.memory.path]
            assert (groups[0] / "pids.max").read_text().strip() == "26"
            done = await asyncio.to_thread(
                subprocess.run,
                envelope.argv,
                env=envelope.env,
                cwd=workspace,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        finally:
            await envelope.close()
            remove_runtime_dir(state)
        return done, envelope.summary().payload, groups

    done, report, groups = asyncio.run(run())
    assert done.returncode == 0, done.stderr
    assert 0 < int(done.stdout) < 24, done.stdout
    assert isinstance(report["forks_refused"], int) and report["forks_refused"] >= 1, report
    assert report["oom_kills"] == 0 and not any(g.exists() for g in groups)


def test_the_docstring_example_runs() -> None:
    failed, attempted = doctest.testmod(envelope_limits)
    assert attempted > 0 and failed == 0
