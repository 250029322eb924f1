"""The SQLite store's usage journal: each usage figure on disk with one ``write()`` before
its caller sees it, and a new session's record and each turn's end before theirs, so the
store can commit lazily, once for many runs, instead of once per figure.

Every process that writes a store file ``S`` appends to its own journal
``S.usage/<pid>-<token>.journal`` (``O_APPEND``, held under ``flock`` while the process
lives). The first line is a header naming the format; then one line per record (see
:data:`JOURNAL_FORMAT`). Each write has a unique id (``<token>.<k>``), a figure's its own;
the ledger keeps a figure's id (``usage_ledger.journal_id``, a unique index), so a figure
reaches the ledger once, whoever writes it: the owner's commit, or a replay.

- **Replay** (``SQLiteStore.replay_journals``, when a store is opened): each journal whose
  owner is gone (its ``flock`` can be taken) is read and what is not in the store yet is
  written, in one transaction; then the file is removed. A replay killed halfway leaves
  either nothing or everything committed, and the file; the next one skips what is there.
- **Readers** (:func:`journal_tail`) read every journal *before* the ledger (in one read
  snapshot) and add the figures whose id is not in it: a figure is in the journal until
  it is committed, and the journal is removed only after the commit.
- A last line without its newline is a write cut short by the crash: ignored, never
  reported. Any other line that cannot be read, or a journal of another format, is a
  :class:`~seamline.errors.StorageFailure` that names the file: never a silent miscount.

A page-cache write survives SIGKILL, not a power cut (as the store's ``synchronous =
NORMAL`` commits): the journal keeps the store's promise, "a crash keeps what was spent".
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import secrets
import socket
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import msgspec

from seamline.errors import StorageFailure

__all__ = [
    "JOURNAL_FORMAT",
    "JournalRecord",
    "UsageJournal",
    "journal_dir",
    "journal_tail",
    "read_journal",
    "unreplayed_journals",
]

JOURNAL_FORMAT: Final = 2
"""The journal's format. Header ``{"seamline_usage_journal": 2, ...}``, then one record per
line: a usage figure ``["u", id, session_id, n, turn, input, output, cache_read,
cache_write, cost_usd, priced, model, created_at]``; a raw-log row written with it, as its
ledger row ``[session_id, seq, turn, direction, source, payload, created_at]``; a new
session ``["s", id, provider, model, parent_id, workspace, mode, metadata, created_at,
updated_at, owner_pid, owner_host, run_options, skey]`` (``skey``, its storage key, since
schema 8; a record without it gets one made from its id and time); a turn's end ``["e", session_id,
status, updated_at]``. Format 1 (figures and raw rows only) is read too."""
_READABLE: Final = (1, 2)
_SUFFIX: Final = ".journal"
_TOKEN_LEN: Final = 16
# A new file past this; the old one goes once committed. As large as the uncommitted
# journal may grow (store.JOURNAL_BYTES): making a file costs a few hundred µs of system
# time, so at 64 KB files were made several times a lazy commit.
_ROTATE_BYTES: Final = 1 << 18
_USAGE_FIELDS: Final = 13
_RAW_FIELDS: Final = 7
_SESSION_FIELDS: Final = (13, 14)  # without and with the session's storage key (schema 8)
_END_FIELDS: Final = 4
_encode_lines = msgspec.json.Encoder().encode_lines


@dataclass(frozen=True, slots=True)
class JournalRecord:
    """One usage figure as journaled; ``row`` is its ledger row (journal id last);
    ``journaled_session``: the session's own record is in a journal too (it may not be in
    the store yet)."""

    journal_id: str
    session_id: str
    n: int
    row: tuple[Any, ...]
    journaled_session: bool = False


def journal_dir(store_path: str) -> Path:
    """The folder of the journals of the store file ``store_path``."""
    return Path(store_path + ".usage")


class _File:
    __slots__ = ("appended", "committed", "fd", "header", "path", "size", "token")

    def __init__(self, folder: Path) -> None:
        self.token = secrets.token_hex(_TOKEN_LEN // 2)
        self.path = folder / f"{os.getpid()}-{self.token}{_SUFFIX}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        try:
            folder.mkdir(exist_ok=True)
            self.fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            raise StorageFailure(f"cannot write the usage journal {self.path}: {exc.strerror}") from None
        fcntl.flock(self.fd, fcntl.LOCK_EX)  # held while this process lives: nobody replays it
        header = {"seamline_usage_journal": JOURNAL_FORMAT, "pid": os.getpid(), "host": socket.gethostname()}
        data = json.dumps(header).encode() + b"\n"
        os.write(self.fd, data)
        self.size = self.header = len(data)
        self.appended = 0
        self.committed = 0


class UsageJournal:
    """This process's journal of one store file. :meth:`append` is called on the event
    loop's thread; :meth:`committed` from whichever thread committed the figures."""

    def __init__(self, store_path: str) -> None:
        self.folder = journal_dir(store_path)
        self._current: _File | None = None
        self._files: dict[str, _File] = {}
        self._lock = threading.Lock()
        self._k = 0
        self._pending = 0  # bytes appended to the files in _files (headers aside)

    def append(
        self,
        row: tuple[Any, ...] | None,
        raw: Sequence[tuple[Any, ...]] = (),
        records: Sequence[tuple[Any, ...]] = (),
    ) -> str:
        """One ``write()``: the raw-log rows queued before it, then the session records
        (``("s", ...)`` a new session, ``("e", ...)`` a turn's end), then the usage figure
        ``row`` (a ledger row without its journal id) when there is one. Its id: the
        figure's id, and what :meth:`committed` is told once all of it is in the store."""
        with self._lock:  # a commit on the writer thread may remove the current file
            current = self._current
            if current is None or current.size > _ROTATE_BYTES:
                current = self._rotate()
            self._k += 1
            journal_id = f"{current.token}.{self._k}"
            lines: list[Any] = [*raw, *records]
            if row is not None:
                lines.append(("u", journal_id, *row))
            data = _encode_lines(lines)
            try:
                written = os.write(current.fd, data)
            except OSError as exc:
                raise StorageFailure(f"cannot write the usage journal {current.path}: {exc.strerror}") from None
            if written != len(data):
                raise StorageFailure(f"cannot write the usage journal {current.path}: short write")
            current.size += written
            current.appended += 1
            self._pending += written
        return journal_id

    def _rotate(self) -> _File:
        """A new current file (the lock is held); the old one goes if all its figures are in."""
        fresh = _File(self.folder)
        self._files[fresh.token] = fresh
        old, self._current = self._current, fresh
        if old is not None and old.committed >= old.appended:
            self._drop(old)
        return fresh

    def committed(self, journal_ids: Iterable[str | None]) -> None:
        """What these writes hold is in the store now; a file all of whose writes are is
        removed (the one being appended to too: the next write starts another)."""
        counts: dict[str, int] = {}
        for journal_id in journal_ids:
            if journal_id is not None:
                token = journal_id[:_TOKEN_LEN]
                counts[token] = counts.get(token, 0) + 1
        if not counts:
            return
        with self._lock:
            for token, count in counts.items():
                file = self._files.get(token)
                if file is None:
                    continue
                file.committed += count
                if file.committed < file.appended:
                    continue
                # All in the store: readers need not read it again (a journaled session
                # whose record is in no journal is read from the store). Removed, not
                # emptied: a reader that has it open reads it whole, never old and new
                # bytes mixed; the next write starts a new file.
                self._drop(file)
                if file is self._current:
                    self._current = None

    def pending_bytes(self) -> int:
        """Bytes written to files not yet removed, whose writes are not all in the store
        (what readers read); kept as they are written: asked at every usage figure."""
        return self._pending

    def drained(self) -> bool:
        with self._lock:
            return all(f.committed >= f.appended for f in self._files.values())

    def close(self) -> None:
        """Remove the files whose figures are all in the ledger; leave the others (and
        release them) for the next replay."""
        with self._lock:
            for file in list(self._files.values()):
                if file.committed >= file.appended:
                    self._drop(file)
                else:
                    self._files.pop(file.token, None)
                    self._pending -= file.size - file.header
                    os.close(file.fd)
            self._current = None

    def _drop(self, file: _File) -> None:
        self._files.pop(file.token, None)
        self._pending -= file.size - file.header
        with contextlib.suppress(FileNotFoundError):
            file.path.unlink()  # before the lock goes: a replayer never finds it half-owned
        os.close(file.fd)


def read_journal(
    path: Path, raw: list[tuple[Any, ...]] | None = None, sessions: list[tuple[Any, ...]] | None = None
) -> list[JournalRecord]:
    """The figures of one journal (its raw-log rows into ``raw``, its session records, new
    sessions and turns' ends, into ``sessions``, when given). A last line cut short by a
    crash is left out; a journal of another format, or any other line that cannot be read,
    is a :class:`StorageFailure`."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []  # replayed and removed meanwhile: its figures are in the ledger
    except OSError as exc:
        raise StorageFailure(f"cannot read the usage journal {path}: {exc.strerror}") from None
    end = data.rfind(b"\n")
    if end < 0:
        return []  # not even a whole header: the process died creating it
    lines = data[:end].split(b"\n")
    try:
        header = json.loads(lines[0])
        version = header.get("seamline_usage_journal") if isinstance(header, dict) else None
    except ValueError:
        version = None
    if version not in _READABLE:
        raise StorageFailure(
            f"the usage journal {path} is not of format {JOURNAL_FORMAT} (found {version!r}); this seamline cannot"
            " count its figures. Replay it with the seamline that wrote it (open the store with it), or move the"
            " file away to leave those figures out of the ledger"
        )
    records: list[JournalRecord] = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            fields = json.loads(line)
            if not isinstance(fields, list) or not fields:
                raise ValueError("not a record")
            size, tag = len(fields), fields[0]
            if size == _RAW_FIELDS and isinstance(tag, str):
                if raw is not None:
                    raw.append(tuple(fields))
                continue
            if (
                version > 1
                and isinstance(fields[1], str)
                and ((tag == "s" and size in _SESSION_FIELDS) or (tag == "e" and size == _END_FIELDS))
            ):
                if sessions is not None:
                    sessions.append(tuple(fields))
                continue
            if tag != "u" or size != _USAGE_FIELDS or not isinstance(fields[1], str):
                raise ValueError("not a usage record")
            records.append(JournalRecord(fields[1], str(fields[2]), int(fields[3]), (*fields[2:], fields[1])))
        except (ValueError, TypeError) as exc:
            raise StorageFailure(f"the usage journal {path} is damaged at line {number}: {exc}") from None
    return records


def _journals(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.name.endswith(_SUFFIX))
    except (FileNotFoundError, NotADirectoryError):
        return []


def journal_tail(store_path: str, session_ids: Iterable[str]) -> list[JournalRecord]:
    """Every journaled figure of these sessions, committed or not (the caller drops those
    already in the ledger, reading the ledger *after* this)."""
    folder = journal_dir(store_path)
    paths = _journals(folder)
    if not paths:
        return []
    wanted = set(session_ids)
    found: list[JournalRecord] = []
    sessions: list[tuple[Any, ...]] = []
    for path in paths:
        found.extend(r for r in read_journal(path, None, sessions) if r.session_id in wanted)
    new = {line[1] for line in sessions if line[0] == "s"}
    return [dataclasses.replace(r, journaled_session=True) if r.session_id in new else r for r in found]


@contextlib.contextmanager
def _claimed(path: Path) -> Iterator[int | None]:
    """The journal's descriptor under ``flock`` when its owner is gone, else ``None``."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        yield None
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None  # alive, or being replayed by another process
            return
        if os.fstat(fd).st_nlink == 0:
            yield None  # replayed and removed between our open and our lock
            return
        yield fd
    finally:
        os.close(fd)


Replayable = tuple[Path, list[JournalRecord], list[tuple[Any, ...]], list[tuple[Any, ...]]]


@contextlib.contextmanager
def unreplayed_journals(store_path: str) -> Iterator[list[Replayable]]:
    """The journals of dead owners, each with its figures, raw rows and session records,
    claimed (``flock``) for the block; each one is removed at its end: the caller has
    committed what they hold."""
    folder = journal_dir(store_path)
    with contextlib.ExitStack() as stack:
        found: list[Replayable] = []
        for path in _journals(folder):
            # flock is per open file: this process's own live journals refuse it too
            fd = stack.enter_context(_claimed(path))
            if fd is not None:
                raw: list[tuple[Any, ...]] = []
                sessions: list[tuple[Any, ...]] = []
                found.append((path, read_journal(path, raw, sessions), raw, sessions))
        yield found
        for path, *_ in found:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
