"""compact (SPEC §4): the tidy-up a person runs on purpose, never an agent mid-task.

The structural pass (`plan_of`) is one commit that lists every change, so one `git revert` undoes
it, and running it twice changes nothing the second time. The behavioral pass (`findings`) only reports.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ...base.clock import today
from ...base.config import Config
from ...base.errors import RUNTIME, WhetstoneError
from ...base.files import write_atomic
from ...format import blocks, edits
from ...format.entry import Entry, differs
from ...format.layout import scope_key
from ...index.snapshot import Snapshot
from ...semantics.judge import SAME, Groups, judge
from ...semantics.words import name_words
from ...store.store import Store, list_skills
from ...store.weight import weight
from .findings import REPORT, findings, render_report
from .global_layer import clusters
from ..workspace import Workspace

ESTIMATE_FROM = 5_000        # entries from which compact says how long it will take
RATE = "whetstone-compact-rate.json"  # in .git: the last runs' seconds per 1,000 entries
DEFAULT_RATE = {"dry": 0.12, "apply": 0.45}  # seconds per 1,000 entries on a 2-core machine, at 100,000


def compact(skill: str, *, dry_run: bool = False, config: Config | None = None,
            notice: Callable[[str], None] | None = None,
            progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Compact one skill's store; with `dry_run`, only say what the structural pass would do.
    For a big store, `notice` is told how long it will take before the work starts (from the last
    run's pace, if any), and `progress` is called with (scopes done, scopes in all) as it goes."""
    ws = Workspace.of(config)
    config = ws.config
    store = ws.store(skill, must_exist=True)
    started = time.monotonic()
    with store.lock():
        snap = ws.snapshot(store)
        if notice is not None and snap.count >= ESTIMATE_FROM:
            notice(estimate(store, snap.count, len(snap.scopes), dry_run))
        plan = plan_of(snap, config, progress)
        committed = bool(plan.changes) and not dry_run
        if committed:
            files = _apply(store, snap, plan)
            lines = "\n".join(f"- {c}" for c in plan.changes)
            store.write_and_commit(f"compact: {len(plan.changes)} changes\n\n{lines}\n",
                                   {store.path / rel: text for rel, text in files.items()})
            snap = ws.snapshot(store)
    report = findings(store, snap, config)
    _remember_pace(store, snap.count, time.monotonic() - started, not committed)
    if not dry_run:
        (store.path / REPORT).write_text(render_report(store.skill, plan.changes, report), encoding="utf-8")
    return {"skill": store.skill, "dry_run": dry_run, "committed": committed, "changes": plan.changes,
            "report": report, "warnings": list(snap.warnings) + store.warnings}


def compact_all(*, dry_run: bool = False, config: Config | None = None) -> dict[str, Any]:
    """Compact every skill, then report preferences shared by several skills as global candidates
    (see `global_layer.clusters`). Writes nothing global."""
    ws = Workspace.of(config)
    # each skill's workspace takes this configuration, and the embedder is one per process
    results = [compact(name, dry_run=dry_run, config=ws.config) for name in list_skills(ws.config)]
    return {"skills": results, "clusters": clusters(ws)}


def estimate(store: Store, entries: int, scopes: int, dry_run: bool) -> str:
    """'compacting 100,000 entries in 10,000 scopes: about 8 s', from the last run's pace."""
    kind = "dry" if dry_run else "apply"
    try:
        rate = float(json.loads((store.path / ".git" / RATE).read_bytes())[kind])
    except (OSError, ValueError, KeyError, TypeError):
        rate = DEFAULT_RATE[kind]
    seconds = max(1, round(rate * entries / 1000))
    return (f"{'planning a compaction of' if dry_run else 'compacting'} {entries:,} entries in {scopes:,} scopes: "
            f"about {seconds} s")


def _remember_pace(store: Store, entries: int, seconds: float, dry_run: bool) -> None:
    if entries < ESTIMATE_FROM:
        return
    path = store.path / ".git" / RATE
    try:
        rates = json.loads(path.read_bytes())
        rates = rates if isinstance(rates, dict) else {}
    except (OSError, ValueError):
        rates = {}
    rates["dry" if dry_run else "apply"] = round(seconds * 1000 / entries, 4)
    try:
        write_atomic(path, json.dumps(rates))
    except OSError:
        pass  # only an estimate


@dataclass
class Plan:
    """What the structural pass changes: one line per change (the commit message lists them), the
    entries rewritten (id → new scope, merged fields, provenance to add) and those removed (id →
    why)."""

    changes: list[str]
    updates: dict[str, dict[str, Any]]
    removed: dict[str, str]


def plan_of(snap: Snapshot, config: Config, progress: Callable[[int, int], None] | None = None) -> Plan:
    """What to change: scopes named alike merged (the most used spelling wins), entries the judge is
    sure are one rule merged into the oldest, learnings decayed below `retire_weight_threshold`
    retired (never issues, nor rules for every task); entries to rewrite, to remove, and why."""
    day = today()
    alive = np.flatnonzero(snap.alive).tolist()
    every = snap.entries
    entries = {i: every[i] for i in alive}
    changes: list[str] = []
    scope_of: dict[int, str] = {i: e.scope for i, e in entries.items()}  # the scope each entry ends in
    updates: dict[str, dict[str, Any]] = {}  # id -> {"scope": …, "fields": {…}, "provenance": [...]}
    removed: dict[str, str] = {}             # id -> why
    id_key = snap.id_key.tolist()

    # 1. scopes whose names are the same after normalisation (case, plurals, word order,
    # punctuation), per kind: one spelling, one file. Names that differ in a word, a value among
    # them (light / dark, 2 / 3), never merge: scopes only close in meaning are advice (`similar_scopes`).
    members: dict[int, list[int]] = {}
    for i, n in zip(alive, snap.scope_of[alive].tolist()):
        members.setdefault(n, []).append(i)
    for kind in ("learning", "issue"):
        numbers = [n for n in sorted(members) if snap.scopes[n][0] == kind]
        named: dict[tuple[str, ...], list[int]] = {}  # "currency format" and "Formats, currency" are one
        for n in numbers:
            named.setdefault(name_words(snap.scopes[n][2]), []).append(n)
        for group in sorted(named.values(), key=lambda g: len(g) == 1):  # (merges first, as listed)
            rows = sorted((i for n in group for i in members[n]), key=id_key.__getitem__)
            # the scope with the most entries wins, written as most of its entries write it
            # (ties: as the oldest entry does)
            by_key: dict[str, list[int]] = {}
            for i in rows:
                by_key.setdefault(scope_key(entries[i].scope), []).append(i)
            chosen = max(by_key.values(), key=len)
            spellings = [entries[i].scope for i in chosen]
            canonical = max(dict.fromkeys(spellings), key=spellings.count)
            others = sorted({entries[i].scope for i in rows} - {canonical})
            if others:
                changes.append(f"merge scope{'s' if len(others) > 1 else ''} "
                               f"{', '.join(repr(s) for s in others)} into '{canonical}' ({kind}s)")
            for i in rows:
                scope_of[i] = canonical
                if entries[i].scope != canonical:
                    updates.setdefault(entries[i].id, {})["scope"] = canonical

    # 2. duplicates inside each (merged) scope: merged into the oldest
    by_scope: dict[tuple[str, str], list[int]] = {}
    for i, e in entries.items():
        by_scope.setdefault((e.kind, scope_key(scope_of[i])), []).append(i)
    for done, ((kind, _), rows) in enumerate(sorted(by_scope.items()), 1):
        if progress is not None and (done % 256 == 0 or done == len(by_scope)):
            progress(done, len(by_scope))
        if len(rows) < 2:
            continue
        rows.sort(key=id_key.__getitem__)
        for group in _duplicates(snap, config, entries, rows):
            keeper, merged = entries[rows[group[0]]], [entries[rows[g]] for g in group[1:]]
            update = updates.setdefault(keeper.id, {})
            provenance = [p for e in merged for p in e.provenance]
            provenance.append(f"{day.isoformat()} — compact merged {', '.join(e.id for e in merged)} into {keeper.id}")
            update["provenance"] = provenance
            if any(e.always for e in merged) and not keeper.always:
                update["always"] = True  # a rule one copy said holds for every task still does
            if kind == "learning":
                group_entries = [keeper, *merged]
                update["fields"] = {
                    "recurrence": str(sum(e.recurrence for e in group_entries)),
                    "first_seen": min(e.first_seen for e in group_entries if e.first_seen),
                    "last_seen": max(e.last_seen for e in group_entries if e.last_seen),
                }
            for e in merged:
                removed[e.id] = f"merged into {keeper.id}"
                updates.pop(e.id, None)
            changes.append(f"merge {', '.join(e.id for e in merged)} into {keeper.id} ({scope_of[rows[group[0]]]})")

    # 3. learnings that decayed away (weights use the merged fields; the weight as shown, rounded)
    for i in [i for i, e in entries.items() if e.kind == "learning" and e.id not in removed and not e.always]:
        e = entries[i]
        fields = updates.get(e.id, {}).get("fields", {})
        w = weight(int(fields.get("recurrence", e.recurrence)), fields.get("last_seen", e.last_seen), day, config)
        if w < config.retire_weight_threshold:
            removed[e.id] = f"weight {w:.3f} below {config.retire_weight_threshold}"
            updates.pop(e.id, None)
            changes.append(f"retire {e.id} ({e.scope}): weight {w:.3f} < {config.retire_weight_threshold:g}")
    return Plan(changes, updates, removed)


def _duplicates(snap: Snapshot, config: Config, entries: dict[int, Entry], rows: list[int]) -> list[list[int]]:
    """The groups of one scope's rows (positions in `rows`, sorted by id) that the judge is sure
    are one rule: only a pair at the dedup bar can be, and the caller never said both hold."""
    sims = snap.vectors[rows] @ snap.vectors[rows].T
    groups = Groups(len(rows))
    for a, b in np.argwhere(np.triu(sims >= config.threshold("dedup"), 1)).tolist():
        old, new = entries[rows[a]], entries[rows[b]]
        if not differs(old, new) and judge(new.body, old.body, float(sims[a, b]), config, same_scope=True).relation == SAME:
            groups.union(a, b)
    return groups.groups()


def _apply(store: Store, snap: Snapshot, plan: Plan) -> dict[str, str | None]:
    """The new text of every file the plan touches (None: delete the file): each file parsed once,
    its blocks edited from the last to the first (so no edit moves a block not yet edited), then
    the blocks moving in appended."""
    by_id = {snap.entries[i].id: snap.entries[i] for i in np.flatnonzero(snap.alive).tolist()}
    home: dict[tuple[str, str], str] = {}  # (kind, scope key) -> the file its entries end in
    for e in by_id.values():
        update = plan.updates.get(e.id, {})
        if update.get("scope", e.scope) == e.scope and e.id not in plan.removed:
            home.setdefault((e.kind, scope_key(e.scope)), e.path)
    changes: dict[str, dict[str, str | None]] = {}  # file -> id -> its new source (None: out of the file)
    arriving: dict[str, list[str]] = {}
    for entry_id in plan.removed:
        changes.setdefault(by_id[entry_id].path, {})[entry_id] = None
    texts: dict[str, str] = {}
    parsed: dict[str, dict[str, blocks.Block]] = {}

    def block(e: Entry) -> blocks.Block:
        if e.path not in parsed:
            path = store.path / e.path
            texts[e.path] = path.read_text(encoding="utf-8") if path.exists() else ""
            found = blocks.parse(texts[e.path], e.path)
            if found.errors:
                raise WhetstoneError(f"{e.path} changed or does not validate; run compact again", exit_code=RUNTIME)
            parsed[e.path] = {b.id: b for b in reversed(found.blocks)}  # (the first of an id twice: the live one)
        if e.id not in parsed[e.path]:
            raise WhetstoneError(f"{e.path} changed since it was read; run compact again", exit_code=RUNTIME)
        return parsed[e.path][e.id]

    for entry_id, update in plan.updates.items():
        e = by_id[entry_id]
        source = block(e)
        fields = dict(update.get("fields", {}))
        scope = update.get("scope", e.scope)
        if scope != e.scope:
            fields["scope"] = scope
        new = edits.update_fields(source, fields, update.get("provenance"))
        if update.get("always"):
            new = edits.with_always(source, True, new)
        target = home.setdefault((e.kind, scope_key(scope)), e.path)
        if target == e.path:
            changes.setdefault(e.path, {})[entry_id] = new
        else:
            changes.setdefault(e.path, {})[entry_id] = None
            arriving.setdefault(target, []).append(new.rstrip("\r\n") + "\n")
    out: dict[str, str | None] = {}
    for rel, changed in changes.items():
        located = [block(by_id[entry_id]) for entry_id in changed]  # (the file parsed, once)
        text = texts[rel]
        for b in sorted(located, key=lambda b: -b.start):
            text = edits.remove(text, b) if changed[b.id] is None else edits.replace(text, b, changed[b.id])
        out[rel] = text
    for rel, added in arriving.items():
        if rel not in out:
            path = store.path / rel
            out[rel] = path.read_text(encoding="utf-8") if path.exists() else ""
        out[rel] = edits.append_all(out[rel] or "", added)
    return {rel: text if text and text.strip() else None for rel, text in out.items()}
