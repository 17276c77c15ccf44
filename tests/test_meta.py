"""Checks on the shape of the code: help everywhere, and layers that stay in their lane."""
from __future__ import annotations

import ast
from pathlib import Path

import click

import git_whetstone
from git_whetstone.cli import main

PACKAGE = Path(git_whetstone.__file__).parent
HEAVY = {"mcp", "mcp_entry", "torch", "sentence_transformers"}


def module_level_imports(path: Path) -> set[str]:
    """Top-level names imported when the module is imported (not inside functions)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def all_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_every_command_has_help_text() -> None:
    assert main.help
    for name, command in main.commands.items():
        assert command.help and len(command.help.strip()) > 20, name
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"{name} {param.opts}"


def test_library_never_imports_the_mcp_layer() -> None:
    """The library is below both wrappers; only the CLI's `mcp` command reaches the server, lazily."""
    for path in PACKAGE.glob("*.py"):
        if path.name != "cli.py":
            assert not all_imports(path) & {"mcp", "mcp_entry"}, path.name


def test_cli_module_imports_nothing_heavy_at_start() -> None:
    imported = module_level_imports(PACKAGE / "cli.py")
    assert not imported & (HEAVY | {"numpy", "dulwich", "mistune", "sqlite3"}), imported


def test_version_matches_distribution() -> None:
    import tomllib
    from importlib.metadata import version
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    assert project["name"] == "git-whetstone"
    assert version("git-whetstone") == git_whetstone.__version__
