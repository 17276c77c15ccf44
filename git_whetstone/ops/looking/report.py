"""report (issue 21): one self-contained HTML page of a person's taste, for looking rather than reading.

This module gathers what the page says from what other modules compute (metrics, weights, git
history, compact's findings, the global layer); `report_html` draws it. Nothing here writes to a store.
"""
from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import numpy as np

from ...base.clock import today
from ...base.config import Config
from ...base.errors import RUNTIME, WhetstoneError, shown
from ...base.files import write_atomic
from ...format.layout import GLOBAL, GLOBAL_PREFIX, scope_key
from ...git.history import commits
from ...store.reading import store_entries
from ...format.entry import Entry
from ...index.rows import day_number
from ...store.store import Store, list_skills
from ...store.weight import days_to_retire, strength, weights
from ..upkeep.findings import findings
from .metrics import iso_week, metrics
from .report_html import render
from ..workspace import Workspace

RETIRE_SOON_DAYS = 30  # a learning that falls below the retire threshold within this is "retiring soon"
COMMIT_KINDS = ("capture", "reinforcement", "hand edit", "revert", "other change")
_REINFORCE = re.compile(r"^(capture|revise|promote): reinforce ")
_TOOL_MADE = ("capture:", "revise:", "compact:", "promote:", "import:", "attach:", "sync:", "Merge ")


def report(skill: str | None = None, *, every: bool = False, output: str | None = None,
           config: Config | None = None) -> dict[str, Any]:
    """Write the report of `skill` (or, with `every`, of every skill on one page) to `output`
    (default `<skill>-report.html`, or `whetstone-report.html`, in the current directory)."""
    if every == (skill is not None):
        raise WhetstoneError("give a SKILL or --all")
    ws = Workspace.of(config)
    names = [ws.store(skill, must_exist=True).skill] if skill is not None else \
        [name for name in list_skills(ws.config) if name != GLOBAL]
    target = Path(output if output else f"{names[0] if skill is not None else 'whetstone'}-report.html")
    if target.is_dir() or not target.parent.is_dir():
        raise WhetstoneError(f"cannot write the report to {shown(str(target), 80)}: "
                             f"{'that is a directory' if target.is_dir() else 'its folder does not exist'}")
    page = gather(ws, names, every)
    html = render(page)
    try:
        write_atomic(target, html)
    except OSError as exc:
        raise WhetstoneError(f"cannot write the report to {shown(str(target), 80)}: {exc.strerror or exc}",
                             exit_code=RUNTIME) from None
    return {"path": str(target), "skills": names, "bytes": len(html.encode("utf-8")),
            "learnings": sum(len(s["learnings"]) for s in page["skills"]),
            "issues": sum(len(s["issues"]) for s in page["skills"])}


def gather(ws: Workspace, names: list[str], every: bool = False) -> dict[str, Any]:
    """Everything the page shows, as plain data: one part per skill, and the global layer's
    entries (shown once, as what every skill inherits)."""
    day = today()
    inherits = ws.config.consult_global and names != [GLOBAL]
    layer = ws.store(GLOBAL)
    return {"title": f"whetstone report: {names[0]}" if not every else "whetstone report: every skill",
            "date": day.isoformat(), "every": every,
            "skills": [skill_part(ws, ws.store(name), day) for name in names],
            "global": global_part(layer, day, ws.config) if inherits and layer.exists else None,
            "consult_global": ws.config.consult_global, "is_global": names == [GLOBAL],
            "retire_soon_days": RETIRE_SOON_DAYS,
            "retire_threshold": ws.config.retire_weight_threshold,
            "half_life": ws.config.learnings_half_life_days}


def skill_part(ws: Workspace, store: Store, day: dt.date) -> dict[str, Any]:
    """One skill: its KPIs and trends, its scopes, its history, and what awaits a decision."""
    snap = ws.snapshot(store)
    rows = [snap.entries[i] for i in np.flatnonzero(snap.alive).tolist()]
    kpis = metrics(store.skill, config=ws.config)["skills"][store.skill]
    learnings, issues = entries(store, rows, day, ws.config)
    return {"skill": store.skill, "path": str(store.path), "kpis": kpis,
            "weeks": weekly(kpis["repeat_correction_rate"], {"captures": 0, "repeats": 0, "rate": None}),
            "learnings": learnings, "issues": issues, "scopes": scopes(learnings, issues),
            "history": history(store), "advice": findings(store, snap, ws.config),
            "warnings": list(snap.warnings) + store.warnings}


def global_part(layer: Store, day: dt.date, config: Config) -> dict[str, Any]:
    """The global layer's entries: what recall serves every skill beside its own (a skill's own
    entry that says the same wins)."""
    rows, warnings = store_entries(layer)
    learnings, issues = entries(layer, rows, day, config)
    for item in learnings + issues:
        item["id"] = GLOBAL_PREFIX + item["id"]  # as recall shows them, and revise accepts them
    return {"learnings": learnings, "issues": issues, "warnings": warnings}


def entries(store: Store, rows: list[Entry], day: dt.date, config: Config) -> tuple[list[dict], list[dict]]:
    """Learnings (strongest first, with weight today, its strength before decay and the days left
    until compact would retire it) and issues (by id), each marked when it applies always."""
    learned = [e for e in rows if e.kind == "learning"]
    recurrence = np.array([e.recurrence for e in learned], np.int64)
    seen = np.array([day_number(e.last_seen) for e in learned], np.int64)
    now = weights(recurrence, seen, day, config) if learned else np.zeros(0)
    left = days_to_retire(now, config)
    before = strength(recurrence)
    learnings = [{"id": e.id, "title": e.title, "rule": e.body, "scope": e.scope, "recurrence": e.recurrence,
                  "first_seen": e.first_seen, "last_seen": e.last_seen, "weight": round(float(w), 4),
                  "strength": round(float(s), 4), "retires_in": None if np.isinf(d) else int(d),
                  "always": e.always}
                 for e, w, s, d in zip(learned, now.tolist(), before.tolist(), left.tolist())]
    learnings.sort(key=lambda item: (-item["weight"], int(item["id"][1:])))
    issues = [{"id": e.id, "title": e.title, "rule": e.body, "scope": e.scope, "always": e.always}
              for e in sorted((e for e in rows if e.kind == "issue"), key=lambda e: int(e.id[1:]))]
    return learnings, issues


def scopes(learnings: list[dict], issues: list[dict]) -> list[dict[str, Any]]:
    """Entries grouped by scope (spellings that mean the same are one scope), alphabetically."""
    grouped: dict[str, dict[str, Any]] = {}
    for kind, items in (("issues", issues), ("learnings", learnings)):
        for item in items:
            group = grouped.setdefault(scope_key(item["scope"]), {"scope": item["scope"], "issues": [], "learnings": []})
            group[kind].append(item)
    return [grouped[key] for key in sorted(grouped)]


def weekly(trend: list[dict[str, Any]], blank: dict[str, Any]) -> list[dict[str, Any]]:
    """Weekly counts on a continuous axis of weeks (a quiet week is a gap with the `blank`
    counts, not squeezed out), each week with its Monday."""
    by_week = {item["week"]: item for item in trend}
    if not by_week:
        return []
    mondays = sorted(monday(w) for w in by_week)
    out = []
    for n in range(mondays[0].toordinal(), mondays[-1].toordinal() + 1, 7):
        label = iso_week(dt.date.fromordinal(n).isoformat())
        item = by_week.get(label, {"week": label, **blank})
        out.append({**item, "monday": dt.date.fromordinal(n).isoformat()})
    return out


def monday(week: str) -> dt.date:
    year, number = week.split("-W")
    return dt.date.fromisocalendar(int(year), int(number), 1)


def commit_kind(subject: str) -> str:
    """What a commit did, from the subject whetstone writes (`capture: add L7 (…)`, `revise:
    reinforce L3 …`) or git does (`Revert "…"`); anything else a person committed is a hand edit
    (as is `git whetstone edit`)."""
    if subject.startswith("Revert "):
        return "revert"
    if subject.startswith("capture: add "):
        return "capture"
    if _REINFORCE.match(subject):
        return "reinforcement"
    return "other change" if subject.startswith(_TOOL_MADE) else "hand edit"


def history(store: Store) -> dict[str, Any]:
    """The store's commits by week and kind (for the timeline), and the latest ones in words."""
    log = commits(store.path)
    weeks: dict[str, dict[str, int]] = {}
    totals = dict.fromkeys(COMMIT_KINDS, 0)
    recent = []
    for n, c in enumerate(log):
        kind = commit_kind(c.subject)
        totals[kind] += 1
        week = iso_week(c.date)
        if week:
            counts = weeks.setdefault(week, dict.fromkeys(COMMIT_KINDS, 0))
            counts[kind] += 1
        if n < 30:
            recent.append({"date": c.date[:10], "kind": kind, "subject": c.subject, "commit": c.sha[:10]})
    axis = weekly([{"week": w, **counts} for w, counts in weeks.items()], dict.fromkeys(COMMIT_KINDS, 0))
    return {"weeks": axis, "totals": totals, "recent": recent, "commits": len(log)}
