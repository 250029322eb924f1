"""``seamline providers list | check``."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
from typing import Any

from seamline.cli.main import parse_options
from seamline.errors import SeamlineError
from seamline.providers.base import PreflightCheck, Provider
from seamline.providers.programs.model_gateway import STORED_LOGIN_NOTE
from seamline.providers.registry import create_provider, provider_class, provider_names

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> str:
    providers = commands.add_parser(
        "providers",
        help="list backends and check that they are ready",
        description="List the providers seamline can run, and check that one is ready.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="""\
examples:
  seamline providers list
  seamline providers list --options --json
  seamline providers check
  seamline providers check claude-code
""",
    )
    sub = providers.add_subparsers(dest="providers_command", metavar="SUBCOMMAND", required=True)
    plist = sub.add_parser("list", help="every provider, with its capabilities")
    plist.add_argument("--json", action="store_true", help="one JSON object per provider")
    plist.add_argument("--options", action="store_true", help="also list each provider's options")
    check = sub.add_parser(
        "check",
        help="preflight: is a provider ready, and if not, what fixes it",
        description="Run each provider's preflight; exit 1 when a check fails. Failed checks name their fix.",
    )
    check.add_argument("name", nargs="?", metavar="NAME", help="one provider (default: all)")
    check.add_argument("--model", "-m", metavar="NAME")
    check.add_argument("--provider-option", "-o", action="append", default=[], metavar="KEY=VALUE")
    check.add_argument("--json", action="store_true")
    return "providers"


def run(args: argparse.Namespace) -> int:
    if args.providers_command == "list":
        return _list(args)
    return _check(args)


def _list(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    for name in provider_names():
        try:
            cls = provider_class(name)
        except SeamlineError as exc:
            rows.append({"name": name, "error": exc.message})
            continue
        capabilities = cls.capabilities()
        rows.append(
            {
                "name": name,
                "description": cls.description,
                "default_model": cls.default_model,
                "capabilities": {f: getattr(capabilities, f) for f in capabilities.__struct_fields__},
                "gateway": _gateway_keys(cls),
                "options": {
                    k: {"help": v.help, "default": v.default, "choices": list(v.choices)}
                    for k, v in cls.options.items()
                },
            }
        )
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    for row in rows:
        if "error" in row:
            print(f"{row['name']:<14} (cannot load: {row['error']})")
            continue
        caps = row["capabilities"]
        assert isinstance(caps, dict)
        print(f"{row['name']:<14} {row['description']}")
        print(
            f"{'':<14} fork={caps['forking']} resume={caps['resume']} ids={caps['session_ids']} "
            f"cost={caps['cost_source']} own_tools={'yes' if caps['runs_own_tools'] else 'no'} "
            f"routes={','.join(caps['routes'])} approval={caps['tool_approval']} keys={caps['keys']}"
        )
        for line in _gateway_lines(row["gateway"]):
            print(f"{'':<14} {line}")
        if args.options:
            options = row["options"]
            assert isinstance(options, dict)
            for key, spec in options.items():
                default = f" (default {spec['default']})" if spec["default"] is not None else ""
                print(f"{'':<16}-o {key}=…  {spec['help']}{default}")
    return 0


def _gateway_keys(cls: type[Provider]) -> dict[str, Any] | None:
    """Where the gateway takes a backend's key from, and what a login the program keeps in
    its own files means (the gateway cannot hold it: off for that session); None where no
    gateway holds a key for it."""
    if not cls.gateway_key_vars:
        return None
    return {
        "key_vars": list(cls.gateway_key_vars),
        # keys=gateway_or_environment: only where seamline knows how the program reaches its API
        "where_api_known": cls.keys == "gateway_or_environment",
        "key_var_option": "api_key_env" if "api_key_env" in cls.options else None,
        "stored_login": cls.stored_login,
        "with_stored_login": None if cls.stored_login is None else "off",
    }


def _gateway_lines(gateway: Any) -> list[str]:
    if not gateway:
        return []
    where = "where seamline knows the program's API, " if gateway["where_api_known"] else ""
    names: list[str] = gateway["key_vars"]
    named = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    if gateway["key_var_option"]:
        named += f" (or the variable -o {gateway['key_var_option']} names)"
    lines = [f"gateway: {where}holds the key of {named}, set in seamline's environment"]
    if gateway["stored_login"]:
        lines.append(f"gateway off with a stored login alone ({gateway['stored_login']}): {STORED_LOGIN_NOTE}")
    return lines


def _check(args: argparse.Namespace) -> int:
    names = [args.name] if args.name else provider_names()
    options = parse_options(args.provider_option)
    failed = False
    results: list[tuple[str, list[PreflightCheck]]] = []
    for name in names:
        try:
            provider = create_provider(name, model=args.model, options=options if args.name else {})
            checks = asyncio.run(provider.preflight())
        except SeamlineError as exc:
            checks = [PreflightCheck(name=name, ok=False, detail=exc.message)]
        results.append((name, checks))
        failed = failed or not all(c.ok for c in checks)
    for name, checks in results:
        if args.json:
            print(
                json.dumps(
                    {
                        "provider": name,
                        "ok": all(c.ok for c in checks),
                        "checks": [dataclasses.asdict(c) for c in checks],
                    }
                )
            )
            continue
        for check in checks:
            mark = "ok  " if check.ok else "FAIL"
            print(f"{mark} {name}: {check.name} — {check.detail}")
            if not check.ok and check.fix:
                print(f"     fix: {check.fix}")
    return 1 if failed else 0
