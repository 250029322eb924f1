"""In CI (``CI=true``) a test skipped for want of what the set-up installs fails; a skip for
a fact of the machine (its reason begins "not on this machine:") stays a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SUITE = """
import pytest

def test_needs_a_program():
    pytest.skip("chromium missing: bash scripts/system/60-chromium.sh")

@pytest.mark.skipif(True, reason="git is not installed")
def test_marked():
    pass

def test_machine_fact():
    pytest.skip("not on this machine: no /dev/full")

def test_runs():
    assert True
"""

MODULE_SKIPPED = """
import pytest
pytest.importorskip("no_such_module_anywhere")

def test_never():
    pass
"""


def run_suite(tmp_path: Path, ci: str | None, suite: str = SUITE) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_make_collect_report, pytest_runtest_makereport\n"
    )
    (tmp_path / "test_suite.py").write_text(suite)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{ROOT / 'src'}"
    if ci is not None:
        env["CI"] = ci
    command = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "no:xdist", str(tmp_path)]
    return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("ci", ["true", "1"])
def test_in_ci_a_skip_for_a_missing_program_fails(tmp_path: Path, ci: str) -> None:
    done = run_suite(tmp_path, ci)
    out = done.stdout
    assert done.returncode == 1, out
    assert "FAILED test_suite.py::test_needs_a_program" in out
    assert "ERROR test_suite.py::test_marked" in out  # a skip mark acts at set-up
    assert "SKIPPED" in out and "not on this machine: no /dev/full" in out
    assert "PASSED test_suite.py::test_runs" in out
    assert "skipped in CI (CI=true)" in out


def test_in_ci_a_module_skipped_for_a_missing_package_is_an_error(tmp_path: Path) -> None:
    done = run_suite(tmp_path, "true", MODULE_SKIPPED)
    assert done.returncode != 0, done.stdout
    assert "ERROR test_suite.py" in done.stdout and "no_such_module_anywhere" in done.stdout


@pytest.mark.parametrize("suite", [SUITE, MODULE_SKIPPED])
def test_outside_ci_the_same_skips_stay_skips(tmp_path: Path, suite: str) -> None:
    done = run_suite(tmp_path, None, suite)
    out = done.stdout
    assert done.returncode == (0 if suite is SUITE else 5), out  # 5: the module left no test
    assert "FAILED" not in out and "ERROR" not in out
    assert out.count("SKIPPED") == (3 if suite is SUITE else 1), out
