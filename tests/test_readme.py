"""README.md's examples run as written: its Python block gives a real answer, and every line
of the tour that can run offline exits 0 (a placeholder ID is the id the tour made before;
the fleet's scratch files under /tmp/ go to the test's own folder)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCK = re.compile(r"```(python|bash)\n(.*?)```", re.S)

# Tour lines that cannot run in a test, each with the reason; a new line that cannot run
# offline must be added here, or the test fails on it.
NOT_OFFLINE = {
    "OTEL_EXPORTER_OTLP_ENDPOINT=": "needs an OTLP collector",
    "trace export --otlp": "needs an OTLP collector",
    "temporal server start-dev": "starts a server (tests/durable runs it)",
    "seamline worker": "starts a worker (tests/durable runs it)",
    "--on temporal": "needs a Temporal server (tests/durable)",
    "--provider anthropic": "needs a key and the network",
    "--provider openai": "needs a model server",
    "--provider claude-code": "needs a key and the network",
    "seamline acp": "waits for an ACP client on stdin (tests/acp_agent)",
    "seamline serve": "serves until stopped (tests/server)",
    "--provider ...": "a placeholder for any provider",
    "seamline revert": "undoes the sandboxed run above it, which needs a provider that writes (tests/sandbox)",
    "scripts/setup": "the set-up itself",
    "scripts/test": "the test command itself",
}


# `providers check` exits 1 while some backend is not ready (no key here): documented.
EXIT_CODES = {"providers check": (0, 1)}


def _blocks(kind: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README) if lang == kind]


def test_the_python_block_answers_from_the_docs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (block,) = _blocks("python")
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("SEAMLINE_STORE", str(tmp_path / "store.db"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "README.md:python", "exec"), {"__name__": "readme"})
    printed = out.getvalue()
    assert printed.startswith("completed ")
    assert "providers.md:" in printed  # cites the page that answers, not "I read: nothing"


def _tour_lines() -> list[str]:
    lines: list[str] = []
    for block in _blocks("bash"):
        for raw in block.splitlines():
            line = raw.split("  #", 1)[0].strip()
            if line and not line.startswith("#"):
                lines.append(line)
    return lines


# The fleet's set-up lines (a scratch repository, a script file): shell, not seamline.
SHELL_LINES = ("git init ", "echo ")
PLACEHOLDERS = {"ID", "RUN_ID", "SESSION_ID", "RUN", "WINNER", "LOSER"}


def test_every_offline_tour_line_runs(tmp_path: Path) -> None:
    env = {**os.environ, "SEAMLINE_STORE": str(tmp_path / "store.db"), "NO_COLOR": "1"}
    env.pop("SEAMLINE_TRACES", None)
    env.update({f"GIT_{who}_{what}": value for who in ("AUTHOR", "COMMITTER")
                for what, value in (("NAME", "Tour"), ("EMAIL", "tour@example.com"))})  # fmt: skip
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    ran: list[str] = []
    ids: dict[str, str] = {}
    for line in _tour_lines():
        if any(marker in line for marker in NOT_OFFLINE):
            continue
        line = line.replace("/tmp/", f"{scratch}/")
        if line.startswith(SHELL_LINES):
            done = subprocess.run(["bash", "-c", line], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, f"{line}\n{done.stderr}"
            continue
        argv = shlex.split(line)
        assert argv[0] == ".venv/bin/seamline", f"a tour line that is not a seamline command: {line}"
        argv = [ids.get(arg, arg) for arg in argv]
        assert not PLACEHOLDERS & set(argv), f"no id yet for {line}"
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
        allowed = next((codes for part, codes in EXIT_CODES.items() if part in line), (0,))
        assert done.returncode in allowed, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr, line
        ran.append(line)
        ids.update(_ids_from(line, done, env))
    assert len(ran) >= 8, ran  # the tour's offline half: run, --json, providers, sessions, pipeline, trace
    fleet = [line for line in ran if " --worktree " in line or " race " in line or " discard " in line]
    assert len(fleet) == 4, ran  # the fleet ran too: a worktree run, a race, two discards
    assert (scratch / "fleet" / "notes.txt").read_text() == "hi"  # the winner was merged


def _ids_from(line: str, done: subprocess.CompletedProcess[str], env: dict[str, str]) -> dict[str, str]:
    """The ids a tour line made, for the placeholders of the lines after it."""
    ids: dict[str, str] = {}
    session = re.search(r'"session_id": ?"([0-9a-f]+)"', done.stdout)
    if session:
        ids["ID"] = ids["SESSION_ID"] = session.group(1)
    run = re.search(r"· run ([0-9a-f]+)", done.stderr)
    if run:
        ids["RUN_ID"] = run.group(1)
    if " --worktree " in line:  # the id a person reads off `sessions list` or `watch`
        listed = subprocess.run(
            [".venv/bin/seamline", "sessions", "list", "--json", "--limit", "1"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        ids["RUN"] = json.loads(listed.stdout.splitlines()[0])["id"]
    winner = re.search(r"merge it with: seamline merge ([0-9a-f]+)", done.stderr)
    left = re.search(r"left for seamline diff\|merge\|discard: ([0-9a-f ]+)", done.stderr)
    if winner and left:
        ids["WINNER"] = winner.group(1)
        (ids["LOSER"],) = [r for r in left.group(1).split() if r != winner.group(1)]
    return ids


def _extras() -> set[str]:
    import tomllib

    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def test_the_readme_says_once_which_setup_installs_which_extras() -> None:
    (para,) = [p for p in README.split("\n\n") if p.startswith("**Extras.**")]
    (dev,) = [s for s in re.split(r"(?<=\.) ", " ".join(para.split())) if "`bash scripts/setup --dev`" in s]
    # The --dev sentence names every extra of pyproject.toml, and only those...
    assert set(re.findall(r"`([\w-]+)`", dev)) == _extras(), dev
    # ...which is what `scripts/setup --dev` installs.
    (target,) = re.findall(r"target='\.\[([\w,-]+)\]'", (ROOT / "scripts" / "setup").read_text())
    assert set(target.split(",")) == _extras()
    # One form of hint, the one seamline itself prints from a clone, naming a real extra.
    hints = re.findall(r"pip install[^`]*", README)
    assert hints and all(re.fullmatch(r"pip install -e '\.\[[\w-]+\]'", h) for h in hints), hints
    assert {re.findall(r"\[([\w-]+)\]", h)[0] for h in hints} <= _extras()
    assert "pip install 'seamline[" not in README


def _code_strings(path: Path) -> list[str]:
    """The string constants of a module, docstrings left out (they are not hints anyone sees)."""
    import ast

    tree = ast.parse(path.read_text())
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
    ]


def test_every_install_hint_in_the_code_is_install_hint_of_a_real_extra() -> None:
    written_out = []
    named = set()
    for path in sorted((ROOT / "src" / "seamline").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel == "src/seamline/extras.py":
            continue
        written_out += [f"{rel}: {s}" for s in _code_strings(path) if re.search(r"pip install .*seamline\[", s)]
        named |= set(re.findall(r"install_hint\(['\"]([\w-]+)['\"]\)", path.read_text()))
    # Every hint goes through seamline.extras.install_hint, which says what works here.
    assert written_out == []
    assert named and named <= _extras(), named - _extras()
