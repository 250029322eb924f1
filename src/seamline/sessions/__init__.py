"""Session records and stores: SQLite by default (PostgreSQL for teams), with an
append-only raw log, a cost ledger and a canonical transcript derived from the log."""

from seamline.sessions.records import FileTouch, RawRow, SessionRecord, Totals, TranscriptEntry, UsageRow
from seamline.sessions.store import SessionStore, SQLiteStore, default_store_path, open_store

__all__ = [
    "FileTouch",
    "RawRow",
    "SessionRecord",
    "SQLiteStore",
    "SessionStore",
    "Totals",
    "TranscriptEntry",
    "UsageRow",
    "default_store_path",
    "open_store",
]
