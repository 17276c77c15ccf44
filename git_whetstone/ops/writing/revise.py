"""revise (SPEC §4): change an entry recall showed, by its id, one git commit per change.

Destructive actions and promotion ask for confirmation first (every write does in `supervised`
mode); a reworded, moved or re-kinded entry is judged against the rest of the store, as a capture
is. With a `target` the call settles how two entries relate, as the caller judged them (`same`,
`replace`, `distinct`): one commit, no question. A door's `decide` is asked about the likely
look-alikes as in capture, but only `different` (go ahead, the pair recorded as both holding) and
`contradicts` (stop) are acted on: `same` and `replaces` would need a second change in the same
commit, so they come back as `needs_confirmation` naming the call that settles them.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ...base.clock import today
from ...base.config import Config
from ...base.errors import WhetstoneError, shown
from ...format import blocks, edits
from ...format.layout import GLOBAL, GLOBAL_PREFIX
from ...format.entry import Entry, differs
from ...semantics.judge import CONTRADICTS, LIKELY, SAME, Judgement, triage
from ...store import events
from .capture import HOST, Decide, host_contradiction, verdict_of
from .context import Context, candidate
from .inputs import Answer, answer, clean_always, clean_body, clean_run_id, clean_scope
from ..workspace import Workspace
from .writes import (DECLINED, HARDENED, Outcome, ask, brief, counted, harden, mark, move, offer_promotion,
                     promotion_declined, reinforce, rewritten, soften)

PAIRED = ("same", "replace", "distinct")  # the actions about entry_id and a target
ACTIONS = ("reinforce", "weaken", "remove", "promote", "demote") + PAIRED
MARKS = ("always", "scoped")  # what revise records as the action of always=true / always=false
EDITS = ("reword", "move")  # what it records as the action of a body (and scope) / a scope alone
_ID = re.compile(r"(?:[Gg]:)?[LlIi][1-9]\d*")


def revise(skill: str, entry_id: str, action: str | None = None, body: str | None = None, scope: str | None = None,
           run_id: str | None = None, confirm: bool | str | None = None, always: bool | None = None,
           target: str | None = None, *, config: Config | None = None,
           decide: Decide | None = None) -> dict[str, Any]:
    """Change an entry recall showed: an action (reinforce, weaken, remove, promote, demote), a new
    `body` or `scope`, the `always` mark alone, or, with a `target`, how the two relate (same, replace,
    distinct). `decide` is a door's second opinion (see the module docstring)."""
    ws = Workspace.of(config)
    always = None if always is None else clean_always(always)  # None: the mark stays as it is
    if action in (None, "") and always is not None:
        if body not in (None, "") or scope not in (None, ""):
            raise WhetstoneError("always goes in a call of its own (no body or scope)")
        action = "always" if always else "scoped"
    elif always is not None:
        raise WhetstoneError("always goes in a call of its own: give it without an action")
    elif action in (None, ""):  # a body and/or a scope alone: reword / move the entry
        action = "reword" if body not in (None, "") else "move" if scope not in (None, "") else None
    if not isinstance(action, str) or action.strip().lower() not in ACTIONS + MARKS + EDITS:
        raise WhetstoneError(f"unknown action {shown(action)}: use one of {', '.join(ACTIONS)}, a body or scope "
                             f"alone to reword or move the entry, or always=true|false")
    action = action.strip().lower()
    if not isinstance(entry_id, str) or not _ID.fullmatch(entry_id.strip()):
        raise WhetstoneError(f"unknown entry id {shown(entry_id)}: ids look like L3 or I2")
    entry_id = entry_id.strip().upper()
    target = _target(target, action, entry_id)
    if entry_id.startswith(GLOBAL_PREFIX):  # an id recall showed from the global layer
        skill, entry_id = GLOBAL, entry_id[len(GLOBAL_PREFIX):]
        target = target and target[len(GLOBAL_PREFIX):]
    new_body = clean_body(body) if body not in (None, "") else None
    new_scope = clean_scope(scope) if scope not in (None, "") else None
    run_id, said = clean_run_id(run_id), answer(confirm)
    if said.target:
        raise WhetstoneError("revise takes confirm yes, no or new (same:/replace:/keep: answer a capture)")
    if action in ("remove",) + PAIRED and (new_body or new_scope):
        raise WhetstoneError(f"{action} takes no body or scope")
    if (action == "reword" and not new_body) or (action == "move" and not new_scope):
        raise WhetstoneError(f"{action} needs the {'new wording (body)' if action == 'reword' else 'scope to move to'}")
    store = ws.store(skill, must_exist=True)
    with store.lock():
        ctx = Context.open(ws, store)
        ctx.run_id = run_id
        entry = ctx.entry(entry_id)
        if target:  # how the two relate, as the caller judged them: one commit, no question
            outcome = {"distinct": _distinct, "replace": _replace, "same": _fold}[action](ctx, entry, ctx.entry(target))
        else:
            outcome = _revise(ctx, entry, action, new_body, new_scope, said, decide)
        warnings = list(ctx.snap.warnings) + store.warnings
    result = outcome.json(skill=store.skill, status=None, action=action, entry_id=None, target=target,
                          recurrence=None, confirmation=None, run_id=run_id, warnings=warnings)
    events.append(store.path, "revise", run_id=run_id, action=action, status=outcome.status,
                  entry_id=entry_id, new_entry_id=outcome.entry_id, **({"target": target} if target else {}),
                  **({"decided_by": outcome.extra["decided_by"]} if "decided_by" in outcome.extra else {}))
    return result


def _target(target: object, action: str, entry_id: str) -> str | None:
    """The `target` argument checked against the action and `entry_id` (both already checked):
    required by same, replace and distinct, refused by the others; another entry of the same layer."""
    if action not in PAIRED:
        if target not in (None, ""):
            raise WhetstoneError(f"target goes only with {', '.join(PAIRED)} (the entry the action is about), "
                                 f"not with {action}")
        return None
    if target in (None, ""):
        raise WhetstoneError(f"{action} needs a target: the entry {entry_id} is about, e.g. target='L3'")
    if not isinstance(target, str) or not _ID.fullmatch(target.strip()):
        raise WhetstoneError(f"unknown entry id {shown(target)} for target: ids look like L3 or I2")
    target = target.strip().upper()
    if target == entry_id:
        raise WhetstoneError(f"target is {entry_id} itself: name the other entry of the pair")
    if target.startswith(GLOBAL_PREFIX) != entry_id.startswith(GLOBAL_PREFIX):
        inside, outside = (target, entry_id) if target.startswith(GLOBAL_PREFIX) else (entry_id, target)
        raise WhetstoneError(f"{inside} is in the global layer and {outside} is not: {action} works on two "
                             f"entries of one layer")
    return target


def pair_call(entry_id: str, action: str, target: str) -> str:
    """The call that settles a pair (in the notation of `base.calls`)."""
    return f"revise(entry_id='{entry_id}', action='{action}', target='{target}')"


def _distinct(ctx: Context, entry: Entry, target: Entry) -> Outcome:
    """Both hold: `target` goes into the entry's `differs_from`, so the pair is never asked about again."""
    recurrence = entry.recurrence if entry.kind == "learning" else None
    if differs(entry, target):
        return Outcome("noop", entry.id, recurrence, f"{entry.id} and {target.id} are already recorded as both "
                                                     f"holding; nothing changed.")
    files = _changed(ctx, [(entry, lambda block: edits.with_differs(block, block.differs + (target.id,)))])
    ctx.commit(f"revise: {entry.id} and {target.id} both hold\n\n{entry.id} ({entry.scope}): {entry.body}\n"
               f"{target.id} ({target.scope}): {target.body}\n", files)
    return Outcome("committed", entry.id, recurrence, f"Whetstone recorded that {entry.id} ({entry.scope}) and "
                   f"{target.id} ({target.scope}) both hold; it will not ask about the two again.")


def _replace(ctx: Context, entry: Entry, target: Entry) -> Outcome:
    """The entry supersedes `target`, which goes (its mark for every task, if any, passes to the
    entry, as a capture's replace: the rule that holds now)."""
    changes: list[tuple[Entry, Callable[[blocks.Block], str | None]]] = [(target, _gone)]
    if target.always and not entry.always:
        changes.append((entry, lambda block: edits.with_always(block, True)))
    ctx.commit(f"revise: {entry.id} replaces {target.id} ({target.scope})\n\n{target.body}\n", _changed(ctx, changes))
    return Outcome("committed", entry.id, entry.recurrence if entry.kind == "learning" else None,
                   f"Whetstone removed {target.id} ({target.scope}): {entry.id} replaces it.",
                   {"replaced_id": target.id})


def _fold(ctx: Context, entry: Entry, target: Entry) -> Outcome:
    """The entry says what `target` says: it goes, its provenance joins the target's. A learning
    target is reinforced, or hardens into an issue when the entry is one (as a capture of the same
    rule as an issue does); an issue target stays as it is. Either's mark for every task stays."""
    marked = entry.always and not target.always
    day = today().isoformat()
    if target.kind == "issue":
        changes: list[tuple[Entry, Callable[[blocks.Block], str | None]]] = [(entry, _gone)]
        if marked:
            changes.append((target, lambda block: edits.with_always(block, True)))
        ctx.commit(f"revise: fold {entry.id} into {target.id} ({target.scope})\n\n{entry.body}\n",
                   _changed(ctx, changes))
        return Outcome("committed", target.id, None, f"Whetstone folded {entry.id} into {target.id} "
                       f"({target.scope}), which already says it.", {"removed_id": entry.id})
    if entry.kind == "issue":
        files = _changed(ctx, [(entry, _gone), (target, _gone)])
        provenance = [*target.provenance, f"{day} — {HARDENED} {target.id}", *entry.provenance]
        new_id = ctx.add_block("issue", entry.body, target.scope, provenance, files,
                               always=entry.always or target.always)
        ctx.commit(f"revise: fold {entry.id} into {target.id} ({target.scope}), now the issue {new_id}\n\n"
                   f"{entry.body}\n", files)
        return Outcome("committed", new_id, None, f"Whetstone folded {entry.id} into {target.id} and made it a "
                       f"mandatory issue: it is now {new_id} ({target.scope}).",
                       {"removed_id": entry.id, "replaced_id": target.id})
    count = target.recurrence + 1

    def reinforced(block: blocks.Block) -> str:
        text = edits.update_fields(block, {"recurrence": str(count), "last_seen": day}, list(entry.provenance))
        return edits.with_always(block, True, text) if marked else text

    ctx.commit(f"revise: fold {entry.id} into {target.id} ({target.scope}), recurrence {count}\n\n{target.body}\n",
               _changed(ctx, [(entry, _gone), (target, reinforced)]))
    outcome = Outcome("committed", target.id, count, f"Whetstone folded {entry.id} into {target.id} "
                      f"({target.scope}) and reinforced it to recurrence {count}.", {"removed_id": entry.id})
    return offer_promotion(outcome, target, count, ctx.config.promotion_threshold)


def _gone(block: blocks.Block) -> None:
    """A change that removes the block (see `_changed`)."""
    return None


def _changed(ctx: Context, changes: list[tuple[Entry, Callable[[blocks.Block], str | None]]]) -> dict[str, str | None]:
    """The files after changing some entries' blocks in turn: each `change` gives its block's new
    text, or None to remove it (a file two changes touch is parsed again between them)."""
    files: dict[str, str | None] = {}
    for entry, change in changes:
        text, block = ctx.block(entry, files)
        new = change(block)
        files[entry.path] = (edits.remove(text, block) if new is None else edits.replace(text, block, new)) or None
    return files


def _revise(ctx: Context, entry: Entry, action: str, body: str | None, scope: str | None,
            said: Answer, decide: Decide | None = None) -> Outcome:
    judged = _judged(ctx, entry, action, body, scope, said)
    host = _Host(decide, body or entry.body)
    outcome = _change(ctx, entry, action, body, scope, said, judged, host)
    answered = {e.id for e, j in judged if said.verb == "new" and j.relation in (LIKELY, CONTRADICTS)}
    answered |= host.different  # the look-alikes the host's model judged rules of their own
    mentioned = [(e, j) for e, j in triage(judged).mentioned if e.id not in answered]
    if outcome.status == "committed" and mentioned:  # done, and the look-alikes named for a follow-up
        outcome.extra["similar"] = [candidate(e, j) for e, j in mentioned]
    if host.decided:
        outcome.extra["decided_by"] = HOST
    return outcome


class _Host:
    """A door's `decide` for one revise, the changed entry's new wording, and what its answers
    settled: `decided` once one was acted on, `different` the ids it judged hold beside the entry."""

    def __init__(self, decide: Decide | None, body: str) -> None:
        self.decide, self.body = decide, body
        self.decided = False
        self.different: set[str] = set()


def _judged(ctx: Context, entry: Entry, action: str, body: str | None, scope: str | None,
            said: Answer) -> list[tuple[Entry, Judgement]]:
    """The judge's answers about the changed entry and the rest of the store, for a change that
    rewords, moves, promotes or demotes it."""
    if body is None and scope is None and action not in ("promote", "demote"):
        return []
    return ctx.nearest(body or entry.body, scope or entry.scope, exclude=entry)


def _change(ctx: Context, entry: Entry, action: str, body: str | None, scope: str | None,
            said: Answer, judged: list[tuple[Entry, Judgement]], host: _Host | None = None) -> Outcome:
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
        ctx.commit(f"revise: keep {entry.id} a learning ({entry.scope})\n\nThe user declined promotion.\n",
                   rewritten(ctx, entry, {}, f"{today().isoformat()} — {DECLINED}"))
        return Outcome("committed", entry.id, recurrence, f"{entry.id} stays a learning; whetstone will not ask again.")

    stop = _judge_change(ctx, entry, action, judged, recurrence, said, host)
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
                                                  "last_seen": today().isoformat()}, counted(ctx, None))
        return reinforce(ctx, entry, None, verb="revise", body=body)
    if action == "weaken":
        return _weaken(ctx, entry, body, scope)
    if action in EDITS:
        return _reword(ctx, entry, body, scope, recurrence)
    if action == "remove":
        text, block = ctx.block(entry)
        ctx.commit(f"revise: remove {entry.id} ({entry.scope})\n\n{entry.body}\n",
                   {entry.path: edits.remove(text, block) or None})
        return Outcome("committed", entry.id, None,
                       f"Whetstone removed {entry.id} ({entry.scope}): {blocks.derive_title(entry.body)}")
    if action == "promote":
        return harden(ctx, entry, None, body=body, scope=scope, verb="revise")
    return soften(ctx, entry, body=body, scope=scope)


def _judge_change(ctx: Context, entry: Entry, action: str, judged: list[tuple[Entry, Judgement]],
                  recurrence: int | None, said: Answer, host: _Host | None = None) -> Outcome | None:
    """A reworded, moved, promoted or demoted entry against the rest of the store, as a capture is
    judged: a sure contradiction or duplicate stops it; likely look-alikes are put to `host`'s
    `decide`, then to the caller, unless `autonomous` or already answered. None lets it go ahead."""
    if said.verb == "new":  # the caller said it holds beside its look-alikes: remembered with the change
        if action not in ("promote", "demote"):  # (which give the entry a new id)
            found = triage(judged)
            ctx.remember_both_hold(entry.id, [e for e, _ in found.likely]
                                   + [e for e, j in judged if j.relation == CONTRADICTS])
        return None
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
    likely = triage(judged).likely
    if likely and ctx.config.supervision != "autonomous" and said.verb != "yes":
        if host is not None and host.decide is not None and ctx.config.supervision == "balanced":
            stop = _host_judges(ctx, entry, action, likely, recurrence, host)
            if stop is not None or host.decided:  # stopped, or every look-alike judged a rule of its own
                return stop
        listed = "; ".join(f"{e.id} ({e.scope}): \"{blocks.derive_title(e.body)}\"" for e, _ in likely)
        return ask(f"The revised {entry.id} is close to {listed}, and whetstone cannot tell whether it says the "
                   f"same, the opposite or something else. Nothing was written. Repeat with confirm='new' to go "
                   f"ahead, or settle it with the user first ({pair_call(entry.id, 'same', likely[0][0].id)}, "
                   f"or replace or distinct in place of same).",
                   entry.id, recurrence, candidates=[candidate(e, j) for e, j in likely])
    return None


def _host_judges(ctx: Context, entry: Entry, action: str, likely: list[tuple[Entry, Judgement]],
                 recurrence: int | None, host: _Host) -> Outcome | None:
    """The likely look-alikes put to the door's `decide`, nearest first: an outcome that stops the
    change when it judges one the same rule, its replacement or its opposite; None with `host.decided`
    set when every one is a different rule; None as soon as it has no clear answer (the caller is asked)."""
    for other, verdict in likely:
        said = verdict_of(host.decide, host.body, other) if host.decide is not None else None
        if said is None:
            return None
        if said == "different":
            continue
        host.decided = True
        title = f"\"{blocks.derive_title(other.body)}\""
        if said == "contradicts":
            why = host_contradiction(verdict)
            return Outcome("conflict", entry.id, recurrence, extra={
                "conflicts_with": brief(other), "reason": why,
                "prompt": f"The revised rule contradicts {other.id} ({other.scope}): {title} — {why}. Nothing was "
                          f"written. Ask the user which holds: resolve {other.id} first, or repeat with "
                          f"confirm='new' if both hold."})
        if said == "same":
            return ask(f"The host's model judged that the revised {entry.id} says the same as {other.id} "
                       f"({other.scope}): {title}. Nothing was written. Ask the user: {pair_call(entry.id, 'same', other.id)} "
                       f"folds {entry.id} into {other.id}; repeat with confirm='new' if both "
                       f"hold after all.", entry.id, recurrence, candidates=[candidate(other, verdict)],
                       duplicate_of=brief(other))
        return ask(f"The host's model judged that the revised {entry.id} replaces {other.id} ({other.scope}): "
                   f"{title}. Nothing was written. Ask the user: {pair_call(entry.id, 'replace', other.id)} "
                   f"removes {other.id}, then repeat this call; or repeat with confirm='new' if both hold.",
                   entry.id, recurrence, candidates=[candidate(other, verdict)])
    host.decided = True
    host.different = {e.id for e, _ in likely}
    if action not in ("promote", "demote"):  # (which give the entry a new id)
        ctx.remember_both_hold(entry.id, [e for e, _ in likely])
    return None


def _weaken(ctx: Context, entry: Entry, body: str | None, scope: str | None) -> Outcome:
    if entry.recurrence <= 1 and not (body or scope):
        return Outcome("noop", entry.id, entry.recurrence, f"{entry.id} is already at recurrence 1; use remove to drop it.")
    count = max(1, entry.recurrence - 1)
    if scope:
        return move(ctx, entry, body, scope, {"recurrence": str(count)}, counted(ctx, None, "weakened"))
    ctx.commit(f"revise: weaken{' and reword' if body else ''} {entry.id} ({entry.scope}), recurrence {count}\n"
               + (f"\n{body}\n" if body else ""),
               rewritten(ctx, entry, {"recurrence": str(count)}, counted(ctx, None, "weakened"), body))
    return Outcome("committed", entry.id, count, f"Whetstone weakened {entry.id} ({entry.scope}) to recurrence {count}"
                   + (f" and reworded it: {blocks.derive_title(body)}" if body else "."))


def _reword(ctx: Context, entry: Entry, body: str | None, scope: str | None, recurrence: int | None) -> Outcome:
    """New words for the entry (`body`), or another scope (`scope`), or both: its weight stays."""
    if scope:
        return move(ctx, entry, body, scope, {})
    assert body is not None
    ctx.commit(f"revise: reword {entry.id} ({entry.scope})\n\n{body}\n", rewritten(ctx, entry, {}, body=body))
    return Outcome("committed", entry.id, recurrence, f"Whetstone reworded {entry.id} ({entry.scope}): "
                   f"{blocks.derive_title(body)}")
