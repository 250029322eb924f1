"""Every subcommand's --help shows an example of itself (docs/cli.md promises examples;
leaf commands showed bare ID/RUN placeholders)."""

from __future__ import annotations

import argparse

from seamline.cli.main import full_parser


def _leaves() -> list[tuple[str, str, argparse.ArgumentParser]]:
    parser = full_parser()
    found = []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for name, command in action.choices.items():
            for inner in command._actions:
                if isinstance(inner, argparse._SubParsersAction):
                    found += [(name, leaf_name, leaf) for leaf_name, leaf in inner.choices.items()]
    return found


def test_every_subcommand_help_has_an_example_of_itself() -> None:
    leaves = _leaves()
    assert len(leaves) >= 15
    missing = [
        f"{name} {leaf_name}"
        for name, leaf_name, leaf in leaves
        if f"  seamline {name} {leaf_name}" not in leaf.format_help()
    ]
    assert missing == []
