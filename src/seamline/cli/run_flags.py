"""The run options of the flags that ``seamline run``, ``run --on temporal`` and
``seamline acp`` share, built once: a flag added here travels with every kind of run.

:func:`flag_options` gives the :class:`~seamline.runner.RunOptions` of the flags alone
(the provider by name, its ``-o`` options with the envelope's, the model, the workspace,
``--yes``, ``--max-steps``, ``--budget-usd``, ``--allow`` and the sandbox flags the
session keeps); each command then adds what only it has (an open store, the tools, a
callback) with :meth:`~seamline.runner.RunOptions.replace`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from seamline.cli.main import parse_options
from seamline.runner import RunOptions

__all__ = ["flag_options", "sandbox_run_options"]


def sandbox_run_options(args: argparse.Namespace) -> dict[str, Any]:
    """The sandbox flags a session keeps for resume and fork (the policy as an absolute path)."""
    policy = getattr(args, "sandbox_policy", None)
    return {
        "sandbox": getattr(args, "sandbox", None),
        "sandbox_policy": str(Path(policy).resolve()) if policy else None,
    }


def flag_options(args: argparse.Namespace, *, options: dict[str, str] | None = None) -> RunOptions:
    """The run options of the shared flags. ``options`` replaces the provider options the
    flags give (``-o`` merged with the envelope's for ``--sandbox``), for a command that
    encloses a backend its own way."""
    provider = args.provider or "offline"  # `run` leaves it unset to tell a handoff (--session ID --provider P)
    if options is None:
        from seamline.cli.sandbox_command import envelope_options
        from seamline.providers.registry import provider_class

        enveloped = envelope_options(args, provider_class(provider))
        options = {**parse_options(args.provider_option), **(enveloped or {})}
    sandbox = getattr(args, "sandbox", None)
    allow = getattr(args, "allow", None)
    return RunOptions(
        provider=provider,
        model=args.model,
        options=options,
        workspace=getattr(args, "workspace", None) or ".",  # `seamline acp`: each session names its folder
        yes=bool(args.yes or sandbox),  # --sandbox: what runs is isolated, so it runs unasked
        max_steps=args.max_steps,
        budget_usd=args.budget_usd,
        allow=list(allow) if allow else None,
        stored=sandbox_run_options(args),
    )
