"""The trace records a role's output and failure, a convergence decision and usage in
typed parts of its own (seamline.trace.schema: the trace ranks below the pipeline); they
hold the same fields as the pipeline's structs, so nothing is dropped on the way."""

from __future__ import annotations

import typing

import msgspec

from seamline.pipeline import convergence
from seamline.pipeline.convergence import ConvergenceDecision
from seamline.pipeline.roles import RoleFailure, RoleOutput
from seamline.trace import schema
from seamline.trace.schema import RecordedDecision, RecordedFailure, RecordedOutput, RecordedUsage
from seamline.usage import UsageTotals


def names(struct: type[msgspec.Struct]) -> set[str]:
    return {f.encode_name for f in msgspec.structs.fields(struct)}


def test_the_recorded_parts_hold_the_pipelines_fields() -> None:
    assert names(RecordedOutput) == names(RoleOutput)
    assert names(RecordedFailure) == names(RoleFailure)
    assert names(RecordedDecision) == names(ConvergenceDecision)
    assert typing.get_args(schema.DecisionStatus) == typing.get_args(convergence.DecisionStatus)


def test_recorded_usage_is_usage_totals_data_in_its_order() -> None:
    totals = UsageTotals()
    assert [f.encode_name for f in msgspec.structs.fields(RecordedUsage)] == list(totals.data())
    assert msgspec.to_builtins(RecordedUsage.of(totals)) == totals.data()
