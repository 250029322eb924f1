"""What an evaluation keeps: its plan and its finished trials, in a folder beside the store.

``evals/<id>/plan.json`` is written once, before the first trial: the tasks (as they were
when it started), the variants, the samples and the limits. ``trials.jsonl`` gets one line
per finished trial, flushed and synced as it finishes, so an interrupted evaluation (Ctrl-C,
a crash, SIGKILL) loses at most the trials that were still running; ``status.json`` says
how it ended. ``seamline eval resume ID`` runs only the trials missing from ``trials.jsonl``.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from seamline.errors import InvalidRequest, StorageFailure
from seamline.evals.dataset import Task
from seamline.locations import default_store_path

__all__ = [
    "EvalPlan",
    "EvalRecord",
    "TrialResult",
    "Variant",
    "evals_dir",
    "find_record",
    "list_records",
]

_ID: Final = re.compile(r"^[0-9a-f]{32}$")


class Variant(msgspec.Struct, frozen=True, kw_only=True):
    """One backend of an evaluation: a provider, its model and options, and its label."""

    label: str
    provider: str
    model: str | None = None
    options: dict[str, str] = msgspec.field(default_factory=dict)


class EvalPlan(msgspec.Struct, frozen=True, kw_only=True):
    """Everything an evaluation needs to run again: what ``resume`` reads."""

    id: str
    dataset: str
    tasks: tuple[Task, ...]
    variants: tuple[Variant, ...]
    samples: int
    concurrency: int = 1
    budget_usd: float | None = None
    sandbox: str | None = None
    max_steps: int = 50
    keep: bool = False
    created: float = 0.0
    rescored_from: str | None = None
    judge: Variant | None = None  # the backend judging the tasks that have a rubric
    yes: bool = False  # tools that write or execute allowed
    record: bool = False  # every trial's model exchanges kept in a cassette
    replayed_from: str | None = None

    def trial_keys(self) -> list[tuple[str, str, int]]:
        """Every trial, task by task, then variant, then sample."""
        return [(t.id, v.label, s) for t in self.tasks for v in self.variants for s in range(1, self.samples + 1)]

    @property
    def k(self) -> int:
        return self.samples


class TrialResult(msgspec.Struct, frozen=True, kw_only=True):
    """One finished trial: the verdict and what it cost. ``cost_usd`` is None when unknown."""

    task: str
    variant: str
    sample: int
    passed: bool
    outcome: str
    exit_code: int | None = None
    error: str | None = None
    cost_usd: float | None = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    elapsed_s: float = 0.0
    files: int = 0
    insertions: int = 0
    deletions: int = 0
    session_id: str = ""
    branch: str = ""
    commit: str | None = None
    base: str = ""  # the commit the trial started from
    ref: str | None = None  # a ref keeping the trial's last commit, for rescore
    check_tail: str = ""
    diff: str = ""
    judge_verdict: str | None = None  # pass, fail or unreadable; None when not judged
    judge_score: float | None = None
    judge_cost_usd: float | None = 0.0
    cassette: str | None = None  # the file, in the evaluation's cassettes/ folder

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.task, self.variant, self.sample)


def evals_dir(store_path: str | os.PathLike[str] | None = None) -> Path:
    """``evals/`` beside the store file (or the default store's, for a store on a server)."""
    if store_path is None or "://" in str(store_path):
        store_path = default_store_path()
    return Path(store_path).expanduser().parent / "evals"


class EvalRecord:
    """The folder of one evaluation."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.id = folder.name

    @classmethod
    def create(cls, root: Path, plan_fields: Mapping[str, Any]) -> tuple[EvalRecord, EvalPlan]:
        eval_id = uuid.uuid4().hex
        plan = msgspec.convert({**plan_fields, "id": eval_id, "created": time.time()}, EvalPlan)
        folder = root / eval_id
        try:
            folder.mkdir(parents=True)
            _write_atomic(folder / "plan.json", msgspec.json.encode(plan))
        except OSError as exc:
            raise StorageFailure(f"cannot keep the evaluation in {folder}: {exc.strerror or exc}") from None
        return cls(folder), plan

    @property
    def cassettes(self) -> Path:
        return self.folder / "cassettes"

    def plan(self) -> EvalPlan:
        try:
            return msgspec.json.decode((self.folder / "plan.json").read_bytes(), type=EvalPlan)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise StorageFailure(f"evaluation {self.id[:12]}: its plan cannot be read ({exc})") from None

    def trials(self) -> list[TrialResult]:
        """The finished trials; a torn last line (a crash mid-write) is left out."""
        path = self.folder / "trials.jsonl"
        try:
            lines = path.read_bytes().splitlines()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StorageFailure(f"evaluation {self.id[:12]}: cannot read its trials ({exc.strerror})") from None
        found: dict[tuple[str, str, int], TrialResult] = {}
        for number, line in enumerate(lines, 1):
            try:
                trial = msgspec.json.decode(line, type=TrialResult)
            except (msgspec.DecodeError, msgspec.ValidationError):
                if number == len(lines):
                    continue  # the line being written when the process died
                raise StorageFailure(f"evaluation {self.id[:12]}: trials.jsonl line {number} is corrupt") from None
            found[trial.key] = trial
        return list(found.values())

    def add(self, trial: TrialResult) -> None:
        path = self.folder / "trials.jsonl"
        data = msgspec.json.encode(trial) + b"\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            _ensure_line_start(fd, path)
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)

    def status(self) -> dict[str, Any]:
        try:
            data = json.loads((self.folder / "status.json").read_text())
        except (OSError, ValueError):
            return {"status": "interrupted"}
        return data if isinstance(data, dict) else {"status": "interrupted"}

    def set_status(self, status: str, **more: Any) -> None:
        _write_atomic(self.folder / "status.json", json.dumps({"status": status, "at": time.time(), **more}).encode())


def list_records(root: Path) -> list[EvalRecord]:
    """Every evaluation under ``root``, newest first."""
    if not root.is_dir():
        return []
    folders = [p for p in root.iterdir() if _ID.match(p.name) and (p / "plan.json").is_file()]
    return [EvalRecord(p) for p in sorted(folders, key=lambda p: (p / "plan.json").stat().st_mtime, reverse=True)]


def find_record(root: Path, prefix: str) -> EvalRecord:
    """The evaluation whose id starts with ``prefix`` (at least four characters)."""
    if len(prefix) < 4 or not re.fullmatch(r"[0-9a-f]+", prefix):
        raise InvalidRequest(f"not an evaluation id: {prefix!r} (give at least four of its hex characters)")
    matches = [r for r in list_records(root) if r.id.startswith(prefix)]
    if not matches:
        raise InvalidRequest(f"no evaluation {prefix!r} in {root}")
    if len(matches) > 1:
        raise InvalidRequest(f"evaluation id {prefix!r} is ambiguous: {', '.join(r.id[:12] for r in matches)}")
    return matches[0]


def missing(plan: EvalPlan, done: Sequence[TrialResult]) -> Iterator[tuple[str, str, int]]:
    finished = {t.key for t in done}
    return (key for key in plan.trial_keys() if key not in finished)


def _ensure_line_start(fd: int, path: Path) -> None:
    """After a torn write the file ends mid-line: start the next record on a line of its own."""
    size = os.fstat(fd).st_size
    if size:
        with path.open("rb") as file:
            file.seek(size - 1)
            if file.read(1) != b"\n":
                os.write(fd, b"\n")


def _write_atomic(path: Path, data: bytes) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)
