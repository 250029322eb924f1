"""``seamline providers list | check``."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json

from seamline.cli.main import parse_options
from seamline.errors import SeamlineError
from seamline.providers.base import PreflightCheck
from seamline.providers.registry import create_provider, provider_class, provider_names

__all__ = ["providers_command"]


def providers_command(args: argparse.Namespace) -> int:
    if args.providers_command == "list":
        return _list(args)
    return _check(args)


def _list(args: argparse.Namespace) -> int:
    rows = []
    for name in provider_names():
        try:
            cls = provider_class(name)
        except SeamlineError as exc:
            rows.append({"name": name, "error": exc.message})
            continue
        caps = cls.capabilities()
        rows.append(
            {
                "name": name,
                "description": cls.description,
                "default_model": cls.default_model,
                "capabilities": {f: getattr(caps, f) for f in caps.__struct_fields__},
                "options": {k: {"help": v.help, "default": v.default, "choices": list(v.choices)} for k, v in cls.options.items()},
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
            f"routes={','.join(caps['routes'])}"
        )
        if args.options:
            options = row["options"]
            assert isinstance(options, dict)
            for key, spec in options.items():
                default = f" (default {spec['default']})" if spec["default"] is not None else ""
                print(f"{'':<16}-o {key}=…  {spec['help']}{default}")
    return 0


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
            print(json.dumps({"provider": name, "ok": all(c.ok for c in checks), "checks": [dataclasses.asdict(c) for c in checks]}))
            continue
        for check in checks:
            mark = "ok  " if check.ok else "FAIL"
            print(f"{mark} {name}: {check.name} — {check.detail}")
            if not check.ok and check.fix:
                print(f"     fix: {check.fix}")
    return 1 if failed else 0
