"""Shared fixtures. Every test runs with real provider calls blocked and its own store."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from hypothesis import HealthCheck, settings

# The suite is the same on every run: each property test draws its examples from a seed fixed
# for that test, so a failure is never a matter of luck and always shows the same example, and
# no check depends on how busy the machine is. To look for new failing examples, run
# `pytest --hypothesis-profile explore`, and pin what it finds with @example.
settings.register_profile(
    "repeatable", derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("explore", deadline=None, max_examples=500)
settings.load_profile("repeatable")

ROOT = Path(__file__).resolve().parents[1]

# A suite started in the background of a script (`bash scripts/test &`) inherits SIGINT
# ignored, and so would every program a test starts: the tests that end a child with Ctrl-C
# (`watch`, `run --on temporal`) would wait on a child that cannot hear it. Each process of
# the suite (the xdist workers too) takes the default back; the transport tests that ignore
# SIGINT on purpose set it themselves (tests/transport/conftest.py).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


MACHINE_FACT: Final = "not on this machine:"
"""How a skip reason begins when the machine itself lacks what the test needs (a memory
cgroup, ``/dev/full``, an unprivileged user), which no set-up script can install."""


def strict_skips() -> bool:
    """Whether a skip fails the test: in CI (``CI=true``), where everything the set-up
    installs must be there, a test skipped for want of it would leave its check undone."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not (report.skipped and strict_skips()) or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if reason.removeprefix("Skipped: ").startswith(MACHINE_FACT):
        return
    report.outcome = "failed"
    report.longrepr = _strict_refusal(reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    # A module skipped as a whole (``importorskip``, ``allow_module_level``) is skipped here.
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()
    if not (report.skipped and strict_skips()):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if reason.removeprefix("Skipped: ").startswith(MACHINE_FACT):
        return
    report.outcome = "failed"
    report.longrepr = _strict_refusal(reason)


def _strict_refusal(reason: str) -> str:
    return (
        f"skipped in CI (CI=true), where the set-up installs everything the tests need: {reason}; "
        f"a skip for what no set-up can give begins with {MACHINE_FACT!r}"
    )


@pytest.fixture(autouse=True)
def _isolated_environment(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No test reaches a real backend or the user's own store."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("SEAMLINE_BLOCK_REAL_PROVIDERS", "1")
    monkeypatch.setenv("SEAMLINE_STORE", str(home / "store.db"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    yield


@pytest.fixture
def seamline_cmd() -> list[str]:
    """The command line that runs this checkout's CLI."""
    return [sys.executable, "-m", "seamline"]


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["SEAMLINE_STORE"] = str(tmp_path / "cli-store.db")
    env["SEAMLINE_BLOCK_REAL_PROVIDERS"] = "1"
    env["PYTHONPATH"] = str(ROOT / "src")
    return env
