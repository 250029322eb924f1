"""Every face builds the same :class:`~seamline.runner.RunOptions`: ``seamline run``,
``seamline acp`` and a durable run's spec read their shared flags through one function,
the durable spec carries the options to a worker and back, and the server's plan is one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from seamline.cli.main import full_parser
from seamline.cli.run_flags import flag_options
from seamline.definitions import definition_from_data
from seamline.durable.steps import RunSpec
from seamline.errors import InvalidRequest
from seamline.pipeline.builtin import resolve_pipeline
from seamline.runner import RunOptions
from seamline.server.agents_file import ServePolicy
from seamline.testing import scripted

SHARED = ["--provider", "scripted", "-o", "script=s.yaml", "--model", "m1", "--yes", "--max-steps", "7"]
SHARED += ["--budget-usd", "0.5"]
TRAVELS = ("provider", "model", "options", "yes", "max_steps", "budget_usd")


def _flags(*argv: str) -> RunOptions:
    return flag_options(full_parser().parse_args(list(argv)))


def test_run_and_acp_read_their_shared_flags_into_the_same_options() -> None:
    ran = _flags("run", *SHARED, "--allow", "read_file", "hello")
    served = _flags("acp", *SHARED)
    for name in TRAVELS:
        assert getattr(ran, name) == getattr(served, name), name
    assert (ran.provider, ran.model, ran.options) == ("scripted", "m1", {"script": "s.yaml"})
    assert (ran.yes, ran.max_steps, ran.budget_usd, ran.allow) == (True, 7, 0.5, ["read_file"])
    assert served.workspace == "."  # each ACP session names its own folder


def test_sandbox_implies_yes_and_is_kept_for_resume(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("")
    got = _flags("run", "--sandbox", "bwrap", "--sandbox-policy", str(policy), "hi")
    assert got.yes is True
    assert got.stored == {"sandbox": "bwrap", "sandbox_policy": str(policy.resolve())}


def test_a_durable_spec_carries_the_options_to_a_worker_and_back(tmp_path: Path) -> None:
    given = RunOptions(
        provider="offline",
        model=None,
        options={},
        workspace=tmp_path,
        yes=True,
        max_steps=9,
        budget_usd=1.25,
        allow=["read_file"],
    )
    spec = RunSpec.of(given, run_id="r1", definition=resolve_pipeline("single"), task="t", store="/s.db")
    back = spec.run_options()
    for name in (*TRAVELS, "allow"):
        assert getattr(back, name) == getattr(given, name), name
    assert back.workspace == str(tmp_path.resolve())
    assert definition_from_data(spec.definition, origin="t").name == "single"


def test_a_durable_spec_refuses_what_cannot_leave_the_process(tmp_path: Path) -> None:
    single = resolve_pipeline("single")
    with pytest.raises(InvalidRequest, match="names its provider"):
        RunSpec.of(RunOptions(provider=scripted([{"text": "hi"}])), run_id="r", definition=single, task="t", store="/s")
    with pytest.raises(InvalidRequest, match="on_open cannot travel"):
        RunSpec.of(RunOptions(on_open=print), run_id="r", definition=single, task="t", store="/s")


def test_the_servers_plan_is_run_options(tmp_path: Path) -> None:
    plan = ServePolicy(tmp_path).plan(
        provider="offline", model=None, options={}, workspace=None, yes=False, agent=None, budget_usd=0.25
    )
    given = plan.run_options(max_steps=4)
    assert isinstance(given, RunOptions)
    assert dataclasses.asdict(given) == dataclasses.asdict(
        RunOptions(provider="offline", options={}, workspace=tmp_path.resolve(), max_steps=4, budget_usd=0.25)
    )
