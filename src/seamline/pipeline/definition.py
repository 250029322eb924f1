"""Pipeline definitions, by the name the pipeline room has always given them.

The model itself lives in :mod:`seamline.definitions`, below both the controller that runs
a definition and the trace that records and verifies it, so neither room imports the other
to read one.
"""

from seamline.definitions import (
    ABORT_PHASE,
    ConvergenceSpec,
    PhaseSpec,
    PipelineDefinition,
    RetryPolicy,
    RoleBinding,
    StrategyName,
    TeamLimits,
    definition_from_data,
    load_definition,
)

__all__ = [
    "ABORT_PHASE",
    "ConvergenceSpec",
    "PhaseSpec",
    "PipelineDefinition",
    "RetryPolicy",
    "RoleBinding",
    "StrategyName",
    "TeamLimits",
    "definition_from_data",
    "load_definition",
]
