"""Where traces go when no folder is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from seamline.sessions.sqlite_store import default_store_path
from seamline.trace.writer import TRACES_ENV, traces_dir


def test_traces_of_a_file_store_sit_beside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TRACES_ENV, raising=False)
    assert traces_dir(tmp_path / "s.db") == tmp_path / "traces"


def test_traces_of_a_postgresql_store_go_where_the_default_stores_would(monkeypatch: pytest.MonkeyPatch) -> None:
    # It was a relative folder named after the URL ("postgresql:/host/traces") in the cwd.
    monkeypatch.delenv(TRACES_ENV, raising=False)
    where = traces_dir("postgresql://seamline@127.0.0.1:5432/runs")
    assert where == default_store_path().parent / "traces"
    assert "postgresql" not in str(where)
