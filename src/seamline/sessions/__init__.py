"""Session records and stores: SQLite by default, with an append-only raw log."""

from seamline.sessions.store import RawRow, SessionRecord, SessionStore, default_store_path

__all__ = ["RawRow", "SessionRecord", "SessionStore", "default_store_path"]
