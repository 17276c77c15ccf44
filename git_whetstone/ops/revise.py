"""revise (SPEC §4): change an entry recall showed, by its id, one git commit per change.

reinforce and weaken move a learning's recurrence; remove deletes an entry; promote hardens a
learning into an issue and demote softens an issue into a learning; `body` rewords and `scope`
moves an entry on the way. Destructive actions and promotion ask for confirmation first (and
every write does in `supervised` mode); a reworded, moved or re-kinded entry is judged against the
rest of the store, as a capture is. `always` true or false sets or clears the entry's
`applies: always` mark (a rule for every task of the skill), in a call of its own.
"""
from __future__ import annotations

import re
from typing import Any

from ..base.clock import today
from ..base.config import Config
from ..base.errors import WhetstoneError, shown
from ..format import blocks
from ..format.layout import GLOBAL, GLOBAL_PREFIX
from ..index.records import Entry
from ..semantics.judge import CONTRADICTS, SAME, UNSURE, Judgement
from ..store import events
from .context import CANDIDATES, Context, candidate
from .inputs import Answer, answer, clean_always, clean_body, clean_run_id, clean_scope
from .workspace import Workspace
from .writes import DECLINED, Outcome, ask, brief, harden, mark, move, promotion_declined, reinforce, reword, soften

ACTIONS = ("reinforce", "weaken", "remove", "promote", "demote")
MARKS = ("always", "scoped")  # what revise records as the action of always=true / always=false


def revise(skill: str, entry_id: str, action: str | None = None, body: str | None = None, scope: str | None = None,
           run_id: str | None = None, confirm: bool | str | None = None, always: bool | None = None, *,
           config: Config | None = None) -> dict[str, Any]:
    """Change an entry recall showed: reinforce, weaken, remove, promote (learning → issue) or demote
    (issue → learning), optionally rewording it (`body`) or moving it to another `scope`; or, with
    no action, set (`always=True`) or clear (`always=False`) its mark as a rule for every task."""
    ws = Workspace.of(config)
    always = None if always is None else clean_always(always)  # None: the mark stays as it is
    if action in (None, "") and always is not None:
        if body not in (None, "") or scope not in (None, ""):
            raise WhetstoneError("always goes in a call of its own (no body or scope)")
        action = "always" if always else "scoped"
    elif always is not None:
        raise WhetstoneError("always goes in a call of its own: give it without an action")
    if not isinstance(action, str) or action.strip().lower() not in ACTIONS + MARKS:
        raise WhetstoneError(f"unknown action {shown(action)}: use one of {', '.join(ACTIONS)}, or always=true|false")
    action = action.strip().lower()
    if not isinstance(entry_id, str) or not re.fullmatch(r"(?:[Gg]:)?[LlIi][1-9]\d*", entry_id.strip()):
        raise WhetstoneError(f"unknown entry id {shown(entry_id)}: ids look like L3 or I2")
    entry_id = entry_id.strip().upper()
    if entry_id.startswith(GLOBAL_PREFIX):  # an id recall showed from the global layer
        skill, entry_id = GLOBAL, entry_id[len(GLOBAL_PREFIX):]
    new_body = clean_body(body) if body not in (None, "") else None
    new_scope = clean_scope(scope) if scope not in (None, "") else None
    run_id, said = clean_run_id(run_id), answer(confirm)
    if said.target:
        raise WhetstoneError("revise takes confirm yes, no or new (same:/replace:/keep: answer a capture)")
    if action == "remove" and (new_body or new_scope):
        raise WhetstoneError("remove takes no body or scope")
    store = ws.store(skill, must_exist=True)
    with store.lock():
        ctx = Context.open(ws, store)
        outcome = _revise(ctx, ctx.entry(entry_id), action, new_body, new_scope, said)
        warnings = list(ctx.snap.warnings) + store.warnings
    result = outcome.json(skill=store.skill, status=None, action=action, entry_id=None, recurrence=None,
                          confirmation=None, run_id=run_id, warnings=warnings)
    events.append(store.path, "revise", run_id=run_id, action=action, status=outcome.status,
                  entry_id=entry_id, new_entry_id=outcome.entry_id)
    return result


def _revise(ctx: Context, entry: Entry, action: str, body: str | None, scope: str | None,
            said: Answer) -> Outcome:
    judged = _judged(ctx, entry, action, body, scope, said)
    outcome = _change(ctx, entry, action, body, scope, said, judged)
    unsure = [candidate(e, j) for e, j in judged if j.relation == UNSURE][:CANDIDATES]
    if outcome.status == "committed" and unsure:  # autonomous: done, and the look-alikes named for a follow-up
        outcome.extra["similar"] = unsure
    return outcome


def _judged(ctx: Context, entry: Entry, action: str, body: str | None, scope: str | None,
            said: Answer) -> list[tuple[Entry, Judgement]]:
    """The judge's answers about the changed entry and the rest of the store, for a change that
    rewords, moves, promotes or demotes it (unless the caller said it is a rule of its own)."""
    if said.verb == "new" or (body is None and scope is None and action not in ("promote", "demote")):
        return []
    return ctx.nearest(body or entry.body, scope or entry.scope, exclude=entry.id)


def _change(ctx: Context, entry: Entry, action: str, body: str | None, scope: str | None,
            said: Answer, judged: list[tuple[Entry, Judgement]]) -> Outcome:
    if action in ("reinforce", "weaken") and entry.kind != "learning":
        raise WhetstoneError(f"{entry.id} is an issue: issues have no weight to {action}; "
                             f"use demote or remove")
    if action == "promote" and entry.kind != "learning":
        raise WhetstoneError(f"{entry.id} is already an issue")
    if action == "demote" and entry.kind != "issue":
        raise WhetstoneError(f"{entry.id} is a learning; only issues can be demoted")
    recurrence = entry.recurrence if entry.kind == "learning" else None  # what the entry has now
    if action in MARKS:
        if ctx.config.supervision == "supervised" and said.verb != "yes" and entry.always != (action == "always"):
            what = "as a rule for every task" if action == "always" else "(recalled when a task is about its scope)"
            return ask(f"Confirm: {'mark' if action == 'always' else 'unmark'} {entry.id} "
                       f"(\"{blocks.derive_title(entry.body)}\") {what}. Repeat the call with confirm='yes'.",
                       entry.id, recurrence)
        return mark(ctx, entry, action == "always", verb="revise")

    if action == "promote" and said.verb == "no":
        if promotion_declined(entry):
            return Outcome("noop", entry.id, recurrence, f"{entry.id} stays a learning (already noted).")
        text, block = ctx.block(entry)
        said_by = f"{today().isoformat()} — {DECLINED}"
        ctx.commit(f"revise: keep {entry.id} a learning ({entry.scope})\n\nThe user declined promotion.\n",
                   {entry.path: blocks.replace(text, block, blocks.update_fields(block, {}, said_by))})
        return Outcome("committed", entry.id, recurrence, f"{entry.id} stays a learning; whetstone will not ask again.")

    stop = _judge_change(ctx, entry, action, judged, recurrence, said)
    if stop is not None:
        return stop

    needs = action in ("remove", "promote", "demote") or ctx.config.supervision == "supervised"
    if needs and said.verb not in ("yes", "new"):
        what = {"remove": f"delete {entry.id}", "promote": f"make {entry.id} a mandatory issue",
                "demote": f"make {entry.id} a soft learning"}.get(action, f"{action} {entry.id}")
        return ask(f"Confirm: {what} (\"{blocks.derive_title(entry.body)}\"). Repeat the call with confirm='yes'.",
                   entry.id, recurrence)

    if action == "reinforce":
        if scope:
            return move(ctx, entry, body, scope, {"recurrence": str(entry.recurrence + 1),
                                                  "last_seen": today().isoformat()})
        return reinforce(ctx, entry, None, verb="revise", body=body)
    if action == "weaken":
        return _weaken(ctx, entry, body, scope)
    if action == "remove":
        text, block = ctx.block(entry)
        ctx.commit(f"revise: remove {entry.id} ({entry.scope})\n\n{entry.body}\n",
                   {entry.path: blocks.remove(text, block) or None})
        return Outcome("committed", entry.id, None,
                       f"Whetstone removed {entry.id} ({entry.scope}): {blocks.derive_title(entry.body)}")
    if action == "promote":
        return harden(ctx, entry, None, body=body, scope=scope, verb="revise")
    return soften(ctx, entry, body=body, scope=scope)


def _judge_change(ctx: Context, entry: Entry, action: str, judged: list[tuple[Entry, Judgement]],
                  recurrence: int | None, said: Answer) -> Outcome | None:
    """A reworded, moved, promoted or demoted entry against the rest of the store, as a capture is
    judged: what the judge is sure contradicts it, or already says it, stops the change (nothing
    written); look-alikes it is unsure of are put to the caller first (unless `autonomous`, or the
    caller already said go ahead: they are then named in the result). None lets the change go ahead."""
    target_kind = {"promote": "issue", "demote": "learning"}.get(action, entry.kind)
    for other, verdict in judged:
        if verdict.relation == CONTRADICTS:
            return Outcome("conflict", entry.id, recurrence, extra={
                "conflicts_with": brief(other), "reason": verdict.reason,
                "prompt": f"The revised rule contradicts {other.id} ({other.scope}) — {verdict.reason}. "
                          f"Nothing was written; resolve {other.id} first, or repeat with confirm='new' if "
                          f"both hold."})
        if verdict.relation == SAME and other.kind == target_kind:
            return Outcome("noop", other.id, recurrence, (
                f"{other.id} already says this; nothing changed. Remove {entry.id} if it is redundant."),
                {"duplicate_of": brief(other)})
    unsure = [(e, j) for e, j in judged if j.relation == UNSURE][:CANDIDATES]
    if unsure and ctx.config.supervision != "autonomous" and said.verb != "yes":
        listed = "; ".join(f"{e.id} ({e.scope}): \"{blocks.derive_title(e.body)}\"" for e, _ in unsure)
        return ask(f"The revised {entry.id} is close to {listed}, and whetstone cannot tell whether it says the "
                   f"same, the opposite or something else. Nothing was written. Repeat with confirm='new' to go "
                   f"ahead, or settle it with the user first (revise or remove {unsure[0][0].id}).",
                   entry.id, recurrence, candidates=[candidate(e, j) for e, j in unsure])
    return None


def _weaken(ctx: Context, entry: Entry, body: str | None, scope: str | None) -> Outcome:
    if entry.recurrence <= 1 and not (body or scope):
        return Outcome("noop", entry.id, entry.recurrence, f"{entry.id} is already at recurrence 1; use remove to drop it.")
    count = max(1, entry.recurrence - 1)
    if scope:
        return move(ctx, entry, body, scope, {"recurrence": str(count)})
    text, block = ctx.block(entry)
    changed = blocks.update_fields(block, {"recurrence": str(count)})
    if body:
        changed = reword(changed, block, body)
    ctx.commit(f"revise: weaken {entry.id} ({entry.scope}), recurrence {count}\n",
               {entry.path: blocks.replace(text, block, changed)})
    return Outcome("committed", entry.id, count, f"Whetstone weakened {entry.id} ({entry.scope}) to recurrence {count}.")
