"""metrics (SPEC §4): is the loop working? KPIs from events.jsonl and the store's git history.

Reporting only. The three labeled KPIs (capture rate, regressions prevented, retrieval precision)
need a hand-labeled set and are `null` at run time by design.
"""
from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from typing import Any

from . import events
from .browse import entries
from .config import Config, load
from .store import Store, list_skills

LABELED_NOTE = ("capture_rate, regressions_prevented and retrieval_precision need a hand-labeled set; "
                "they are null at run time by design")


def metrics(skill: str | None = None, *, config: Config | None = None) -> dict[str, Any]:
    """Per-skill KPIs for one skill, or for every skill under the store root."""
    config = config or load()
    names = [Store.open(config, skill).skill] if skill is not None else list_skills(config)
    return {"skills": {name: _one(Store.open(config, name)) for name in names}, "note": LABELED_NOTE}


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
            week = _week(event.get("ts"))
            if week and status in ("committed", "reinforced", "noop"):
                weeks.setdefault(week, Counter())["captures"] += 1
                if status in ("reinforced", "noop"):
                    weeks[week]["repeats"] += 1
        elif kind == "revise":
            revisions[f"{event.get('action')}:{event.get('status')}"] += 1
    rows, _ = entries(store) if store.exists else ([], [])
    learnings = sum(e.kind == "learning" for e in rows)
    created = _minted(store)
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
        "learnings_created": created,
        "learnings_survived": round(learnings / created, 3) if created else None,
        "capture_rate": None,
        "regressions_prevented": None,
        "retrieval_precision": None,
    }


def _week(ts: object) -> str | None:
    try:
        year, week, _ = dt.datetime.fromisoformat(str(ts)).isocalendar()
    except ValueError:
        return None
    return f"{year}-W{week:02d}"


def _minted(store: Store) -> int:
    """Learning ids minted so far (next_ids.json counts them; ids are never reused)."""
    try:
        return max(0, int(json.loads((store.path / "next_ids.json").read_text())["learning"]) - 1)
    except (OSError, ValueError, KeyError, TypeError):
        return 0
