"""Output publication by manifest: which deliverables a run declared, and what became of them.

A :class:`OutputManifest` declares deliverables (paths under ``/outputs``) and, for each,
the publishers (roles or tools) allowed to write it. Before a round, :meth:`baseline`
fingerprints ``/outputs``; at the end, :meth:`reconcile` classifies every declared
deliverable by content hash:

``delivered``
    a regular, non-empty file whose (size, SHA-256) is new against the baseline;
``claimed``
    named in the final text (``/outputs/<path>``) but not delivered;
``incomplete``
    neither delivered nor named: declared, and not produced this round.

Symlinks, empty files and anything under ``/outputs/scratch`` never count as delivered.
:meth:`check_publisher` refuses a publisher the manifest does not name for a path.

>>> manifest = OutputManifest.from_mapping({"report.md": ["writer"]})
>>> manifest.check_publisher("report.md", "writer")
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from seamline.errors import InvalidRequest, PermissionDenied

__all__ = ["Deliverable", "DeliverableVerdict", "OutputManifest", "Verdict"]

Verdict = Literal["delivered", "claimed", "incomplete"]
Fingerprint = tuple[int, str]


@dataclass(frozen=True, slots=True)
class Deliverable:
    """One declared output: its path under /outputs and who may publish it."""

    path: str
    publishers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeliverableVerdict:
    """What became of one deliverable; ``sha256``/``size`` when a file is there."""

    path: str
    verdict: Verdict
    sha256: str | None = None
    size: int | None = None
    reason: str = ""


class OutputManifest:
    """The declared deliverables of a run; see the module docstring."""

    def __init__(self, deliverables: Iterable[Deliverable]) -> None:
        self.deliverables: dict[str, Deliverable] = {}
        for item in deliverables:
            path = _clean(item.path)
            if path in self.deliverables:
                raise InvalidRequest(f"deliverable {path!r} is declared twice")
            if not item.publishers:
                raise InvalidRequest(f"deliverable {path!r} names no publisher")
            self.deliverables[path] = Deliverable(path=path, publishers=tuple(item.publishers))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Iterable[str]]) -> OutputManifest:
        """``{"report.md": ["writer"], ...}``: path -> publishers."""
        return cls(Deliverable(path=p, publishers=tuple(pubs)) for p, pubs in data.items())

    def check_publisher(self, path: str, publisher: str) -> None:
        """Return if ``publisher`` may write ``path``; else :class:`PermissionDenied`."""
        rel = _clean(path)
        item = self.deliverables.get(rel)
        if item is None:
            raise PermissionDenied(f"/outputs/{rel} is not a declared deliverable")
        if publisher not in item.publishers:
            raise PermissionDenied(f"{publisher!r} is not a declared publisher of /outputs/{rel}")

    def baseline(self, outputs: Path) -> dict[str, Fingerprint]:
        """Fingerprints of the declared deliverables present now."""
        found: dict[str, Fingerprint] = {}
        for rel in self.deliverables:
            fp = _fingerprint(outputs, rel)
            if fp is not None:
                found[rel] = fp
        return found

    def reconcile(
        self, outputs: Path, *, baseline: Mapping[str, Fingerprint], final_text: str = ""
    ) -> list[DeliverableVerdict]:
        """Classify every declared deliverable (see the module docstring)."""
        named = {_clean(m) for m in re.findall(r"/outputs/([\w./-]*[\w-])", final_text) if _is_clean(m)}
        verdicts: list[DeliverableVerdict] = []
        for rel in self.deliverables:
            fp = _fingerprint(outputs, rel)
            why = _refusal(outputs, rel)
            if fp is not None and why is None and baseline.get(rel) != fp:
                verdicts.append(DeliverableVerdict(rel, "delivered", sha256=fp[1], size=fp[0]))
                continue
            reason = why or ("unchanged since the baseline" if fp is not None else "missing")
            verdict: Verdict = "claimed" if rel in named else "incomplete"
            verdicts.append(
                DeliverableVerdict(
                    rel, verdict, sha256=fp[1] if fp else None, size=fp[0] if fp else None, reason=reason
                )
            )
        return verdicts


def _is_clean(path: str) -> bool:
    try:
        _clean(path)
    except InvalidRequest:
        return False
    return True


def _clean(path: str) -> str:
    rel = path.removeprefix("/outputs/") if path.startswith("/outputs/") else path
    normal = posixpath.normpath(rel)
    if posixpath.isabs(normal) or normal.startswith("..") or normal in (".", ""):
        raise InvalidRequest(f"deliverable path {path!r} must name a file under /outputs")
    return normal


def _refusal(outputs: Path, rel: str) -> str | None:
    if rel == "scratch" or rel.startswith("scratch/"):
        return "scratch is never a deliverable"
    try:
        st = (outputs / rel).lstat()
    except FileNotFoundError:
        return "missing"
    if stat.S_ISLNK(st.st_mode):
        return "a symlink is never a deliverable"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_size == 0:
        return "empty"
    real = Path(os.path.realpath(outputs / rel))
    if outputs.resolve() not in real.parents:
        return "resolves outside /outputs"
    return None


def _fingerprint(outputs: Path, rel: str) -> Fingerprint | None:
    target = outputs / rel
    try:
        st = target.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return (st.st_size, "")
    digest = hashlib.sha256()
    with target.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return (st.st_size, digest.hexdigest())
