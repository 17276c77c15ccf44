"""capture (SPEC §4): turning a correction into markdown, one git commit per change.

A capture runs under the store's write lock and judges the new text against what is stored
first: a near-duplicate learning is reinforced, a near-duplicate issue is a no-op, a
contradiction is reported and nothing is written. How much is asked before writing depends on
`supervision`: `autonomous` commits routine captures, `balanced` asks when a capture is ambiguous
(grey-zone similarity), `supervised` asks before every write.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..base.config import Config
from ..format import blocks
from ..format.layout import GLOBAL, GLOBAL_PREFIX
from ..semantics.judge import contradiction
from ..store import events
from .attach import create
from .context import Context
from .workspace import Workspace
from .inputs import answer, clean_body, clean_provenance, clean_run_id, clean_scope, polarity_kind, stamp
from .writes import Outcome, ask, brief, harden, reinforce


def capture(skill: str, polarity: str, body: str, scope: str, provenance: str = "", run_id: str | None = None,
            confirm: bool | str | None = None, *, config: Config | None = None) -> dict[str, Any]:
    """Record a correction as a learning (taste) or an issue (always/never rule), or reinforce the
    entry that already says it. Returns `{status, entry_id, recurrence, confirmation, …}`."""
    ws = Workspace.of(config)
    kind = polarity_kind(polarity)
    body, scope = clean_body(body), clean_scope(scope)
    said_by = stamp(clean_provenance(provenance))
    run_id, said = clean_run_id(run_id), answer(confirm)
    store = ws.store(skill)
    create(store)
    with store.lock():
        ctx = Context.open(ws, store)
        outcome = _global_conflict(ctx, body, said) or _capture(ctx, kind, body, scope, said_by, said)
        warnings = list(ctx.snap.warnings) + store.warnings
    result = outcome.json(skill=store.skill, status=None, entry_id=None, recurrence=None, confirmation=None,
                          polarity=kind, scope=scope, run_id=run_id, warnings=warnings)
    events.append(store.path, "capture", run_id=run_id, status=outcome.status, entry_id=outcome.entry_id,
                  polarity=kind, scope=scope, conflicts_with=(outcome.extra.get("conflicts_with") or {}).get("id"))
    return result


def _global_conflict(ctx: Context, body: str, said: str | None) -> Outcome | None:
    """A new rule that a global issue forbids is a conflict too (resolved in the global layer)."""
    config = ctx.config
    if not config.consult_global or ctx.store.skill == GLOBAL or said == "new":
        return None
    layer = ctx.workspace.store(GLOBAL)
    if not layer.exists:
        return None
    snap = ctx.workspace.snapshot(layer)
    issues = np.flatnonzero(snap.alive & ~snap.is_learning)
    if not len(issues):
        return None
    sims = snap.vectors[issues] @ ctx.embedder.embed([body])[0]
    for at in np.argsort(-sims)[:10]:
        old = snap.entries[issues[at]]
        reason = contradiction(body, old.body, float(sims[at]), config)
        if reason:
            shown_id = GLOBAL_PREFIX + old.id
            return Outcome("conflict", extra={
                "conflicts_with": {"id": shown_id, "rule": old.body, "scope": old.scope}, "reason": reason,
                "prompt": (f"This contradicts the global issue {shown_id} ({old.scope}): "
                           f"\"{blocks.derive_title(old.body)}\" — {reason}. Nothing was written. Ask the user "
                           f"which holds: revise {shown_id} if the global rule should change, or repeat the "
                           f"capture with confirm='new' to keep this skill's exception.")})
    return None


def _capture(ctx: Context, kind: str, body: str, scope: str, said_by: str, said: str | None) -> Outcome:
    config = ctx.config
    # The closest decisive entry wins: an exact repeat of one rule is not a conflict with another.
    decisive = grey = None
    for entry, verdict in ctx.nearest(body, scope):
        if verdict.relation in ("duplicate", "conflict"):
            decisive = (entry, verdict)
            break
        if grey is None and verdict.relation == "similar" and entry.kind == kind:
            grey = (entry, verdict)
    conflict = decisive if decisive and decisive[1].relation == "conflict" else None
    same = decisive if decisive and decisive[1].relation == "duplicate" else None

    if conflict and said != "replace":
        old, verdict = conflict
        return Outcome("conflict", extra={"conflicts_with": brief(old), "reason": verdict.reason, "prompt": (
            f"This contradicts {old.id} ({old.scope}): \"{blocks.derive_title(old.body)}\" — {verdict.reason}. "
            f"Nothing was written. Ask the user which holds: to replace {old.id} with the new rule, repeat the "
            f"capture with confirm='replace'; to change {old.id}, use revise.")})
    if same and said not in ("new", "replace"):
        old, verdict = same
        if old.kind == "issue":
            return Outcome("noop", old.id, confirmation=f"Whetstone already has this as {old.id} ({old.scope}); "
                                                        f"nothing changed.")
        if kind == "issue":  # an always/never rule that a learning already states softly
            if said != "yes":
                return ask(f"This hardens learning {old.id} (\"{blocks.derive_title(old.body)}\") into a "
                           f"mandatory issue. Repeat with confirm='yes' to promote {old.id}, or confirm='new' to "
                           f"keep both.", similar_to=brief(old))
            return harden(ctx, old, said_by, body=body)
        return _reinforce_or_ask(ctx, old, said_by, said)
    if grey and said not in ("new", "replace") and config.supervision in ("balanced", "supervised"):
        old, verdict = grey
        if said is None or said == "yes":
            return ask(f"This is close to {old.id} ({old.scope}): \"{blocks.derive_title(old.body)}\". Repeat "
                       f"with confirm='reinforce' if it is the same rule, or confirm='new' to store it separately.",
                       similar_to=brief(old))
        if said == "reinforce" and old.kind == "learning":
            return _reinforce_or_ask(ctx, old, said_by, "yes")
    if config.supervision == "supervised" and said is None:
        what = "learning" if kind == "learning" else "issue (a mandatory rule)"
        return ask(f"Record a new {what} in '{scope}': \"{blocks.derive_title(body)}\"? Repeat with "
                   f"confirm='yes' to write it.")

    files: dict[str, str | None] = {}
    replaced = ""
    if conflict and said == "replace":
        old = conflict[0]
        text, block = ctx.block(old)
        files[old.path] = blocks.remove(text, block) or None
        replaced = f", replacing {old.id}"
    entry_id = ctx.add_block(kind, body, scope, [said_by], files)
    ctx.commit(f"capture: add {entry_id} ({scope}){replaced}\n\n{body}\n", files)
    noun = "learned" if kind == "learning" else "recorded the rule"
    return Outcome("committed", entry_id, 1 if kind == "learning" else None,
                   f"Whetstone {noun} {entry_id} ({scope}): {blocks.derive_title(body)}")


def _reinforce_or_ask(ctx: Context, old, said_by: str, said: str | None) -> Outcome:
    if ctx.config.supervision == "supervised" and said is None:
        return ask(f"This repeats {old.id} ({old.scope}): \"{blocks.derive_title(old.body)}\". Repeat with "
                   f"confirm='yes' to reinforce it (recurrence {old.recurrence} → {old.recurrence + 1}).",
                   similar_to=brief(old))
    return reinforce(ctx, old, said_by, verb="capture")

