"""The floor plan holds: layers only look down, the doors never reach into each other, nobody
borrows another module's private names, nothing imports in a circle, and the CLI starts light.

Every module of the package is parsed with `ast`; imports inside functions count exactly like
those at the top of a file (a circle hidden in a function is still a circle). The layers, from the
bottom up, are the package's subfolders; ARCHITECTURE.md describes each.
"""
from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("git_whetstone", "mcp_entry")
# Bottom to top. A module may import from its own layer and the layers below it, never above.
LAYERS = ("base", "format", "git", "store", "semantics", "index", "ops", "api", "doors")
# The doors: each is its own way in, and none of them imports another.
DOORS = {"git_whetstone.cli": "cli", "git_whetstone.__main__": "cli", "mcp_entry.server": "mcp",
         "mcp_entry": "mcp"}


def door_of(name: str) -> str | None:
    """The door a module belongs to (the CLI's package is one door), or None."""
    return DOORS.get(name) or ("cli" if name.startswith("git_whetstone.cli.") else None)
HEAVY = ("mcp", "mcp_entry", "torch", "sentence_transformers")


@dataclass(frozen=True)
class Import:
    source: str        # the importing module
    target: str        # the module imported (a module of the project, or a top-level library)
    names: tuple[str, ...]
    line: int
    top_level: bool    # executed when the importing module is imported (not inside a function)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the project's packages by dotted name."""
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def layer_of(name: str) -> str | None:
    """The layer a module belongs to: its subfolder under git_whetstone, or a door."""
    if door_of(name):
        return "doors"
    parts = name.split(".")
    if parts == ["git_whetstone"]:
        return "base"  # the package's face: its version, nothing else
    if len(parts) >= 2 and parts[0] == "git_whetstone" and parts[1] in LAYERS[:-1]:
        return parts[1]
    return None


def _resolve(source: str, is_package: bool, level: int, module: str | None) -> str:
    if level == 0:
        return module or ""
    base = source.split(".") if is_package else source.split(".")[:-1]
    base = base[: len(base) - (level - 1)] if level > 1 else base
    return ".".join(base + ([module] if module else []))


def imports(known: dict[str, Path]) -> Iterator[Import]:
    """Every import statement of every module, with the module each one reaches."""
    for source, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        top = {id(node) for node in tree.body}
        # imports under `if` / `try` at the top level run at import time too
        for node in tree.body:
            if isinstance(node, (ast.If, ast.Try)):
                top |= {id(n) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    yield Import(source, alias.name, (), node.lineno, id(node) in top)
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(source, path.name == "__init__.py", node.level, node.module)
                names = tuple(alias.name for alias in node.names)
                submodules = [f"{target}.{n}" for n in names if f"{target}.{n}" in known]
                rest = tuple(n for n in names if f"{target}.{n}" not in known)
                for sub in submodules:
                    yield Import(source, sub, (), node.lineno, id(node) in top)
                if rest or not submodules:
                    yield Import(source, target, rest, node.lineno, id(node) in top)


def private_uses(known: dict[str, Path]) -> Iterator[str]:
    """`module._name` read through an imported module of the project (the other half of borrowing
    a private name, besides `from module import _name`)."""
    for source, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = _resolve(source, path.name == "__init__.py", node.level, node.module)
                for alias in node.names:
                    if f"{target}.{alias.name}" in known:
                        aliases[alias.asname or alias.name] = f"{target}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in known and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and node.attr.startswith("_") and not node.attr.startswith("__")):
                yield f"{source}:{node.lineno} reads {aliases[node.value.id]}.{node.attr}"


def owner(target: str, known: dict[str, Path]) -> str | None:
    """The project module an import reaches (None for a library outside the project)."""
    parts = target.split(".")
    while parts:
        if ".".join(parts) in known:
            return ".".join(parts)
        parts.pop()
    return None


def findings(root: Path = ROOT) -> dict[str, list[str]]:
    """What breaks the floor plan, by rule."""
    known = modules(root)
    found: dict[str, list[str]] = {"no layer": [], "upward": [], "doors": [], "private": [], "circle": [],
                                   "heavy cli": []}
    for name in known:
        if layer_of(name) is None:
            found["no layer"].append(f"{name} is in no layer (put it in one of {', '.join(LAYERS[:-1])})")
    graph: dict[str, set[str]] = {name: set() for name in known}
    top_graph: dict[str, set[str]] = {name: set() for name in known}
    for imp in imports(known):
        reached = owner(imp.target, known)
        if reached is None or reached == imp.source:
            continue
        graph[imp.source].add(reached)
        if imp.top_level:
            top_graph[imp.source].add(reached)
        where = f"{imp.source}:{imp.line}"
        mine, theirs = layer_of(imp.source), layer_of(reached)
        if mine and theirs and LAYERS.index(theirs) > LAYERS.index(mine):
            found["upward"].append(f"{where} imports {reached} ({theirs}) from the {mine} layer")
        if door_of(imp.source) and door_of(reached) and door_of(imp.source) != door_of(reached):
            found["doors"].append(f"{where}: the {door_of(imp.source)} door imports the {door_of(reached)} door ({reached})")
        private = [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
        if private and reached != imp.source:
            found["private"].append(f"{where} imports {', '.join(private)} from {reached}")
    found["private"] += list(private_uses(known))
    found["circle"] = [" -> ".join(cycle) for cycle in _circles(graph)]
    # what `import git_whetstone.cli` runs: its top-level imports, and theirs, and so on
    seen, todo = set(), ["git_whetstone.cli"] if "git_whetstone.cli" in known else []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += sorted(top_graph[name])
    for imp in imports(known):
        if imp.source in seen and imp.top_level and imp.target.split(".")[0] in HEAVY:
            found["heavy cli"].append(f"{imp.source}:{imp.line} imports {imp.target} when the CLI starts")
    return found


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    cycles = []
    for group in groups:  # walk inside the group from its first member back to it
        members, start = set(group), group[0]
        path, node, seen = [start], start, {start}
        while True:
            nxt = sorted(graph[node] & members)
            back = start in nxt and len(path) > 1
            if back:
                break
            unseen = [n for n in nxt if n not in seen]
            node = unseen[0] if unseen else nxt[0]
            if node in seen:
                path = path[path.index(node):]
                break
            path.append(node)
            seen.add(node)
        cycles.append(path + [path[0]])
    return cycles


@pytest.mark.parametrize("rule", ["no layer", "upward", "doors", "private", "circle", "heavy cli"])
def test_the_floor_plan_holds(rule: str) -> None:
    problems = findings()[rule]
    assert not problems, f"{rule}:\n" + "\n".join(problems)


def test_the_checker_sees_what_it_must(tmp_path: Path) -> None:
    """The rules above catch each kind of breach in a package made up for the purpose."""
    pkg = tmp_path / "git_whetstone"
    for sub in ("base", "store", "ops"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "base" / "errors.py").write_text("def f():\n    from ..store import repo\n")  # upward, in a function
    (pkg / "store" / "repo.py").write_text("from ..base import errors\nfrom ..base.errors import _hidden\n")
    (pkg / "ops" / "a.py").write_text("from . import b\n")
    (pkg / "ops" / "b.py").write_text("def g():\n    from .a import x\n")  # a circle hidden in a function
    (pkg / "flat.py").write_text("import os\n")
    (pkg / "cli.py").write_text("from .ops import a\nimport mcp\nfrom mcp_entry import server\n")
    (tmp_path / "mcp_entry").mkdir()
    (tmp_path / "mcp_entry" / "__init__.py").write_text("")
    (tmp_path / "mcp_entry" / "server.py").write_text("from git_whetstone.ops import a\n")
    found = findings(tmp_path)
    assert any("git_whetstone.base.errors:2 imports git_whetstone.store.repo" in f for f in found["upward"])
    assert any("_hidden" in f for f in found["private"])
    assert found["circle"] == ["git_whetstone.base.errors -> git_whetstone.store.repo -> git_whetstone.base.errors",
                               "git_whetstone.ops.a -> git_whetstone.ops.b -> git_whetstone.ops.a"]
    assert found["no layer"] == ["git_whetstone.flat is in no layer (put it in one of base, format, git, store, "
                                 "semantics, index, ops, api)"]
    assert any("mcp_entry.server" in f for f in found["doors"])
    assert any("imports mcp when the CLI starts" in f for f in found["heavy cli"])
