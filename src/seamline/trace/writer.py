"""Writing a trace: one JSON Lines file per run, appended and made durable in batches.

Traces live in a ``traces/`` folder beside the session store file
(``<store dir>/traces/<run_id>.jsonl``), or wherever ``SEAMLINE_TRACES`` points. Records
are buffered in memory and written with ``flush`` + ``fsync`` at each batch boundary the
controller chooses (every role's end, every transition, the run's end), so a finished
step is on disk and a crash loses at most the step in flight.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, overload

from seamline.errors import InvalidRequest
from seamline.locations import default_store_path
from seamline.trace.fingerprint import Fingerprint
from seamline.trace.records import GENESIS, canonical, chain_hash, encode_body, encode_line
from seamline.trace.schema import EventData, EventObserved, RecordData, RunObserved

__all__ = ["TRACES_ENV", "TraceWriter", "trace_path", "traces_dir"]

TRACES_ENV: Final = "SEAMLINE_TRACES"
_RUN_ID: Final = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_EMPTY: Final = b"{}"


def traces_dir(store_path: str | os.PathLike[str] | None = None) -> Path:
    """``$SEAMLINE_TRACES``, else ``traces/`` beside the store file (or the default store's
    file, for a store on a server)."""
    env = os.environ.get(TRACES_ENV)
    if env:
        return Path(env).expanduser()
    if store_path is None or "://" in str(store_path):
        # A server store (postgresql://...) has no folder: its traces go where the default
        # store's would, never into a folder named after the URL.
        store_path = default_store_path()
    return Path(store_path).expanduser().parent / "traces"


def trace_path(run_id: str, *, store_path: str | os.PathLike[str] | None = None) -> Path:
    """Where the trace of ``run_id`` lives; refuses ids that are not plain names."""
    if not _RUN_ID.match(run_id):
        raise InvalidRequest(f"not a run id: {run_id!r}")
    return traces_dir(store_path) / f"{run_id}.jsonl"


class TraceWriter:
    """Appends chained records to one trace file (or keeps them in memory when ``path`` is None).

    A record is its typed ``d`` part (whose class names the kind) and its ``o`` part:

    >>> from seamline.trace.schema import RunObserved, RunStartData
    >>> w = TraceWriter(None)
    >>> w.append(RunStartData(pipeline="single", first_phase="answer"), RunObserved(run_id="r1"))
    0
    >>> w.lines[0][76:-2]  # the body, between the chained hash and the line's end
    b'{"seq":0,"kind":"run_start","at":...,"d":{"first_phase":"answer","pipeline":"single"},"o":{"run_id":"r1"}}'
    >>> len(w.head_hash)
    64
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        *,
        durable: bool = True,
        on_flush: Callable[[str, int], None] | None = None,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.durable = durable
        # Hears (head hash, records) once they are on disk: the store keeps the head, so
        # a trace rewritten whole no longer verifies (see seamline.sessions.trace_heads).
        self.on_flush = on_flush
        self.seq = 0
        self.head_hash = GENESIS
        self.fingerprint = Fingerprint()
        self._buffer: list[bytes] = []
        self.lines: list[bytes] | None = [] if path is None else None
        self._file = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # "x": a run id is used once; an existing trace is never appended to by mistake.
            try:
                self._file = open(self.path, "xb")
            except FileExistsError:
                raise InvalidRequest(f"trace {self.path} already exists") from None

    @overload
    def append(self, d: EventData, o: EventObserved | None = None, *, at: float | None = None) -> int: ...
    @overload
    def append(self, d: RecordData, o: RunObserved | None = None, *, at: float | None = None) -> int: ...
    def append(self, d: RecordData, o: RunObserved | EventObserved | None = None, *, at: float | None = None) -> int:
        """Add one record; returns its ``seq``. Nothing is on disk until :meth:`flush`."""
        kind = d.kind
        d_bytes = canonical(d)
        body = encode_body(
            self.seq, kind, time.time() if at is None else at, d_bytes, canonical(o) if o is not None else _EMPTY
        )
        self.head_hash = chain_hash(self.head_hash, body)
        line = encode_line(self.head_hash, body)
        if self.lines is not None:
            self.lines.append(line)
        else:
            self._buffer.append(line)
        self.fingerprint.add(kind, d_bytes)
        seq = self.seq
        self.seq += 1
        return seq

    def flush(self) -> None:
        """Write the buffered records and, when durable, ``fsync`` them."""
        if self._file is None or not self._buffer:
            return
        self._file.write(b"".join(self._buffer))
        self._buffer.clear()
        self._file.flush()
        if self.durable:
            os.fsync(self._file.fileno())
        if self.on_flush is not None:
            self.on_flush(self.head_hash, self.seq)

    def data(self) -> bytes:
        """The whole trace as bytes (memory mode), for verify and replay."""
        if self.lines is not None:
            return b"".join(self.lines)
        assert self.path is not None
        self.flush()
        return self.path.read_bytes()

    def close(self) -> None:
        if self._file is not None:
            try:
                self.flush()
            finally:
                self._file.close()
                self._file = None
