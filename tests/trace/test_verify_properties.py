"""Property tests: verify never crashes on damaged input, and never passes damaged input."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seamline.pipeline import resolve_pipeline
from seamline.trace.verify import verify_trace
from tests.pipeline.support import make_workspace, run_pipeline


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    root = tmp_path_factory.mktemp("props")
    controller, _ = run_pipeline(
        resolve_pipeline("answer-review"), "How do I add a provider?", workspace=make_workspace(root)
    )
    data = controller.writer.data()
    assert verify_trace(data).ok
    return data


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(st.binary(max_size=2000))
def test_random_bytes_are_rejected_with_reasons(data: bytes) -> None:
    verification = verify_trace(data)
    assert not verification.ok
    assert all(p.reason for p in verification.problems)


@SETTINGS
@given(cut=st.integers(min_value=0), where=st.integers(min_value=0), bit=st.integers(min_value=0, max_value=7))
def test_any_truncation_or_bit_flip_is_caught(good: bytes, cut: int, where: int, bit: int) -> None:
    truncated = good[: cut % len(good)]
    assert not verify_trace(truncated).ok
    i = where % len(good)
    flipped = good[:i] + bytes([good[i] ^ (1 << bit)]) + good[i + 1 :]
    verification = verify_trace(flipped)
    assert not verification.ok
    assert verification.problems[0].line >= 1


def test_a_trace_file_path_works_too(good: bytes, tmp_path: Path) -> None:
    file = tmp_path / "t.jsonl"
    file.write_bytes(good)
    assert verify_trace(file).ok
