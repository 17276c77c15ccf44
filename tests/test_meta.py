"""Checks on the shape of the code: help everywhere, and layers that stay in their lane."""
from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import click
import pytest

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


def commands(group: click.Group = main, prefix: str = "") -> dict[str, click.Command]:
    """Every command by its full name ("hooks install"), groups included, hidden ones too."""
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        found[prefix + name] = command
        if isinstance(command, click.Group):
            found.update(commands(command, f"{prefix}{name} "))
    return found


def test_every_command_has_help_text() -> None:
    assert main.help
    for name, command in commands().items():
        assert command.help and len(command.help.strip()) > 20, name
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"{name} {param.opts}"


def man_entries() -> dict[str, str]:
    """The COMMANDS section of man/git-whetstone.1 as plain text, by the command each entry names."""
    text = (PACKAGE.parent / "man" / "git-whetstone.1").read_text()
    section = text.split("\n.SH COMMANDS\n", 1)[1].split("\n.SH ", 1)[0]
    groups = {name for name, command in main.commands.items() if isinstance(command, click.Group)}
    entries = {}
    for chunk in section.split(".TP\n")[1:]:
        plain = re.sub(r"\\f[BIRP]|\\\(..|\"", "", chunk).replace("\\-", "-")
        plain = re.sub(r"^\.[A-Z]{1,2} ?", "", plain, flags=re.M)
        tag = plain.split("\n", 1)[0]
        words = re.findall(r"[a-z][a-z-]*", tag)
        name = " ".join(words[:2]) if words[0] in groups else words[0]  # "hooks install"
        entries[name] = plain
    return entries


def test_every_command_and_option_is_in_the_man_page() -> None:
    """`git help whetstone` is the manual: each command has an entry under COMMANDS, and the entry
    names each of the command's options (--json and --help are described once, under OPTIONS)."""
    entries = man_entries()
    for name, command in commands().items():
        if isinstance(command, click.Group):
            continue
        assert name in entries, f"'{name}' has no entry in man/git-whetstone.1"
        for param in command.params:
            if isinstance(param, click.Option) and param.name not in ("as_json", "help"):
                for opt in param.opts:
                    assert re.search(rf"{re.escape(opt)}(?![\w-])", entries[name]), \
                        f"{name}: {opt} is not in its man page entry"
    assert not set(entries) - set(commands()), "the man page documents commands the CLI does not have"


def test_the_man_page_renders_without_warnings() -> None:
    if not shutil.which("groff"):
        pytest.skip("groff is not installed")
    proc = subprocess.run(["groff", "-man", "-ww", "-z", "-Tutf8", str(PACKAGE.parent / "man" / "git-whetstone.1")],
                          capture_output=True, text=True, env={**os.environ, "LC_ALL": "C.UTF-8"})
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_the_wheel_carries_the_hook_shims_and_the_man_page() -> None:
    """The shims and the page live at the top level (hooks/, man/); a wheel must carry them inside
    the package for `hooks install` and `install-man`, and put the page in share/man/man1."""
    import tomllib
    wheel = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["force-include"] == {"hooks": "git_whetstone/_hooks",
                                      "man/git-whetstone.1": "git_whetstone/_man/git-whetstone.1"}
    assert wheel["shared-data"] == {"man/git-whetstone.1": "share/man/man1/git-whetstone.1"}
    shims = sorted(p.name for p in (PACKAGE.parent / "hooks").iterdir())
    from git_whetstone.ops.sync.hooks import NAMES
    assert shims == sorted(NAMES)
    from hatchling.builders import wheel as builder  # a dev dependency: the wheel is really built
    with tempfile.TemporaryDirectory() as out:
        built = builder.WheelBuilder(str(PACKAGE.parent)).build(directory=out, versions=["standard"])
        with zipfile.ZipFile(next(iter(built))) as archive:
            names = set(archive.namelist())
            modes = {i.filename: i.external_attr >> 16 for i in archive.infolist()}
    for name in NAMES:
        assert f"git_whetstone/_hooks/{name}" in names
        assert modes[f"git_whetstone/_hooks/{name}"] & 0o111
    assert "git_whetstone/_man/git-whetstone.1" in names
    assert any(n.endswith(".data/data/share/man/man1/git-whetstone.1") for n in names)


def test_library_never_imports_the_mcp_layer() -> None:
    """The library is below both wrappers: no module of the package imports the MCP SDK or the
    server (the CLI's `mcp` command starts the server as a process of its own)."""
    for path in PACKAGE.rglob("*.py"):
        assert not all_imports(path) & {"mcp", "mcp_entry"}, path.name


def test_cli_module_imports_nothing_heavy_at_start() -> None:
    """The CLI's modules and the API they call through import nothing heavy when they load (an
    operation's module loads when its command runs)."""
    for path in [*(PACKAGE / "cli").glob("*.py"), PACKAGE / "api.py"]:
        imported = module_level_imports(path)
        assert not imported & (HEAVY | {"numpy", "dulwich", "mistune", "sqlite3"}), (path.name, imported)


def test_every_mcp_tool_takes_its_library_functions_parameters() -> None:
    """A tool is one call into the library: its parameters are the library function's own, by name
    and in order (the server's hidden request context aside)."""
    import inspect

    from git_whetstone import api
    from mcp_entry import server

    for name in ("attach", "recall", "capture", "revise", "metrics"):
        tool = [p for p in inspect.signature(getattr(server, name)).parameters if p != "ctx"]
        library = [p.name for p in inspect.signature(getattr(api, name)).parameters.values()
                   if p.kind is p.POSITIONAL_OR_KEYWORD]
        assert tool == library, name


def test_the_api_names_every_operation_the_doors_call() -> None:
    """Each name of the API is loaded from its module and is callable (or, for VERDICTS, the words)."""
    from git_whetstone import api

    for name in api.API:
        assert getattr(api, name) is not None, name


def test_version_matches_distribution() -> None:
    import tomllib
    from importlib.metadata import version
    project = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["project"]
    assert project["name"] == "git-whetstone"
    assert version("git-whetstone") == git_whetstone.__version__
