"""Sandbox policies: parsing, validation, the environment a command gets."""

from __future__ import annotations

from pathlib import Path

import pytest

from seamline.errors import InvalidRequest
from seamline.sandbox.policy import ResourceLimits, SandboxPolicy, is_secret_name, load_policy


def test_policy_file_in_toml(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    file = tmp_path / "policy.toml"
    file.write_text('inputs = "in"\nnetwork = true\nenv_allow = ["TZ"]\n[limits]\nwall_s = 3\nmax_processes = 9\n')
    policy = load_policy(file)
    assert policy.inputs == tmp_path / "in" and policy.network
    assert policy.limits == ResourceLimits(wall_s=3.0, max_processes=9)


@pytest.mark.parametrize(
    "data",
    [
        {"nope": 1},
        {"network": "yes"},
        {"limits": {"wall_s": 0}},
        {"limits": {"max_procs": 3}},
        {"env_allow": ["ANTHROPIC_API_KEY"]},
        {"env_allow": ["BAD NAME"]},
        {"env_set": {"MY_TOKEN": "x"}},
        {"inputs": "missing-folder"},
    ],
)
def test_bad_policies_are_invalid_requests(data: dict[str, object], tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest):
        SandboxPolicy.from_mapping(data, base=tmp_path)


def test_unreadable_or_broken_policy_files(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="cannot read"):
        load_policy(tmp_path / "none.toml")
    (tmp_path / "p.json").write_text("{")
    with pytest.raises(InvalidRequest, match="does not parse"):
        load_policy(tmp_path / "p.json")


def test_environment_is_an_allowlist() -> None:
    parent = {"TZ": "UTC", "HOME": "/root", "ANTHROPIC_API_KEY": "k", "AWS_SECRET_ACCESS_KEY": "s", "EDITOR": "vi"}
    env = SandboxPolicy(env_allow=("TZ", "EDITOR"), env_set={"MODE": "test"}).environment(parent)
    assert env["TZ"] == "UTC" and env["EDITOR"] == "vi" and env["MODE"] == "test"
    assert env["HOME"] == "/tmp" and env["WORKSPACE"] == "/workspace"
    assert not any(is_secret_name(name) for name in env)
    assert "ANTHROPIC_API_KEY" not in env and "AWS_SECRET_ACCESS_KEY" not in env


@pytest.mark.parametrize("name", ["ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "GITHUB_TOKEN", "DB_PASSWORD", "AWS_REGION"])
def test_credential_names(name: str) -> None:
    assert is_secret_name(name)
