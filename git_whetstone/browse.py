"""Read-only views for people who live in git: list, show, path and log.

None of these embed anything or touch the index: they read the markdown (and git) directly, so
they stay fast and never load a model.
"""
from __future__ import annotations

from typing import Any

from . import gitbin
from .config import Config, load
from .errors import WhetstoneError, shown
from .index import Entry, read_file
from .retrieve import weight
from .store import KIND_FOLDER, Store, list_skills, today


def entries(store: Store) -> tuple[list[Entry], list[str]]:
    """Every valid entry of a store in file order, and the warnings met on the way."""
    found, warnings = [], []
    for kind in KIND_FOLDER:
        for path in store.scope_files(kind):
            rows, warning = read_file(store, store.rel(path))
            found += rows
            if warning:
                warnings.append(warning)
    return found, warnings


def list_stores(*, config: Config | None = None) -> dict[str, Any]:
    """The skills under the store root with their entry counts."""
    config = config or load()
    out = []
    for name in list_skills(config):
        store = Store.open(config, name)
        rows, warnings = entries(store)
        out.append({"skill": name, "path": str(store.path),
                    "learnings": sum(e.kind == "learning" for e in rows),
                    "issues": sum(e.kind == "issue" for e in rows), "warnings": warnings})
    return {"store_root": str(config.store_root), "skills": out}


def show(skill: str, entry_id: str | None = None, *, config: Config | None = None) -> dict[str, Any]:
    """A store's entries (or one of them), with the fields the markdown holds and each weight."""
    config = config or load()
    store = Store.open(config, skill)
    store.require()
    rows, warnings = entries(store)
    if entry_id is not None:
        wanted = entry_id.strip().upper() if isinstance(entry_id, str) else entry_id
        rows = [e for e in rows if e.id == wanted]
        if not rows:
            raise WhetstoneError(f"unknown entry id {shown(entry_id)} in {store.skill}")
    day = today()
    result: dict[str, Any] = {"skill": store.skill, "path": str(store.path), "learnings": [], "issues": [],
                              "warnings": warnings}
    for e in rows:
        item: dict[str, Any] = {"id": e.id, "title": e.title, "rule": e.body, "scope": e.scope}
        if e.kind == "learning":
            item.update(recurrence=e.recurrence, first_seen=e.first_seen, last_seen=e.last_seen,
                        weight=weight(e.recurrence, e.last_seen, day, config))
        item.update(provenance=list(e.provenance), file=f"{e.path}:{e.line}")
        result["learnings" if e.kind == "learning" else "issues"].append(item)
    return result


def path(skill: str, *, config: Config | None = None) -> dict[str, Any]:
    config = config or load()
    store = Store.open(config, skill)
    store.require()
    return {"skill": store.skill, "path": str(store.path)}


def history(skill: str, limit: int = 50, *, config: Config | None = None) -> dict[str, Any]:
    """The store's commits, newest first: what changed, when, by whom."""
    config = config or load()
    store = Store.open(config, skill)
    store.require()
    out = gitbin.run(store.path, "log", f"-n{max(1, limit)}", "--format=%H%x1f%aI%x1f%an%x1f%s").stdout
    commits = []
    for line in out.splitlines():
        sha, date, author, subject = line.split("\x1f", 3)
        commits.append({"commit": sha, "date": date, "author": author, "subject": subject})
    return {"skill": store.skill, "commits": commits}
