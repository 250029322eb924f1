"""Pipelines: declared definitions, passive roles, the controller, convergence, teams."""

from seamline.definitions import (
    PhaseSpec,
    PipelineDefinition,
    RoleBinding,
    definition_from_data,
    load_definition,
)
from seamline.pipeline.builtin import BUILTIN_PIPELINES, pipeline_names, resolve_pipeline, stream_pipeline
from seamline.pipeline.controller import STOP_EXIT_CODES, PipelineController, RunReport, exit_code_for
from seamline.pipeline.convergence import ConvergenceDecision, Judgement, decide
from seamline.pipeline.race import race_definition  # registers the race's role kinds
from seamline.pipeline.roles import AgentRole, CitationReviewer, Role, RoleContext, RoleFailure, RoleOutput

__all__ = [
    "BUILTIN_PIPELINES",
    "STOP_EXIT_CODES",
    "AgentRole",
    "CitationReviewer",
    "ConvergenceDecision",
    "Judgement",
    "PhaseSpec",
    "PipelineController",
    "PipelineDefinition",
    "Role",
    "RoleBinding",
    "RoleContext",
    "RoleFailure",
    "RoleOutput",
    "RunReport",
    "decide",
    "definition_from_data",
    "exit_code_for",
    "load_definition",
    "race_definition",
    "pipeline_names",
    "resolve_pipeline",
    "stream_pipeline",
]
