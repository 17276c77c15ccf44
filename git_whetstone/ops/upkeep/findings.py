"""compact's behavioral pass (SPEC §4): what it advises and writes nothing for, from events.jsonl
and the rules themselves; `render_report` writes it as the git-ignored compact-report.md.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np

from ...base.clock import today
from ...base.config import Config
from ...format.entry import differs
from ...format.layout import GLOBAL_PREFIX
from ...index.snapshot import Snapshot
from ...semantics.judge import CONTRADICTS, LIKELY, judge, may_oppose, read
from ...semantics.words import content_words, name_words
from ...store import events
from ...store.store import Store

REPORT = "compact-report.md"
HARDEN_WINDOW_DAYS = 90      # reinforced this often within this window: worth making an issue
CHURN_WINDOW_DAYS = 30       # captured, then weakened or removed within this window: churn
STALE_DAYS = 90              # never surfaced by recall for this long: stale
ALWAYS_WINDOW_DAYS = 90      # recalled for many different tasks within this window: a rule for every task?
ALWAYS_MIN_TASKS = 5         # ... for at least this many different intents,
ALWAYS_SHARE = 0.5           # ... making at least this share of the different intents recalled
ALWAYS_MIN_RUNS = 3          # or captured again in this many different runs (tasks)
LOOK_ALIKES_SHOWN = 200      # pairs a report lists at most (a person reads them)
SIMILAR_SCOPES_SHOWN = 50    # scope pairs a report lists at most


def findings(store: Store, snap: Snapshot, config: Config) -> dict[str, list[dict[str, Any]]]:
    """Learnings worth hardening, rules that may hold for every task (recalled for most different
    tasks lately, or said again in several runs), scopes with churn, stale learnings, conflicts
    never resolved, look-alike pairs the judge could not settle and scopes close in meaning."""
    day = today()
    log = list(events.read(store.path))

    def when(event: dict[str, Any]) -> dt.date | None:
        try:
            return dt.datetime.fromisoformat(str(event.get("ts"))).date()
        except ValueError:
            return None

    live_rows = np.flatnonzero(snap.alive)
    entries = list(snap.entries)
    live = {entries[i].id: entries[i] for i in live_rows.tolist()}
    harden, churn, stale, unresolved = [], [], [], []
    intents: set[str] = set()                # the different tasks recalled lately (by their content words)
    recalled_for: dict[str, set[str]] = {}   # entry id -> the different tasks it was recalled for
    repeated_in: dict[str, set[str]] = {}    # entry id -> the runs whose capture repeated it
    reinforced: dict[str, int] = {}
    surfaced: dict[str, dt.date] = {}
    scope_of_capture: dict[str, str] = {}
    captured_on: dict[str, dt.date] = {}
    for event in log:
        on = when(event)
        if on is None:
            continue
        kind = event.get("event")
        if kind == "capture":
            entry_id = event.get("entry_id")
            if entry_id and event.get("status") in ("reinforced", "noop") and (day - on).days <= ALWAYS_WINDOW_DAYS:
                repeated_in.setdefault(str(entry_id), set()).add(str(event.get("run_id") or event.get("ts")))
            if entry_id and event.get("status") == "committed":
                scope_of_capture[entry_id], captured_on[entry_id] = str(event.get("scope")), on
            if entry_id and event.get("status") == "reinforced" and (day - on).days <= HARDEN_WINDOW_DAYS:
                reinforced[entry_id] = reinforced.get(entry_id, 0) + 1
        elif kind == "revise" and event.get("action") == "reinforce" and event.get("status") == "committed":
            if (day - on).days <= HARDEN_WINDOW_DAYS:
                reinforced[str(event.get("entry_id"))] = reinforced.get(str(event.get("entry_id")), 0) + 1
        elif kind == "recall":
            for entry_id in event.get("learnings") or []:
                surfaced[entry_id] = max(surfaced.get(entry_id, on), on)
            task = " ".join(sorted(set(content_words(str(event.get("intent") or "")))))
            if task and (day - on).days <= ALWAYS_WINDOW_DAYS:
                intents.add(task)
                for entry_id in [*(event.get("learnings") or []), *(event.get("issues") or [])]:
                    recalled_for.setdefault(str(entry_id), set()).add(task)
    for entry_id, count in sorted(reinforced.items()):
        entry = live.get(entry_id)
        if entry is not None and entry.kind == "learning" and count >= 2 and \
                entry.recurrence >= config.promotion_threshold - 1:
            harden.append({"id": entry_id, "scope": entry.scope, "recurrence": entry.recurrence,
                           "reinforced_recently": count, "rule": entry.body})
    churned: dict[str, list[str]] = {}
    for event in log:
        on = when(event)
        entry_id = str(event.get("entry_id"))
        if on and event.get("event") == "revise" and event.get("action") in ("weaken", "remove") \
                and event.get("status") == "committed" and entry_id in captured_on \
                and 0 <= (on - captured_on[entry_id]).days <= CHURN_WINDOW_DAYS:
            churned.setdefault(scope_of_capture[entry_id], []).append(entry_id)
    for scope, ids in sorted(churned.items()):
        churn.append({"scope": scope, "entries": sorted(set(ids))})
    # by (prefix, number), issues first: sorted over the live rows' id keys (number × 2, + 1 for
    # an issue), not by a key made of each of 100,000 ids
    keys_of = snap.id_key[live_rows]
    ids = [entries[i].id for i in live_rows[np.lexsort((keys_of >> 1, 1 - (keys_of & 1)))].tolist()]
    in_order = [(entry_id, live[entry_id]) for entry_id in ids]
    ages: dict[str, int] = {}  # first_seen -> days since (a store's dates repeat: a few hundred days)
    for entry_id, entry in in_order:
        if entry.kind != "learning" or not entry.first_seen:
            continue
        seen = surfaced.get(entry_id)
        age = ages.get(entry.first_seen)
        if age is None:
            age = ages[entry.first_seen] = (day - dt.date.fromisoformat(entry.first_seen)).days
        if age >= STALE_DAYS and (seen is None or (day - seen).days >= STALE_DAYS):
            stale.append({"id": entry_id, "scope": entry.scope,
                          "last_surfaced": seen.isoformat() if seen else None})
    for event in log:
        other = event.get("conflicts_with")
        if event.get("event") == "capture" and event.get("status") == "conflict" and other:
            local = other if not str(other).startswith(GLOBAL_PREFIX) else None
            if local is None or local in live:
                unresolved.append({"date": str(event.get("ts"))[:10], "conflicts_with": other,
                                   "scope": event.get("scope")})
    always = []
    for entry_id, entry in in_order:
        if entry.always:
            continue
        tasks, runs = len(recalled_for.get(entry_id, ())), len(repeated_in.get(entry_id, ()))
        if tasks >= ALWAYS_MIN_TASKS and tasks >= ALWAYS_SHARE * len(intents):
            always.append({"id": entry_id, "scope": entry.scope, "why": f"recalled for {tasks} of the "
                           f"{len(intents)} different tasks of the last {ALWAYS_WINDOW_DAYS} days", "rule": entry.body})
        elif runs >= ALWAYS_MIN_RUNS:
            always.append({"id": entry_id, "scope": entry.scope, "why": f"said again in {runs} different runs "
                           f"in the last {ALWAYS_WINDOW_DAYS} days", "rule": entry.body})
    return {"harden": harden, "always": always, "churn": churn, "stale": stale, "unresolved_conflicts": unresolved,
            "look_alikes": look_alikes(snap, config), "similar_scopes": similar_scopes(snap, config)}


def look_alikes(snap: Snapshot, config: Config) -> list[dict[str, Any]]:
    """Pairs in one scope the judge finds contradicting, or likely one rule or opposites, for a person
    to settle (never a `differs_from` pair); at most `LOOK_ALIKES_SHOWN`, contradictions first, then
    most alike."""
    entries = snap.entries
    floor, ask = config.threshold("candidate"), config.threshold("ask")
    found = []
    alive = np.flatnonzero(snap.alive).tolist()
    id_key = snap.id_key.tolist()
    runs: dict[str, list[int]] = {}  # scope key -> its rows, learnings and issues alike
    for i, n in zip(alive, snap.scope_of[alive].tolist()):
        runs.setdefault(snap.scopes[n][1], []).append(i)
    for run in runs.values():
        if len(run) < 2:
            continue
        run.sort(key=id_key.__getitem__)
        sims = snap.vectors[run] @ snap.vectors[run].T
        texts = [entries[i] for i in run]
        close = np.triu(sims >= floor, 1)
        if not close.any():
            continue
        close &= (sims >= ask) | may_oppose([read(e.body) for e in texts])
        for a, b in np.argwhere(close).tolist():
            old, new = texts[a], texts[b]
            if differs(old, new):
                continue
            verdict = judge(new.body, old.body, float(sims[a, b]), config, same_scope=True)
            if verdict.relation in (CONTRADICTS, LIKELY):
                found.append({"ids": [old.id, new.id], "relation": verdict.relation,
                              "similarity": round(verdict.similarity, 3), "reason": verdict.reason,
                              "rules": [old.body, new.body], "scope": old.scope})
    found.sort(key=lambda f: (f["relation"] != CONTRADICTS, -f["similarity"], f["ids"]))
    return found[:LOOK_ALIKES_SHOWN]


def similar_scopes(snap: Snapshot, config: Config) -> list[dict[str, Any]]:
    """Scopes of one kind whose phrases are close (the `scope_merge` cosine) but whose names are not
    the same: compact does not merge them (one may be the other's opposite), a person may, with
    revise --scope. At most `SIMILAR_SCOPES_SHOWN`, closest first."""
    found = []
    used = np.unique(snap.scope_of[snap.alive]).tolist()
    for kind in ("learning", "issue"):
        numbers = [n for n in used if snap.scopes[n][0] == kind]
        if len(numbers) < 2:
            continue
        phrases = snap.phrases[numbers]
        sims = phrases @ phrases.T
        for a, b in np.argwhere(np.triu(sims >= config.threshold("scope_merge"), 1)).tolist():
            one, two = snap.scopes[numbers[a]][2], snap.scopes[numbers[b]][2]
            if name_words(one) != name_words(two):
                found.append({"scopes": sorted([one, two]), "kind": kind,
                              "similarity": round(float(sims[a, b]), 3)})
    found.sort(key=lambda f: (-f["similarity"], f["scopes"]))
    return found[:SIMILAR_SCOPES_SHOWN]


def render_report(skill: str, changes: list[str], report: dict[str, list[dict[str, Any]]]) -> str:
    lines = [f"# compact report for {skill} ({today().isoformat()})", "", "## Structural changes", ""]
    lines += [f"- {c}" for c in changes] or ["- none"]
    titles = {"harden": f"Learnings worth hardening into issues (reinforced in the last {HARDEN_WINDOW_DAYS} days)",
              "always": "Rules that may hold for every task (mark with git whetstone revise SKILL ID --always)",
              "churn": f"Scopes with capture churn (weakened or removed within {CHURN_WINDOW_DAYS} days)",
              "stale": f"Learnings not surfaced by recall for {STALE_DAYS} days",
              "unresolved_conflicts": "Conflicts never resolved",
              "look_alikes": "Possible duplicates and contradictions (the judge was not sure; compact merged none)",
              "similar_scopes": "Scopes close in meaning whose names differ (compact merged none: move entries "
                                "with git whetstone revise SKILL ID --scope if they mean the same)"}
    for key, title in titles.items():
        lines += ["", f"## {title}", ""]
        items = report.get(key, [])
        if not items:
            lines.append("- none")
        for item in items:
            if key == "similar_scopes":
                lines.append(f"- '{item['scopes'][0]}' / '{item['scopes'][1]}' ({item['kind']}s, similarity "
                             f"{item['similarity']})")
                continue
            if key == "look_alikes":
                what = "contradict each other" if item["relation"] == CONTRADICTS else "may be one rule, or opposed"
                lines.append(f"- {' / '.join(item['ids'])} ({item['scope']}, similarity {item['similarity']}): {what}"
                             + (f" ({item['reason']})" if item["reason"] else "")
                             + " — " + " / ".join(f'"{rule}"' for rule in item["rules"]))
                continue
            lines.append("- " + ", ".join(f"{k}: {v}" for k, v in item.items() if k != "rule")
                         + (f" — {item['rule']}" if "rule" in item else ""))
    lines += ["", "Advisory only: enact a finding with `git whetstone revise` (reinforce, remove, or reword one of "
                  "a pair), or leave it.", ""]
    return "\n".join(lines)
