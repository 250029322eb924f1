"""The run options of the flags that ``seamline run``, ``run --on temporal`` and
``seamline acp`` share, built once: a flag added here travels with every kind of run.

:func:`flag_options` gives the :class:`~seamline.runner.RunOptions` of the flags alone
(the provider by name, its ``-o`` options with the envelope's, the model, the workspace,
``--yes``, ``--max-steps``, ``--budget-usd``, ``--allow``, the sandbox flags the
session keeps, the fallbacks of ``--fallback``, ``run``'s ``--record`` and ``--replay``);
each command then adds what only it has (an open store, the tools, a callback) with
:meth:`~seamline.runner.RunOptions.replace`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seamline.cli.main import SeamlineUsage, parse_options
from seamline.errors import InvalidRequest
from seamline.providers.failover import Fallback, parse_fallback
from seamline.runner import RunOptions

__all__ = ["add_fallback_flags", "fallback_options", "flag_options", "sandbox_run_options"]


class _FallbackFlag(argparse.Action):
    """``--fallback PROVIDER[:MODEL]``: one more fallback, with no options yet."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option: str | None = None) -> None:
        namespace.fallback = [*(getattr(namespace, "fallback", None) or []), (str(values), [])]


class _FallbackOptionFlag(argparse.Action):
    """``--fallback-option KEY=VALUE``: an option of the ``--fallback`` given before it."""

    def __call__(self, parser: Any, namespace: argparse.Namespace, values: Any, option: str | None = None) -> None:
        found = getattr(namespace, "fallback", None)
        if not found:
            parser.error("--fallback-option KEY=VALUE goes after the --fallback it is for")
            return
        found[-1][1].append(str(values))


def add_fallback_flags(parser: argparse.ArgumentParser) -> None:
    """``--fallback`` and ``--fallback-option`` (docs/cli.md, "Failover")."""
    parser.add_argument(
        "--fallback",
        action=_FallbackFlag,
        metavar="PROVIDER[:MODEL]",
        help="when a turn fails for want of capacity (quota, rate limit or overloaded past the retries), hand "
        "the session to this backend and send the turn again; repeatable, tried in order (default model: the "
        "provider's own; it gets none of the -o options: give its own with --fallback-option)",
    )
    parser.add_argument(
        "--fallback-option",
        action=_FallbackOptionFlag,
        metavar="KEY=VALUE",
        help="provider option of the --fallback given before it; repeatable",
    )


def fallback_options(args: argparse.Namespace) -> list[Fallback]:
    """The ``--fallback`` flags as fallbacks, checked (an unknown provider is a usage error);
    with ``--sandbox`` a fallback that runs a program runs it in the envelope too."""
    from seamline.cli.sandbox_command import envelope_options
    from seamline.providers.registry import provider_class

    found: list[Fallback] = []
    given: Sequence[tuple[str, list[str]]] = getattr(args, "fallback", None) or []
    for text, pairs in given:
        try:
            fallback = parse_fallback(text)
            enveloped = envelope_options(args, provider_class(fallback.provider)) or {}
        except InvalidRequest as exc:
            raise SeamlineUsage(f"--fallback {text}: {exc.message}") from None
        bad = next((pair for pair in pairs if "=" not in pair), None)
        if bad is not None:
            raise SeamlineUsage(f"--fallback-option takes KEY=VALUE, got {bad!r}")
        options = {**parse_options(pairs), **enveloped}
        found.append(Fallback(fallback.provider, fallback.model, options or None))
    return found


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
        on_budget=getattr(args, "on_budget", None) or "fail",
        allow=list(allow) if allow else None,
        stored=sandbox_run_options(args),
        fallback=fallback_options(args),
        record=getattr(args, "record", None),
        replay=getattr(args, "replay", None),
    )
