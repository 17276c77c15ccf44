"""doctor (SPEC §4): is the learning loop of a skill alive? Read-only: it never fetches nor
updates the index. Each failed check carries a `fix`, the command that mends it, and a loop that
looks dead comes with how to wire the agent host.
"""
from __future__ import annotations

import datetime as dt
import sqlite3
from typing import Any

from ...base.clock import today
from ...base.config import Config
from ...base.errors import WhetstoneError
from ...format.checks import check as format_errors
from ...git import runner
from ...store import events
from ...store.store import Store
from ..hosts.settings import status as host_status
from ..sync import hooks
from ..sync.drivers import drivers_status
from ..sync.remotes import pick
from ..workspace import Workspace
from ...index.freshness import scan as stamps_of

QUIET_DAYS = 14
SETUP = [
    "Claude Code:  claude mcp add whetstone -- whetstone-mcp",
    "  and the rules in every prompt, even when the agent forgets: git whetstone hooks host claude-code",
    'Any MCP host: { "mcpServers": { "whetstone": { "command": "whetstone-mcp" } } }',
    "Then ask the agent to call recall at the start of each task and capture each correction.",
]


def doctor(skill: str, *, config: Config | None = None) -> dict[str, Any]:
    """The health of one skill's loop: a list of checks, and host setup lines if it looks dead."""
    ws = Workspace.of(config)
    store = ws.store(skill)
    checks: list[dict[str, Any]] = []

    def check(name: str, ok: bool, detail: str, fix: str | None = None, *, warn: bool = False) -> None:
        checks.append({"name": name, "ok": ok, "severity": "ok" if ok else ("warning" if warn else "error"),
                       "detail": detail, **({"fix": fix} if fix and not ok else {})})

    attach = f"git whetstone attach {store.skill}"
    if not store.exists:
        check("store", False, f"no store at {store.path}", attach)
        return _verdict(store, checks, dead=True)
    head = runner.run(store.path, "rev-parse", "--verify", "-q", "HEAD", check=False)
    check("store", head.returncode == 0, f"git repository at {store.path}" if head.returncode == 0
          else f"{store.path} has no commit", attach)

    files = store.scope_texts()
    errors = [str(e) for e in format_errors(files)]  # what `git whetstone validate` finds
    check("markdown", not errors, f"{len(files)} scope files valid" if not errors else
          f"{len(errors)} problems, first: {errors[0]}",
          f"mend the lines named and commit, or git whetstone edit {store.skill}")
    checks[-1]["errors"] = errors

    hooked = hooks.status(store)
    check("hooks", hooked["ok"], hooked["detail"], f"git whetstone hooks install {store.skill}")
    merged, detail = drivers_status(store)
    check("drivers", merged, detail, f"git whetstone hooks install {store.skill}", warn=True)
    check(*_remote(store), warn=True)
    host = host_status()
    check("host", host["installed"], host["detail"], "git whetstone hooks host claude-code", warn=True)
    check(*_index(store), f"git whetstone reindex {store.skill}", warn=True)
    try:
        ws.embedder.embed(["whetstone doctor"])
        check("backend", True, f"{ws.config.embedding_backend} ({ws.embedder.identity})")
    except WhetstoneError as exc:
        check("backend", False, exc.message, "set embedding_backend to static or hashing (config.toml or "
              "WHETSTONE_EMBEDDING_BACKEND), or install the model it names")

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
    # events.jsonl is kept per machine: a machine that has neither recalled nor captured yet (a fresh
    # clone, say) knows nothing of the loop elsewhere, which is not a dead loop
    new_here = not any(counts.values())
    for kind in ("recall", "capture"):
        seen = last.get(kind)
        fresh = seen is not None and (day - seen).days <= QUIET_DAYS
        detail = (f"{counts[kind]} {kind}s, last on {seen.isoformat()}" if seen else
                  f"this machine has not {kind.rstrip('e')}ed yet (events.jsonl is kept per machine)" if new_here else
                  f"no {kind} has reached this store")
        check(f"{kind}s", fresh, detail, "wire the agent host (below)" if kind == "recall" else
              "tell the agent to call capture the moment it acts on a correction", warn=kind == "capture" or new_here)
    dead = not any(c["name"] == "recalls" and c["ok"] for c in checks)
    return _verdict(store, checks, dead=dead)


def _verdict(store: Store, checks: list[dict[str, Any]], *, dead: bool) -> dict[str, Any]:
    healthy = all(c["ok"] or c["severity"] == "warning" for c in checks)
    recalls = next((c for c in checks if c["name"] == "recalls"), None)
    return {"skill": store.skill, "path": str(store.path), "healthy": healthy, "checks": checks,
            "setup": SETUP if dead else [],
            "dead": dead and (recalls is None or recalls["severity"] == "error")}  # not merely new here


def _remote(store: Store) -> tuple[str, bool, str, str | None]:
    """Where the store stands against its remote, as of the last sync or fetch (no network)."""
    sync = f"git whetstone sync {store.skill}"
    branch = runner.run(store.path, "symbolic-ref", "--short", "-q", "HEAD", check=False).stdout.strip()
    if not branch:
        return "remote", False, "HEAD is detached (not on a branch)", f"git switch main in {store.path}"
    try:
        name = pick(store, None, branch)
    except WhetstoneError as exc:
        return "remote", False, exc.message, sync + " --remote NAME"
    if name is None:
        return "remote", True, (f"none: the store lives on this machine only (to share it: git whetstone remote "
                                f"{store.skill} add URL)"), None
    tracking = f"refs/remotes/{name}/{branch}"
    if runner.run(store.path, "rev-parse", "--verify", "-q", tracking, check=False).returncode != 0:
        return "remote", False, f"{name} has never been synced with", sync
    counts = runner.run(store.path, "rev-list", "--left-right", "--count", f"HEAD...{tracking}", check=False)
    ahead, behind = (int(n) for n in (counts.stdout.split() or ["0", "0"])[:2])
    when = _last_contact(store, tracking)
    since = f" as of the last sync on {when}" if when else ""
    if not (ahead or behind):
        return "remote", True, f"{name}/{branch}: in step{since}", None
    parts = [f"{ahead} commit{'s' if ahead != 1 else ''} to push"] if ahead else []
    parts += [f"{behind} commit{'s' if behind != 1 else ''} to pull"] if behind else []
    return "remote", False, f"{name}/{branch}: {', '.join(parts)}{since}", sync


def _last_contact(store: Store, tracking: str) -> str | None:
    """The day the store last synced (events.jsonl), or the remote-tracking ref last moved (a plain
    git fetch, pull or push)."""
    days = [str(e.get("ts", ""))[:10] for e in events.read(store.path) if e.get("event") == "sync"]
    moved = runner.run(store.path, "log", "-g", "-1", "--date=short", "--format=%gd", tracking, check=False).stdout
    if "@{" in moved:
        days.append(moved.strip().rsplit("@{", 1)[1].rstrip("}"))
    days = [d for d in days if len(d) == 10]
    return max(days) if days else None


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
