"""Output publication by manifest, and sub-agent workspaces that share inputs and outputs."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from seamline.errors import InvalidRequest, PermissionDenied
from seamline.sandbox import Sandbox
from seamline.sandbox.publish import OutputManifest


def test_deliverables_are_classified_by_content_hash(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "scratch").mkdir(parents=True)
    manifest = OutputManifest.from_mapping(
        {"report.md": ["writer"], "data/table.csv": ["analyst"], "summary.txt": ["writer"], "same.txt": ["w"],
         "empty.txt": ["w"], "scratch/tmp.txt": ["w"], "link.txt": ["w"]}
    )  # fmt: skip
    (out / "same.txt").write_text("unchanged")
    base = manifest.baseline(out)
    (out / "report.md").write_text("# Report\n")
    (out / "empty.txt").write_text("")
    (out / "scratch" / "tmp.txt").write_text("work in progress")
    (out / "link.txt").symlink_to(out / "report.md")
    verdicts = {
        v.path: v
        for v in manifest.reconcile(out, baseline=base, final_text="See /outputs/summary.txt and /outputs/same.txt.")
    }
    assert verdicts["report.md"].verdict == "delivered"
    assert verdicts["report.md"].sha256 == hashlib.sha256(b"# Report\n").hexdigest()
    assert verdicts["summary.txt"].verdict == "claimed" and verdicts["summary.txt"].reason == "missing"
    assert verdicts["same.txt"].verdict == "claimed" and "unchanged" in verdicts["same.txt"].reason
    assert verdicts["data/table.csv"].verdict == "incomplete"
    assert verdicts["empty.txt"].verdict == "incomplete" and verdicts["empty.txt"].reason == "empty"
    assert verdicts["scratch/tmp.txt"].verdict == "incomplete"
    assert verdicts["link.txt"].verdict == "incomplete" and "symlink" in verdicts["link.txt"].reason


def test_only_declared_publishers_may_write() -> None:
    manifest = OutputManifest.from_mapping({"/outputs/report.md": ["writer"]})
    manifest.check_publisher("report.md", "writer")
    with pytest.raises(PermissionDenied, match="not a declared publisher"):
        manifest.check_publisher("/outputs/report.md", "reviewer")
    with pytest.raises(PermissionDenied, match="not a declared deliverable"):
        manifest.check_publisher("other.md", "writer")
    with pytest.raises(InvalidRequest):
        OutputManifest.from_mapping({"../escape.md": ["writer"]})
    with pytest.raises(InvalidRequest):
        OutputManifest.from_mapping({"a.md": []})


@pytest.mark.real
def test_sub_agents_get_scoped_workspaces_sharing_inputs_and_outputs(
    make_sandbox: Callable[..., Sandbox], host: dict[str, Path]
) -> None:
    parent = make_sandbox()
    child = parent.scoped("researcher")
    out = asyncio.run(child.run_shell("ls /workspace; cat /inputs/data.csv; echo from-child > /outputs/child.txt; "
                                      "echo mine > notes.txt"))  # fmt: skip
    assert "hello.txt" not in out and "1,2" in out  # the parent's files are not in the child's workspace
    assert (host["outputs"] / "child.txt").read_text() == "from-child\n"
    assert (host["ws"] / ".seamline" / "agents" / "researcher" / "notes.txt").read_text() == "mine\n"
    with pytest.raises(InvalidRequest):
        parent.scoped("../up")
