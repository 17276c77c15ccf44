"""The global layer (SPEC §4): `__global__`, a store recall consults beside the skill's own, and
promoting entries into it, always an explicit human step: a commit in each repository it touches.
"""
from __future__ import annotations

import hashlib
from contextlib import ExitStack
from typing import Any

import numpy as np

from ...base.clock import today
from ...base.config import Config
from ...base.errors import RUNTIME, WhetstoneError, shown
from ...format import edits
from ...format.layout import GLOBAL, GLOBAL_PREFIX
from ...git import runner
from ...format.entry import Entry
from ...semantics.judge import CONTRADICTS, SAME, Groups, judge, triage
from ...store.store import Store, list_skills
from ..writing.attach import create
from ..writing.context import Context, candidate
from ..workspace import Workspace


def promote(skill: str, entry_id: str, always: bool | None = None, *, config: Config | None = None) -> dict[str, Any]:
    """Move one entry of `skill` into the global layer. An entry marked for every task of its skill
    would become a rule for every task of every skill: that takes `always` (true keeps the mark,
    false promotes it without); without it the answer is a question and nothing moves."""
    ws = Workspace.of(config)
    store = ws.store(skill, must_exist=True)
    if store.skill == GLOBAL:
        raise WhetstoneError("that entry is already in the global layer")
    wanted = entry_id.strip().upper() if isinstance(entry_id, str) else ""
    if not wanted or not wanted[0] in "LI" or not wanted[1:].isdigit():
        raise WhetstoneError(f"unknown entry id {shown(entry_id)}: ids look like L3 or I2")
    layer = ws.store(GLOBAL)
    create(layer)
    with layer.lock(), store.lock():  # global first, as promote_cluster does: no lock-order deadlock
        source = Context.open(ws, store)
        entry = source.entry(wanted)
        if entry.always and always is None:
            return {"skill": store.skill, **_ask_always([(entry.id, store.skill)])}
        target = Context.open(ws, layer)
        new_id, similar = _lift(source, target, [(store, entry)], entry, bool(always))
    shown_id = GLOBAL_PREFIX + new_id
    return {"skill": store.skill, "status": "committed", "entry_id": entry.id, "global_id": shown_id,
            "confirmation": f"Whetstone moved {entry.id} of {store.skill} to the global layer as {shown_id} "
                            f"({entry.scope}); every skill's recall now sees it.",
            **({"similar": similar} if similar else {})}


def _ask_always(marked: list[tuple[str, str]]) -> dict[str, Any]:
    """The question a promotion of entries marked `applies: always` ((id, skill) pairs) answers first."""
    said = ", ".join(f"{entry_id} of {skill} applies to every task of {skill}" for entry_id, skill in marked)
    return {"status": "needs_confirmation",
            "prompt": f"{said}; in the global layer it would apply to every task of every skill. Repeat with "
                      f"always=true if it holds for every skill, or always=false to promote it as a rule recalled "
                      f"when its scope matches. Nothing was moved."}


def _lift(source: Context | None, target: Context, members: list[tuple[Store, Entry]],
          lead: Entry, always: bool) -> tuple[str, list[dict[str, Any]]]:
    """Write `lead` (standing for all `members`) into the global store, then remove every member from
    its skill, one commit per repository; a refused commit reverts them all, so nothing is half moved.
    Returns the global id, and the global look-alikes the judge named (a person settles those)."""
    same = None
    judged = target.nearest(lead.body, lead.scope)
    for other, verdict in judged:
        if verdict.relation == CONTRADICTS:
            raise WhetstoneError(f"{lead.id} contradicts the global {GLOBAL_PREFIX}{other.id} ({verdict.reason}); "
                                 f"resolve that first")
        if verdict.relation == SAME:
            same = other if other.kind == lead.kind else None
            break
    similar = [] if same is not None else [
        {**candidate(e, v), "id": GLOBAL_PREFIX + e.id} for e, v in triage(judged).mentioned]
    day = today().isoformat()
    provenance = [f"{day} — promoted from {store.skill} {e.id}" for store, e in members]
    learning = lead.kind == "learning"
    recurrence = sum(e.recurrence for _, e in members) if learning else 1
    where = ", ".join(f"{store.skill} {e.id}" for store, e in members)
    if same is not None:  # the global layer already says it: strengthen that entry, add no copy
        text, block = target.block(same)
        changes = {"recurrence": str(same.recurrence + recurrence), "last_seen": day} if learning else {}
        changed = edits.update_fields(block, changes, provenance)
        if always and not same.always:
            changed = edits.with_always(block, True, changed)
        target.commit(f"promote: reinforce {same.id} ({same.scope}) from {where}\n\n{same.body}\n",
                      {same.path: edits.replace(text, block, changed)})
        new_id = same.id
    else:
        files: dict[str, str | None] = {}
        first = min((e.first_seen for _, e in members if e.first_seen), default=None)
        new_id = target.add_block(lead.kind, lead.body, lead.scope,
                                  [p for _, e in members for p in e.provenance] + provenance, files,
                                  recurrence=recurrence, first_seen=first,
                                  always=always)
        target.commit(f"promote: add {new_id} ({lead.scope}) from {where}\n\n{lead.body}\n", files)
    done: list[Store] = []
    try:
        for store, e in members:
            ctx = source if source is not None and source.store is store else Context.open(target.workspace, store)
            text, block = ctx.block(e)
            ctx.commit(f"promote: move {e.id} ({e.scope}) to the global layer as {GLOBAL_PREFIX}{new_id}\n\n"
                       f"{e.body}\n", {e.path: edits.remove(text, block) or None})
            done.append(store)
    except BaseException as exc:
        # undo every step already taken, newest first, so nothing is left half moved
        for store in [*reversed(done), target.store]:
            runner.revert_head(store.path)
        reason = exc.message if isinstance(exc, WhetstoneError) else f"{type(exc).__name__}: {exc}"
        raise WhetstoneError(f"promotion stopped and undone in every store: {reason}", exit_code=RUNTIME) from None
    return new_id, similar


def clusters(ws: Workspace) -> list[dict[str, Any]]:
    """Preferences that at least `global_skill_count` skills hold in the same words (as the judge
    sees it), each with a stable id made from its members."""
    config = ws.config
    rows: list[tuple[str, Entry]] = []
    vectors = []
    for name in list_skills(config):
        if name == GLOBAL:
            continue
        snap = ws.snapshot(ws.store(name))
        for i in np.flatnonzero(snap.alive):
            rows.append((name, snap.entries[i]))
            vectors.append(snap.vectors[i])
    if not rows:
        return []
    matrix = np.stack(vectors)
    sims = matrix @ matrix.T
    groups = Groups(len(rows))
    for a, b in np.argwhere(np.triu(sims >= config.threshold("dedup"), 1)):
        (sa, ea), (sb, eb) = rows[a], rows[b]
        # across skills a scope's name differs from skill to skill: the rule's own words decide
        if sa != sb and ea.kind == eb.kind and \
                judge(eb.body, ea.body, float(sims[a, b]), config, same_scope=True).relation == SAME:
            groups.union(int(a), int(b))
    found = []
    for group in groups.groups():
        members = [rows[i] for i in group]
        skills = sorted({s for s, _ in members})
        if len(skills) < config.global_skill_count:
            continue
        key = "|".join(sorted(f"{s}:{e.id}" for s, e in members))
        lead = max(members, key=lambda m: (m[1].recurrence, -int(m[1].id[1:])))[1]
        found.append({"id": "C-" + hashlib.sha1(key.encode()).hexdigest()[:8], "skills": skills, "kind": lead.kind,
                      "rule": lead.body, "scope": lead.scope,
                      "members": [{"skill": s, "id": e.id, "rule": e.body, "scope": e.scope} for s, e in members]})
    return sorted(found, key=lambda c: (-len(c["skills"]), c["id"]))


def promote_cluster(cluster_id: str, always: bool | None = None, *, config: Config | None = None) -> dict[str, Any]:
    """Enact one reported cluster: one global entry for all of its members, removed from each skill;
    members marked for every task ask `always` first, as `promote` does."""
    ws = Workspace.of(config)
    found = {c["id"]: c for c in clusters(ws)}
    wanted = cluster_id.strip() if isinstance(cluster_id, str) else ""
    if wanted not in found:
        raise WhetstoneError(f"unknown cluster {shown(cluster_id)}: `git whetstone compact --all` lists the current ones")
    cluster = found[wanted]
    layer = ws.store(GLOBAL)
    create(layer)
    stores = {name: ws.store(name) for name in cluster["skills"]}
    with ExitStack() as locks:
        for store in (layer, *stores.values()):
            locks.enter_context(store.lock())
        members = []
        for item in cluster["members"]:
            store = stores[item["skill"]]
            snap = ws.snapshot(store)
            if item["id"] not in snap.by_id:
                raise WhetstoneError(f"{item['skill']} {item['id']} changed since the cluster was found; "
                                     f"run compact --all again")
            members.append((store, snap.entries[snap.by_id[item["id"]]]))
        marked = [(e.id, store.skill) for store, e in members if e.always]
        if marked and always is None:
            return {"skill": cluster["skills"][0], **_ask_always(marked), "cluster": wanted}
        lead = max((e for _, e in members), key=lambda e: (e.recurrence, -int(e.id[1:])))
        new_id, similar = _lift(None, Context.open(ws, layer), members, lead, bool(always))
    shown_id = GLOBAL_PREFIX + new_id
    return {"cluster": wanted, "status": "committed", "global_id": shown_id, "skills": cluster["skills"],
            "confirmation": f"Whetstone made cluster {wanted} the global {shown_id}, removed from "
                            f"{', '.join(cluster['skills'])}.", **({"similar": similar} if similar else {})}
