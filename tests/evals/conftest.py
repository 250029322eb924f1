from __future__ import annotations

from pathlib import Path

import pytest

from tests.evals.lab import make_lab


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    return make_lab(tmp_path)
