"""Read-only views for people who live in git: list, show, path and log.

None of these embed anything or touch the index: they read the markdown (and git) directly, so
they stay fast and never load a model.
"""
from __future__ import annotations

from typing import Any

from ...base.clock import today
from ...base.config import Config
from ...base.errors import WhetstoneError, shown
from ...git.history import commits
from ...store.reading import store_entries
from ...store.store import list_skills
from ...store.weight import weight
from ..workspace import Workspace


def list_stores(*, config: Config | None = None) -> dict[str, Any]:
    """The skills under the store root with their entry counts."""
    ws = Workspace.of(config)
    out = []
    for name in list_skills(ws.config):
        store = ws.store(name)
        rows, warnings = store_entries(store)
        out.append({"skill": name, "path": str(store.path),
                    "learnings": sum(e.kind == "learning" for e in rows),
                    "issues": sum(e.kind == "issue" for e in rows), "always": sum(e.always for e in rows),
                    "warnings": warnings})
    return {"store_root": str(ws.config.store_root), "skills": out}


def show(skill: str, entry_id: str | None = None, *, config: Config | None = None) -> dict[str, Any]:
    """A store's entries (or one of them), with the fields the markdown holds and each weight."""
    ws = Workspace.of(config)
    store = ws.store(skill, must_exist=True)
    rows, warnings = store_entries(store)
    if entry_id is not None:
        wanted = entry_id.strip().upper() if isinstance(entry_id, str) else entry_id
        rows = [e for e in rows if e.id == wanted]
        if not rows:
            raise WhetstoneError(f"unknown entry id {shown(entry_id)} in {store.skill}")
    day = today()
    result: dict[str, Any] = {"skill": store.skill, "path": str(store.path), "learnings": [], "issues": [],
                              "warnings": warnings}
    for e in rows:
        item: dict[str, Any] = {"id": e.id, "title": e.title, "rule": e.body, "scope": e.scope, "always": e.always}
        if e.kind == "learning":
            item.update(recurrence=e.recurrence, first_seen=e.first_seen, last_seen=e.last_seen,
                        weight=weight(e.recurrence, e.last_seen, day, ws.config))
        item.update(provenance=list(e.provenance), file=f"{e.path}:{e.line}")
        result["learnings" if e.kind == "learning" else "issues"].append(item)
    return result


def path(skill: str, *, config: Config | None = None) -> dict[str, Any]:
    store = Workspace.of(config).store(skill, must_exist=True)
    return {"skill": store.skill, "path": str(store.path)}


def history(skill: str, limit: int = 50, *, config: Config | None = None) -> dict[str, Any]:
    """The store's commits, newest first: what changed, when, by whom."""
    store = Workspace.of(config).store(skill, must_exist=True)
    return {"skill": store.skill, "commits": [{"commit": c.sha, "date": c.date, "author": c.author, "subject": c.subject}
                                              for c in commits(store.path, limit)]}
