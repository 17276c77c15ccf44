"""capture (SPEC §4): a correction turned into markdown, one git commit per change.

The judge decides alone only when it is sure (the same rule: reinforced, or a noop for an issue; its
opposite: a conflict, nothing written). A *likely* look-alike goes to the caller as
`needs_confirmation` (answered with `confirm`), except in `autonomous`; a *related* one is written and
named in `similar`. A door may lend a second opinion, `decide` (the MCP server: the host's model): in
`balanced` mode each likely look-alike is put to it first, nearest first, and a clear answer is acted
on as the caller's would be (`decided_by: "host-model"`); None leaves the question to the caller.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...base.config import Config
from ...base.errors import WhetstoneError
from ...format import blocks, edits
from ...format.layout import GLOBAL, GLOBAL_PREFIX, did_you_mean
from ...format.entry import Entry
from ...semantics.judge import CONTRADICTS, SAME, Judgement, Triage, judge, triage
from ...store import events
from ...store.store import close_skills
from .attach import create
from .context import Context, candidate
from .inputs import (Answer, answer, clean_always, clean_body, clean_provenance, clean_run_id, clean_scope,
                     polarity_kind, stamp)
from ..workspace import Workspace
from .writes import Outcome, ask, brief, harden, mark, reinforce

# What a door's `decide` may answer about a new rule and a stored look-alike (None: no clear answer).
VERDICTS = ("same", "replaces", "contradicts", "different")
HOST = "host-model"  # `decided_by` of an outcome the door's `decide` settled
Decide = Callable[[str, Entry], str | None]


def capture(skill: str, polarity: str, body: str, scope: str, provenance: str = "", run_id: str | None = None,
            confirm: bool | str | None = None, always: bool | None = False, *,
            config: Config | None = None, decide: Decide | None = None) -> dict[str, Any]:
    """Record a correction as a learning (taste) or an issue (always/never rule), or reinforce the
    entry that already says it; `always` marks a rule for every task of the skill. `decide(body,
    entry)` answers one of VERDICTS, or None when it has no clear answer (see the module docstring)."""
    ws = Workspace.of(config)
    kind = polarity_kind(polarity)
    body, scope = clean_body(body), clean_scope(scope)
    said_by = stamp(clean_provenance(provenance))
    run_id, said = clean_run_id(run_id), answer(confirm)
    every = clean_always(always)
    store = ws.store(skill)
    near = [] if store.exists or said.verb in ("new", "yes") else close_skills(ws.config, store.skill)
    if near and ws.config.supervision != "autonomous":  # most likely a typo: a second store splits the memory
        return ask(f"There is no skill named '{store.skill}'; {did_you_mean(near)} Nothing was written. Capture "
                   f"into {near[0]} instead, or repeat with confirm='new' to start the skill '{store.skill}'.",
                   did_you_mean=near).json(
            skill=store.skill, status=None, entry_id=None, recurrence=None, confirmation=None, polarity=kind,
            scope=scope, always=every, run_id=run_id, warnings=[])
    create(store)
    with store.lock():
        ctx = Context.open(ws, store)
        ctx.run_id = run_id
        outcome = (_global_conflict(ctx, body, said)
                   or _capture(ctx, kind, body, scope, said_by, said, every, decide))
        warnings = list(ctx.snap.warnings) + store.warnings
    if near:  # autonomous: started, as a look-alike rule is written, and named
        warnings.append(f"started the skill '{store.skill}', which no store had; {did_you_mean(near)}")
    result = outcome.json(skill=store.skill, status=None, entry_id=None, recurrence=None, confirmation=None,
                          polarity=kind, scope=scope, always=every, run_id=run_id, warnings=warnings)
    looked = outcome.extra.get("candidates") or outcome.extra.get("similar") or []
    events.append(store.path, "capture", run_id=run_id, status=outcome.status, entry_id=outcome.entry_id,
                  polarity=kind, scope=scope, conflicts_with=(outcome.extra.get("conflicts_with") or {}).get("id"),
                  **({"look_alikes": [c["id"] for c in looked]} if looked else {}),
                  **({"decided_by": outcome.extra["decided_by"]} if "decided_by" in outcome.extra else {}))
    return result


def _global_conflict(ctx: Context, body: str, said: Answer) -> Outcome | None:
    """A new rule that a global issue forbids is a conflict too (resolved in the global layer)."""
    config = ctx.config
    if not config.consult_global or ctx.store.skill == GLOBAL or said.verb in ("new", "same", "replace", "keep"):
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
        # judged as in one scope: a global issue holds in every scope
        verdict = judge(body, old.body, float(sims[at]), config, same_scope=True)
        reason = verdict.reason if verdict.relation == CONTRADICTS else ""
        if reason:
            shown_id = GLOBAL_PREFIX + old.id
            return Outcome("conflict", extra={
                "conflicts_with": {"id": shown_id, "rule": old.body, "scope": old.scope}, "reason": reason,
                "prompt": (f"This contradicts the global issue {shown_id} ({old.scope}): "
                           f"\"{blocks.derive_title(old.body)}\" — {reason}. Nothing was written. Ask the user "
                           f"which holds: revise {shown_id} if the global rule should change, or repeat the "
                           f"capture with confirm='new' to keep this skill's exception.")})
    return None


def _capture(ctx: Context, kind: str, body: str, scope: str, said_by: str, said: Answer,
             every: bool = False, decide: Decide | None = None) -> Outcome:
    if said.target:  # the caller said what the new rule is to a stored one
        return _as_said(ctx, kind, body, scope, said_by, said, every)
    found = triage(ctx.nearest(body, scope))
    if found.decisive:  # the closest entry the judge is sure about decides
        old, verdict = found.decisive
        if said.verb in ("replace", "keep"):
            return _as_said(ctx, kind, body, scope, said_by, Answer(said.verb, old.id), every)
        if verdict.relation == SAME and said.verb == "new" and old.kind == kind:
            return _repeated(_same(ctx, kind, body, old, said_by, Answer("same"), every))
        if verdict.relation == SAME and said.verb != "new":
            return _same(ctx, kind, body, old, said_by, said, every)
        if verdict.relation == CONTRADICTS and said.verb != "new":
            return _conflict(old, body, verdict)
    asked = found.likely or found.mentioned  # what a bare same / replace / keep can be about
    if said.verb in ("same", "replace", "keep") and len(asked) == 1:
        return _as_said(ctx, kind, body, scope, said_by, Answer(said.verb, asked[0][0].id), every)
    if said.verb in ("same", "replace", "keep") and asked:
        raise WhetstoneError(f"confirm='{said.verb}' is ambiguous here: say which entry, e.g. "
                             f"confirm='{said.verb}:{asked[0][0].id}' (look-alikes: {', '.join(e.id for e, _ in asked)})")
    if found.likely and said.verb != "new" and ctx.config.supervision != "autonomous":
        if decide is not None and ctx.config.supervision == "balanced":
            decided = _host_decides(ctx, kind, body, scope, said_by, said, every, found, decide)
            if decided is not None:
                decided.extra["decided_by"] = HOST
                return decided
        return _ask_about(found.likely, body)
    if ctx.config.supervision == "supervised" and said.verb not in ("yes", "new"):
        what = "learning" if kind == "learning" else "issue (a mandatory rule)"
        return ask(f"Record a new {what} in '{scope}': \"{blocks.derive_title(body)}\"? Repeat with "
                   f"confirm='yes' to write it.", **_mentions(found.mentioned))
    # "both hold": the answer is remembered with the new rule, so the pair is never raised again
    answered = [] if said.verb != "new" else [e for e, _ in [*filter(None, [found.decisive]), *found.likely]]
    return _write_new(ctx, kind, body, scope, said_by, every, answered, found.mentioned)


def verdict_of(decide: Decide, body: str, entry: Entry) -> str | None:
    """What `decide` says of the new rule `body` and the stored `entry`: one of VERDICTS, or None
    (no clear answer: anything else it returns)."""
    said = decide(body, entry)
    return said if isinstance(said, str) and said in VERDICTS else None


def host_contradiction(verdict: Judgement) -> str:
    """The `reason` of a conflict the door's `decide` found (with the judge's own, if it had one)."""
    return "the host's model judged that the two contradict" + (f" ({verdict.reason})" if verdict.reason else "")


def _host_decides(ctx: Context, kind: str, body: str, scope: str, said_by: str, said: Answer, every: bool,
                  found: Triage, decide: Decide) -> Outcome | None:
    """The likely look-alikes put to the door's `decide`, nearest first, and its clear answer acted
    on; None (the caller is asked) as soon as it has none about one of them."""
    for old, verdict in found.likely:
        host = verdict_of(decide, body, old)
        if host is None:
            return None
        if host == "same":  # as the judge does when it is sure (hardening a learning still asks)
            return _same(ctx, kind, body, old, said_by, said, every)
        if host == "replaces":
            return _as_said(ctx, kind, body, scope, said_by, Answer("replace", old.id), every)
        if host == "contradicts":
            return _conflict(old, body, Judgement(CONTRADICTS, verdict.similarity, host_contradiction(verdict), True))
    # every look-alike is a different rule: stored, the pairs remembered as both holding
    answered = [e for e, _ in found.likely]
    return _write_new(ctx, kind, body, scope, said_by, every, answered, found.mentioned)


def _mentions(mentioned: list[tuple[Entry, Judgement]]) -> dict[str, Any]:
    """`similar`: the look-alikes a written rule is mentioned beside, a note for the caller (none: no key)."""
    return {"similar": [candidate(e, j) for e, j in mentioned]} if mentioned else {}


def _repeated(outcome: Outcome) -> Outcome:
    """A capture answered `new` whose rule the store already holds in the same words: reinforced
    (or left, an issue) instead of stored twice, and the answer says why."""
    outcome.confirmation = (f"{outcome.entry_id} already says this in the same words, so it was not stored twice. "
                            + (outcome.confirmation or ""))
    return outcome


def _conflict(old: Entry, body: str, verdict: Judgement) -> Outcome:
    return Outcome("conflict", extra={"conflicts_with": brief(old), "reason": verdict.reason, "prompt": (
        f"This contradicts {old.id} ({old.scope}): \"{blocks.derive_title(old.body)}\" against the new "
        f"\"{blocks.derive_title(body)}\" — {verdict.reason}. Nothing was written. Ask the user which holds: "
        f"confirm='replace:{old.id}' if the new rule does (it replaces {old.id}), confirm='keep:{old.id}' if "
        f"{old.id} still does, confirm='new' if both hold (in different cases).")})


def _ask_about(likely: list[tuple[Entry, Judgement]], body: str) -> Outcome:
    """needs_confirmation: the new rule is likely one of these entries again, or its opposite."""
    first, verdict = likely[0]
    listed = "; ".join(f"{e.id} ({e.scope}): \"{blocks.derive_title(e.body)}\"" for e, _ in likely)
    if verdict.opposed:
        question = (f"It may contradict {first.id} ({verdict.reason}). Ask the user which holds: "
                    f"confirm='replace:{first.id}' if the new rule does, confirm='keep:{first.id}' if {first.id} "
                    f"still does, confirm='same:{first.id}' if they say the same, confirm='new' if both hold.")
    else:
        question = (f"Ask the user (or judge yourself) whether it says the same as one of them: "
                    f"confirm='same:{first.id}' reinforces {first.id}, confirm='replace:{first.id}' replaces it, "
                    f"confirm='new' stores it as a rule of its own.")
    return ask(f"This is close to {listed}, and whetstone cannot tell whether \"{blocks.derive_title(body)}\" "
               f"is the same rule, its opposite or a different one. Nothing was written. {question}",
               candidates=[candidate(e, j) for e, j in likely], similar_to=brief(first))


def _same(ctx: Context, kind: str, body: str, old: Entry, said_by: str, said: Answer,
          every: bool = False) -> Outcome:
    """The new rule is `old` again: reinforce a learning, leave an issue, harden a learning the
    caller now states as an issue (after asking); mark it for every task when the caller says so."""
    if old.kind == "issue" and every and not old.always:
        if ctx.config.supervision == "supervised" and said.verb not in ("yes", "same"):
            return ask(f"{old.id} ({old.scope}) already says this: \"{blocks.derive_title(old.body)}\". Repeat with "
                       f"confirm='yes' to mark it as a rule for every task.", similar_to=brief(old))
        return mark(ctx, old, True, verb="capture")
    if old.kind == "issue":
        return Outcome("noop", old.id, confirmation=f"Whetstone already has this as {old.id} ({old.scope}); "
                                                    f"nothing changed.")
    if kind == "issue":  # an always/never rule that a learning already states softly
        if said.verb not in ("yes", "same"):
            return ask(f"This hardens learning {old.id} (\"{blocks.derive_title(old.body)}\") into a mandatory "
                       f"issue. Repeat with confirm='yes' to promote {old.id}, or confirm='new' to keep both.",
                       similar_to=brief(old))
        return harden(ctx, old, said_by, body=body, always=every)
    if ctx.config.supervision == "supervised" and said.verb not in ("yes", "same"):
        return ask(f"This repeats {old.id} ({old.scope}): \"{blocks.derive_title(old.body)}\". Repeat with "
                   f"confirm='yes' to reinforce it (recurrence {old.recurrence} → {old.recurrence + 1}).",
                   similar_to=brief(old))
    return reinforce(ctx, old, said_by, verb="capture", always=every)


def _as_said(ctx: Context, kind: str, body: str, scope: str, said_by: str, said: Answer,
             every: bool = False) -> Outcome:
    """Do what the caller said the new rule is to a stored entry (same:, replace:, keep:)."""
    if said.target.startswith(GLOBAL_PREFIX):
        raise WhetstoneError(f"{said.target} is in the global layer: change it with revise, or confirm='new' to "
                             f"keep this skill's own rule")
    old = ctx.entry(said.target)
    if said.verb == "keep":
        return Outcome("noop", old.id, confirmation=f"{old.id} ({old.scope}) holds; nothing was written.")
    if said.verb == "same":
        return _same(ctx, kind, body, old, said_by, Answer("same"), every)
    text, block = ctx.block(old)  # replace: the new rule supersedes the old, in one commit
    files: dict[str, str | None] = {old.path: edits.remove(text, block) or None}
    entry_id = ctx.add_block(kind, body, scope, [said_by], files, always=every or old.always)
    ctx.commit(f"capture: add {entry_id} ({scope}), replacing {old.id}\n\n{body}\n", files)
    noun = "learned" if kind == "learning" else "recorded the rule"
    return Outcome("committed", entry_id, 1 if kind == "learning" else None,
                   f"Whetstone {noun} {entry_id} ({scope}), replacing {old.id}: {blocks.derive_title(body)}",
                   {"replaced_id": old.id})


def _write_new(ctx: Context, kind: str, body: str, scope: str, said_by: str, every: bool,
               answered: list[Entry], mentioned: list[tuple[Entry, Judgement]]) -> Outcome:
    """A new entry, one commit, recorded as holding beside the look-alikes `answered` (the caller
    said so); the other look-alikes `mentioned` are named in `similar`."""
    files: dict[str, str | None] = {}
    entry_id = ctx.add_block(kind, body, scope, [said_by], files, always=every, differs=[e.id for e in answered])
    ctx.commit(f"capture: add {entry_id} ({scope}{', every task' if every else ''})\n\n{body}\n", files)
    noun = "learned" if kind == "learning" else "recorded the rule"
    return Outcome("committed", entry_id, 1 if kind == "learning" else None,
                   f"Whetstone {noun} {entry_id} ({scope}{', for every task' if every else ''}): "
                   f"{blocks.derive_title(body)}", _mentions([(e, j) for e, j in mentioned if e not in answered]))
