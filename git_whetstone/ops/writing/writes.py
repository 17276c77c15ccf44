"""The changes capture and revise make to one entry, each one commit, and their `Outcome`. Hardening
turns a learning into an issue (the public action `promote`), softening an issue into a learning
(`demote`): both give the entry a new id in the other folder and record where it came from.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...base.clock import today
from ...format import blocks, edits
from ...format.entry import Entry
from .context import Context

DECLINED = "declined promotion to an issue"  # a provenance line: never ask to harden it again
HARDENED, SOFTENED = "promoted from", "demoted from"  # provenance: where an entry came from


@dataclass
class Outcome:
    """What a capture or a revision did or asks for. `entry_id` and `recurrence` describe the entry
    the caller should know about afterwards; the optional fields appear in the JSON only when set."""

    status: str
    entry_id: str | None = None
    recurrence: int | None = None
    confirmation: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # prompt, conflicts_with, reason, similar_to, …

    def json(self, **around: Any) -> dict[str, Any]:
        """The result as JSON: `around`'s keys in its order (with placeholders for status, entry_id,
        recurrence and confirmation), these filled in, then the optional fields that are set."""
        return {**around, "status": self.status, "entry_id": self.entry_id, "recurrence": self.recurrence,
                "confirmation": self.confirmation, **self.extra}


def brief(entry: Entry) -> dict[str, Any]:
    """How an entry is named in a result: id, rule and scope."""
    return {"id": entry.id, "rule": entry.body, "scope": entry.scope}


def ask(prompt: str, entry_id: str | None = None, recurrence: int | None = None, **extra: Any) -> Outcome:
    """Nothing written: the caller must answer `prompt` (with confirm) first."""
    return Outcome("needs_confirmation", entry_id, recurrence, None, {**extra, "prompt": prompt})


def promotion_declined(entry: Entry) -> bool:
    """Whether the person already said this learning stays a learning (or it was an issue once)."""
    return any(DECLINED in p or SOFTENED in p for p in entry.provenance)


def counted(ctx: Context, stamp: str | None, what: str = "reinforced") -> str:
    """The provenance line a change of recurrence adds: the caller's words (`stamp`, else what was
    done) and the run it came from. Two machines that make the same change on the same day still
    write different lines, so git sees two changes and the merge driver counts both."""
    return f"{stamp or f'{today().isoformat()} — {what}'} (run {ctx.run()})"


def reinforce(ctx: Context, old: Entry, stamp: str | None, *, verb: str, body: str | None = None,
              always: bool = False) -> Outcome:
    """Raise a learning's recurrence by one and refresh last_seen, with a provenance line of its
    own (`counted`), rewording it with `body`, marking it for every task with `always`; when that
    reaches `promotion_threshold`, ask once whether it should harden into an issue."""
    count = old.recurrence + 1
    marked = always and not old.always
    files = rewritten(ctx, old, {"recurrence": str(count), "last_seen": today().isoformat()}, counted(ctx, stamp),
                      body, always=marked)
    ctx.commit(f"{verb}: reinforce{' and reword' if body is not None else ''} {old.id} ({old.scope}), recurrence "
               f"{count}{', for every task' if marked else ''}\n\n{body or old.body}\n", files)
    outcome = Outcome("reinforced" if verb == "capture" else "committed", old.id, count,
                      f"Whetstone reinforced {old.id} ({old.scope}) to recurrence {count}"
                      f"{' and reworded it' if body is not None else ''}"
                      f"{' and marked it for every task' if marked else ''}: "
                      f"{blocks.derive_title(body or old.body)}")
    return offer_promotion(outcome, old, count, ctx.config.promotion_threshold)


def offer_promotion(outcome: Outcome, entry: Entry, count: int, threshold: int) -> Outcome:
    """`outcome` with the question whether `entry` should become a mandatory issue, once its
    recurrence crosses `threshold` (reaching `count`) and the answer was not already no."""
    if entry.recurrence < threshold <= count and not promotion_declined(entry):
        outcome.extra["promotion"] = {"entry_id": entry.id, "recurrence": count, "prompt": (
            f"{entry.id} has now been asked for {count} times. Ask the user whether it should become a mandatory "
            f"issue: {promote_call(entry.id, 'yes')} promotes it; {promote_call(entry.id, 'no')} records the answer "
            f"so this is not asked again.")}
    return outcome


def promote_call(entry_id: str, answer: str) -> str:
    """The call that answers a promotion question (in the notation of `base.calls`)."""
    return f"revise(entry_id='{entry_id}', action='promote', confirm='{answer}')"


def rewritten(ctx: Context, entry: Entry, fields: dict[str, str], stamp: str | None = None, body: str | None = None,
              scope: str | None = None, *, always: bool = False) -> dict[str, str | None]:
    """The files after changing `entry`'s block: `fields` set, `stamp` added to its provenance, marked
    for every task (`always`), reworded with `body`, moved to `scope` (its file may change)."""
    text, block = ctx.block(entry)
    changed = edits.update_fields(block, {**fields, "scope": scope} if scope else fields, stamp)
    if always:
        changed = edits.with_always(block, True, changed)
    if body:
        changed = reword(changed, block, body)
    target = ctx.store.rel(ctx.store.file_for_scope(entry.kind, scope, ctx.snap.known)) if scope else entry.path
    if target == entry.path:
        return {entry.path: edits.replace(text, block, changed)}
    return {entry.path: edits.remove(text, block) or None,
            target: edits.append(ctx.read(target)[0], changed.rstrip("\n") + "\n")}


def reword(block_text: str, block: blocks.Block, body: str) -> str:
    """A block's text with a new body and the title derived from it; metadata lines untouched."""
    lines = block_text.split("\n")
    lines[0] = f"## {block.id} {blocks.DOT} {blocks.derive_title(body)}"
    # the metadata lines run to the first blank line (update_fields or with_always may have added some)
    end = next((i for i, line in enumerate(lines[1:], 1) if not line.strip()), len(lines))
    head = "\n".join(lines[:end])
    trailing = block.raw[len(block.raw.rstrip("\n")):]
    return head + "\n\n" + body + (trailing or "\n")


def harden(ctx: Context, old: Entry, stamp: str | None, *, body: str | None = None, scope: str | None = None,
           verb: str = "capture", always: bool = False) -> Outcome:
    """Make a learning an issue: a new id in issues/, the learning removed, in one commit (marked
    for every task when it was, or `always`)."""
    return _rekind(ctx, old, "issue", stamp, body=body, scope=scope, verb=verb, always=always)


def soften(ctx: Context, old: Entry, *, body: str | None = None, scope: str | None = None,
           verb: str = "revise") -> Outcome:
    """Make an issue a learning again (new id in learnings/), in one commit."""
    return _rekind(ctx, old, "learning", None, body=body, scope=scope, verb=verb)


def _rekind(ctx: Context, old: Entry, to_kind: str, stamp: str | None, *, body: str | None, scope: str | None,
            verb: str, always: bool = False) -> Outcome:
    text, block = ctx.block(old)
    files: dict[str, str | None] = {old.path: edits.remove(text, block) or None}
    provenance = list(old.provenance) + [f"{today().isoformat()} — {HARDENED if to_kind == 'issue' else SOFTENED} "
                                         f"{old.id}"]
    if stamp:
        provenance.append(stamp)
    new_scope, new_body = scope or old.scope, body or old.body
    recurrence = max(1, ctx.config.promotion_threshold - 1)
    new_id = ctx.add_block(to_kind, new_body, new_scope, provenance, files, recurrence=recurrence,
                           first_seen=old.first_seen, always=old.always or always)
    action = "promote" if to_kind == "issue" else "demote"  # the public names of the two actions
    ctx.commit(f"{verb}: {action} {old.id} to {new_id} ({new_scope})\n\n{new_body}\n", files)
    noun = "a mandatory issue" if to_kind == "issue" else "a learning"
    return Outcome("committed", new_id, recurrence if to_kind == "learning" else None,
                   f"Whetstone made {old.id} {noun}: it is now {new_id} ({new_scope}).", {"replaced_id": old.id})


def mark(ctx: Context, entry: Entry, always: bool, *, verb: str) -> Outcome:
    """Set or clear an entry's `applies: always` mark (a rule for every task of the skill)."""
    recurrence = entry.recurrence if entry.kind == "learning" else None
    if entry.always == always:
        return Outcome("noop", entry.id, recurrence, f"{entry.id} is already {_marked(always)}; nothing changed.")
    text, block = ctx.block(entry)
    ctx.commit(f"{verb}: {'mark' if always else 'unmark'} {entry.id} ({entry.scope}) "
               f"{'for every task' if always else 'as scoped'}\n\n{entry.body}\n",
               {entry.path: edits.replace(text, block, edits.with_always(block, always))})
    return Outcome("committed", entry.id, recurrence, f"Whetstone {'marked' if always else 'unmarked'} {entry.id} "
                   f"({entry.scope}): it is now {_marked(always)}.")


def _marked(always: bool) -> str:
    return ("a rule for every task (recall returns it first, every time)" if always
            else "recalled when a task is about its scope")


def move(ctx: Context, entry: Entry, body: str | None, scope: str, extra: dict[str, str],
         stamp: str | None = None) -> Outcome:
    """Move an entry to another scope (its file may change), keeping its id and history; `extra`
    holds metadata changed on the way (recurrence, last_seen), `stamp` a provenance line to add."""
    ctx.commit(f"revise: {'reword and ' if body else ''}move {entry.id} to scope '{scope}'\n\n{body or entry.body}\n",
               rewritten(ctx, entry, extra, stamp, body, scope))
    count = int(extra["recurrence"]) if "recurrence" in extra else entry.recurrence
    recurrence = f" (recurrence {count})" if entry.kind == "learning" else ""
    return Outcome("committed", entry.id, count if entry.kind == "learning" else None,
                   f"Whetstone moved {entry.id} to '{scope}'{recurrence}"
                   + (f" and reworded it: {blocks.derive_title(body)}" if body else "."))
