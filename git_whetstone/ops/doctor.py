"""doctor (SPEC §4): is the learning loop of a skill alive? Read-only, it changes nothing.

It checks the store (a git repository with a commit), its markdown (the full validator, mistune
included), the hooks, the index's freshness (read without updating it), the embedding backend,
and whether recalls and captures are landing. When the loop looks dead it says how to wire the
agent host.
"""
from __future__ import annotations

import datetime as dt
import sqlite3
from typing import Any

from ..base.clock import today
from ..base.config import Config
from ..base.errors import WhetstoneError
from ..format import markdown
from ..format.layout import KIND_FOLDER
from ..git import runner
from ..store import events
from ..store.store import Store
from . import hooks
from .workspace import Workspace
from ..index import scan
from ..index.freshness import scan as stamps_of

QUIET_DAYS = 14
SETUP = [
    "Claude Code:  claude mcp add whetstone -- whetstone-mcp",
    'Any MCP host: { "mcpServers": { "whetstone": { "command": "whetstone-mcp" } } }',
    "Then ask the agent to call recall at the start of each task and capture each correction.",
]


def doctor(skill: str, *, config: Config | None = None) -> dict[str, Any]:
    """The health of one skill's loop: a list of checks, and host setup lines if it looks dead."""
    ws = Workspace.of(config)
    store = ws.store(skill)
    checks: list[dict[str, Any]] = []

    def check(name: str, ok: bool, detail: str, *, warn: bool = False) -> None:
        checks.append({"name": name, "ok": ok, "severity": "ok" if ok else ("warning" if warn else "error"),
                       "detail": detail})

    if not store.exists:
        check("store", False, f"no store at {store.path} (create it with: git whetstone attach {store.skill})")
        return _verdict(store, checks, dead=True)
    head = runner.run(store.path, "rev-parse", "--verify", "-q", "HEAD", check=False)
    check("store", head.returncode == 0, f"git repository at {store.path}" if head.returncode == 0
          else f"{store.path} has no commit; run git whetstone attach {store.skill}")

    errors: list[str] = []
    files = 0
    for kind, folder in KIND_FOLDER.items():
        for path in store.scope_files(kind):
            files += 1
            try:
                text = path.read_bytes().decode("utf-8")
            except UnicodeDecodeError:
                errors.append(f"{store.rel(path)}:1: not valid UTF-8")
                continue
            errors += [str(e) for e in markdown.validate(text, store.rel(path), folder)]
    check("markdown", not errors, f"{files} scope files valid" if not errors else
          f"{len(errors)} problems, first: {errors[0]}")
    checks[-1]["errors"] = errors

    check(*_hooks(store))
    check(*_index(store), warn=True)
    try:
        ws.embedder.embed(["whetstone doctor"])
        check("backend", True, f"{ws.config.embedding_backend} ({ws.embedder.identity})")
    except WhetstoneError as exc:
        check("backend", False, exc.message)
    check("scan", True, f"recall scans vectors with {scan.describe(ws.config.vector_scan)}")

    day = today()
    last: dict[str, dt.date] = {}
    counts = {"recall": 0, "capture": 0}
    for event in events.read(store.path):
        kind = event.get("event")
        if kind not in counts:
            continue
        counts[kind] += 1
        try:
            on = dt.datetime.fromisoformat(str(event.get("ts"))).date()
        except ValueError:
            continue
        last[kind] = max(last.get(kind, on), on)
    for kind in ("recall", "capture"):
        seen = last.get(kind)
        fresh = seen is not None and (day - seen).days <= QUIET_DAYS
        detail = (f"{counts[kind]} {kind}s, last on {seen.isoformat()}" if seen else f"no {kind} has reached this store")
        check(f"{kind}s", fresh, detail, warn=kind == "capture")
    dead = not any(c["name"] == "recalls" and c["ok"] for c in checks)
    return _verdict(store, checks, dead=dead)


def _verdict(store: Store, checks: list[dict[str, Any]], *, dead: bool) -> dict[str, Any]:
    healthy = all(c["ok"] or c["severity"] == "warning" for c in checks)
    return {"skill": store.skill, "path": str(store.path), "healthy": healthy, "checks": checks,
            "setup": SETUP if dead else []}


def _hooks(store: Store) -> tuple[str, bool, str]:
    state = hooks.status(store)
    return "hooks", state["ok"], state["detail"]


def _index(store: Store) -> tuple[str, bool, str]:
    """Compare index.sqlite's file stamps with the disk, reading the index only."""
    path = store.path / "index.sqlite"
    if not path.exists():
        return "index", False, "no index.sqlite yet (the next recall builds it)"
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            known = dict(db.execute("SELECT path, stamp FROM files"))
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        return "index", False, f"index.sqlite is unreadable ({exc}); the next recall rebuilds it"
    stamps = {k: v for k, v in stamps_of(store).items() if k != "@HEAD"}
    stale = sorted(p for p in stamps.keys() | known.keys() if stamps.get(p) != known.get(p))
    if stale:
        return "index", False, f"{len(stale)} files changed since the index was built (the next recall updates it)"
    return "index", True, f"fresh ({len(known)} files)"
