"""metrics (SPEC §4): is the loop working? KPIs from events.jsonl and the store's git history.

Reporting only. The three labeled KPIs (capture rate, regressions prevented, retrieval precision)
need a hand-labeled set and are `null` at run time by design.
"""
from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

from ...base.config import Config
from ...git.history import id_history
from ...store.reading import store_entries
from ...store import events
from ...store.store import Store, list_skills
from ..workspace import Workspace

LABELED_NOTE = ("capture_rate, regressions_prevented and retrieval_precision need a hand-labeled set; "
                "they are null at run time by design")


def metrics(skill: str | None = None, *, config: Config | None = None) -> dict[str, Any]:
    """Per-skill KPIs for one skill, or for every skill under the store root."""
    ws = Workspace.of(config)
    names = [ws.store(skill).skill] if skill is not None else list_skills(ws.config)
    return {"skills": {name: _one(ws.store(name)) for name in names}, "note": LABELED_NOTE}


def _one(store: Store) -> dict[str, Any]:
    runs = surfaced = 0
    captures: Counter[str] = Counter()
    revisions: Counter[str] = Counter()
    weeks: dict[str, Counter[str]] = {}
    for event in events.read(store.path):
        kind = event.get("event")
        if kind == "recall":
            runs += 1
            surfaced += len(event.get("learnings") or [])
        elif kind == "capture":
            status = str(event.get("status"))
            captures[status] += 1
            week = iso_week(event.get("ts"))
            if week and status in ("committed", "reinforced", "noop"):
                weeks.setdefault(week, Counter())["captures"] += 1
                if status in ("reinforced", "noop"):
                    weeks[week]["repeats"] += 1
        elif kind == "revise":
            revisions[f"{event.get('action')}:{event.get('status')}"] += 1
    rows, _ = store_entries(store) if store.exists else ([], [])
    present = {e.id for e in rows if e.kind == "learning"}
    ever, promotions = _history(store)
    learnings = len(present)
    return {
        "exists": store.exists,
        "runs": runs,
        "learnings_surfaced_per_run": round(surfaced / runs, 3) if runs else None,
        "captures": dict(captures),
        "revisions": dict(revisions),
        "repeat_correction_rate": [
            {"week": w, "captures": c["captures"], "repeats": c["repeats"],
             "rate": round(c["repeats"] / c["captures"], 3)} for w, c in sorted(weeks.items())],
        "learnings": learnings,
        "issues": sum(e.kind == "issue" for e in rows),
        "learnings_created": len(ever),
        "learnings_surviving": len(present & ever),
        "learnings_survived": round(len(present & ever) / len(ever), 3) if ever else None,
        "promotions": promotions,
        "capture_rate": None,
        "regressions_prevented": None,
        "retrieval_precision": None,
    }


def iso_week(ts: object) -> str | None:
    """The ISO week ("2026-W07") of a timestamp or date, None when it is not one."""
    try:
        year, week, _ = dt.datetime.fromisoformat(str(ts)).isocalendar()
    except ValueError:
        return None
    return f"{year}-W{week:02d}"


def _history(store: Store) -> tuple[set[str], int]:
    """Learning ids ever added in the store's history (hand edits and reverts included), and how
    many promotions (to an issue, or to the global layer) it records."""
    if not store.exists:
        return set(), 0
    history = id_history(store.path)
    ever = {bid for bid in history.added if bid.startswith("L")}
    promotions = sum(s.startswith(("revise: promote", "promote: move")) for s in history.subjects)
    return ever, promotions
