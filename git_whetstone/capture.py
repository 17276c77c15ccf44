"""capture and revise (SPEC §4): turning a correction into markdown, one git commit per change.

Both run under the store's write lock and judge the new text against what is stored first:
a near-duplicate learning is reinforced, a near-duplicate issue is a no-op, a contradiction is
reported and nothing is written. How much is asked before writing depends on `supervision`:
`autonomous` commits routine captures, `balanced` asks when a capture is ambiguous (grey-zone
similarity), `supervised` asks before every write. Promotion and destructive revisions always ask.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from . import blocks, events
from . import index as index_mod
from .config import Config, load
from .embed import get_embedder
from .errors import RUNTIME, WhetstoneError, shown, unicode_text
from .judge import Verdict, contradiction, judge
from .store import GLOBAL, GLOBAL_PREFIX, Store, scope_key, today

MAX_BODY = 4000
MAX_SCOPE = 100
MAX_PROVENANCE = 300
ACTIONS = ("reinforce", "weaken", "remove", "promote", "demote")
ANSWERS = {"yes": "yes", "y": "yes", "true": "yes", "confirm": "yes", "ok": "yes",
           "no": "no", "n": "no", "decline": "no",
           "new": "new", "separate": "new", "reinforce": "reinforce", "same": "reinforce", "replace": "replace"}
DECLINED = "declined promotion to an issue"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


# --- input ----------------------------------------------------------------------------------------

def clean_body(body: object) -> str:
    """A rule body as it will be written: trimmed, single blank lines between paragraphs."""
    if not isinstance(body, str):
        raise WhetstoneError(f"body must be text, got {shown(body)}")
    text = unicodedata.normalize("NFC", unicode_text(body, "body").replace("\r\n", "\n").replace("\r", "\n"))
    if _CONTROL.search(text.replace("\t", " ")):
        raise WhetstoneError("body contains control characters (NUL or similar); send plain text")
    lines = [line.rstrip() for line in text.strip().split("\n")]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines))
    if not text:
        raise WhetstoneError("body is empty: give the rule to remember")
    if len(text) > MAX_BODY:
        raise WhetstoneError(f"body is too long ({len(text)} characters; a rule fits in {MAX_BODY})")
    # A body is acceptable when a block holding it reads back as exactly that body: whatever the
    # format would misread (a heading, a list joining the metadata, an open fence) is refused here.
    for line in text.split("\n"):
        if line.startswith("#") and blocks._ATX.match(line):
            raise WhetstoneError(f"body cannot be stored as written: the line {shown(line)} would be a heading")
    probe = blocks.parse(blocks.render("I1", "probe", [("scope", "probe")], text), "body")
    if probe.errors or [b.body for b in probe.blocks] != [text]:
        problem = probe.errors[0].message if probe.errors else "it would not read back as written"
        raise WhetstoneError(f"body cannot be stored as written: {problem}")
    return text


def clean_scope(scope: object) -> str:
    if not isinstance(scope, str) or not " ".join(scope.split()):
        raise WhetstoneError("scope is empty: give a short phrase for when the rule applies")
    text = " ".join(unicodedata.normalize("NFC", unicode_text(scope, "scope")).split())
    if _CONTROL.search(text):
        raise WhetstoneError("scope contains control characters")
    if len(text) > MAX_SCOPE:
        raise WhetstoneError(f"scope is too long ({len(text)} characters; at most {MAX_SCOPE})")
    return text


def clean_provenance(provenance: object) -> str:
    if provenance is None:
        return ""
    if not isinstance(provenance, str):
        raise WhetstoneError(f"provenance must be text, got {shown(provenance)}")
    text = " ".join(_CONTROL.sub(" ", unicode_text(provenance, "provenance")).split())
    return text if len(text) <= MAX_PROVENANCE else text[: MAX_PROVENANCE - 1] + "…"


def clean_run_id(run_id: object) -> str | None:
    if run_id is None or run_id == "":
        return None
    if not isinstance(run_id, str) or len(run_id) > 100 or _CONTROL.search(run_id) or not run_id.isprintable():
        raise WhetstoneError(f"run_id must be the short text recall returned, got {shown(run_id)}")
    return run_id


def answer(confirm: object) -> str | None:
    """The meaning of a `confirm` argument: None (not given), yes, no, new, reinforce or replace."""
    if confirm is None or confirm is False or confirm == "":
        return None
    if confirm is True:
        return "yes"
    if isinstance(confirm, str) and confirm.strip().lower() in ANSWERS:
        return ANSWERS[confirm.strip().lower()]
    raise WhetstoneError(f"confirm must be true or one of yes, no, new, reinforce, replace; got {shown(confirm)}")


def polarity_kind(polarity: object) -> str:
    if isinstance(polarity, str) and polarity.strip().lower() in ("learning", "issue"):
        return polarity.strip().lower()
    raise WhetstoneError(f"polarity must be 'learning' or 'issue', got {shown(polarity)}")


# --- shared machinery -----------------------------------------------------------------------------

@dataclass
class Context:
    """What one write needs: the locked store, its fresh snapshot and the embedder."""

    config: Config
    store: Store
    snap: index_mod.Snapshot
    embedder: Any

    def entry(self, entry_id: str) -> index_mod.Entry:
        row = self.snap.by_id.get(entry_id)
        if row is None:
            raise WhetstoneError(f"unknown entry id {entry_id} in {self.store.skill}")
        return self.snap.entries[row]

    def known_scopes(self) -> dict[tuple[str, str], str]:
        return self.snap.known

    def read(self, rel: str) -> tuple[str, list[blocks.Block]]:
        """A scope file's text and blocks; a file that fails validation is not written to."""
        path = self.store.path / rel
        try:
            text = path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            return "", []
        except UnicodeDecodeError:
            raise WhetstoneError(f"{rel}:1: not valid UTF-8; fix the file before writing to it",
                                 exit_code=RUNTIME) from None
        parsed = blocks.parse(text, rel, rel.split("/", 1)[0])
        if parsed.errors:
            raise WhetstoneError(f"{parsed.errors[0]} (fix the file, see git whetstone validate, "
                                 f"before writing to it)", exit_code=RUNTIME)
        return text, parsed.blocks

    def block(self, entry: index_mod.Entry) -> tuple[str, blocks.Block]:
        text, found = self.read(entry.path)
        for block in found:
            if block.id == entry.id:
                return text, block
        raise WhetstoneError(f"{entry.id} moved while being changed; try again", exit_code=RUNTIME)

    def nearest(self, body: str, scope: str, exclude: str | None = None) -> Iterator[tuple[index_mod.Entry, Verdict]]:
        """Stored entries by likeness to `body`, closest first, each with the judge's verdict.
        Lazy: callers stop at the first verdict that decides their case."""
        if not self.snap.count:
            return
        body_vec, scope_vec = self.embedder.embed([body, scope])
        sims = np.where(self.snap.alive, self.snap.vectors @ body_vec, -1.0)
        scope_sims = self.snap.phrases @ scope_vec
        floor = min(self.config.threshold("grey"), self.config.threshold("conflict"))
        near = np.flatnonzero(sims >= floor)
        for row in near[np.lexsort((self.snap.id_key[near], -sims[near]))][:25]:
            e = self.snap.entries[row]
            if e.id == exclude:
                continue
            close = (scope_key(e.scope) == scope_key(scope)
                     or scope_sims[self.snap.scope_of[row]] >= self.config.threshold("scope"))
            yield e, judge(body, e.body, float(sims[row]), self.config, same_scope=close)

    def commit(self, message: str, files: dict[str, str | None]) -> None:
        self.store.write_and_commit(message, {self.store.path / rel: text for rel, text in files.items()})


def _open(config: Config, skill: object, create: bool) -> tuple[Store, Any]:
    store = Store.open(config, skill)
    if create:
        store.create()
    else:
        store.require()
    return store, get_embedder(config.embedding_backend, config.embedding_model)


def add_block(ctx: Context, kind: str, body: str, scope: str, provenance: list[str],
               pending: dict[str, str | None], recurrence: int = 1, first_seen: str | None = None,
               last_seen: str | None = None) -> str:
    """Add a block for a new entry to `pending` (the files this change writes, next_ids.json
    included) and return its id. `first_seen`/`last_seen` default to today (an import keeps its
    source's dates, so a stale preference does not arrive looking fresh)."""
    entry_id, ids_text = ctx.store.mint(kind, ctx.snap.top)
    day = today().isoformat()
    fields: list[tuple[str, str]] = []
    if kind == "learning":
        fields += [("recurrence", str(recurrence)), ("first_seen", first_seen or day), ("last_seen", last_seen or day)]
    fields.append(("scope", scope))
    fields += [("provenance", blocks.encode_value(p)) for p in provenance]
    rel = ctx.store.rel(ctx.store.file_for_scope(kind, scope, ctx.known_scopes()))
    text = pending[rel] if rel in pending else ctx.read(rel)[0]
    pending[rel] = blocks.append(text or "", blocks.render(entry_id, blocks.derive_title(body), fields, body))
    pending["next_ids.json"] = ids_text
    return entry_id


def _stamp(provenance: str) -> str:
    day = today().isoformat()
    if not provenance:
        return f"{day} — (no provenance given)"
    return f"{day} — {provenance}" if provenance[0] in "'\"" else f"{day} — '{provenance}'"


def _promotion_declined(entry: index_mod.Entry) -> bool:
    return any(DECLINED in p or "demoted from" in p for p in entry.provenance)


def _ask(result: dict[str, Any], prompt: str) -> dict[str, Any]:
    result.update(status="needs_confirmation", prompt=prompt, confirmation=None)
    return result


# --- capture --------------------------------------------------------------------------------------

def capture(skill: str, polarity: str, body: str, scope: str, provenance: str = "", run_id: str | None = None,
            confirm: bool | str | None = None, *, config: Config | None = None) -> dict[str, Any]:
    """Record a correction as a learning (taste) or an issue (always/never rule), or reinforce the
    entry that already says it. Returns `{status, entry_id, recurrence, confirmation, …}`."""
    config = config or load()
    kind = polarity_kind(polarity)
    body, scope = clean_body(body), clean_scope(scope)
    stamp = _stamp(clean_provenance(provenance))
    run_id, said = clean_run_id(run_id), answer(confirm)
    store, embedder = _open(config, skill, create=True)
    result: dict[str, Any] = {"skill": store.skill, "status": None, "entry_id": None, "recurrence": None,
                              "confirmation": None, "polarity": kind, "scope": scope, "run_id": run_id,
                              "warnings": []}
    with store.lock():
        ctx = Context(config, store, index_mod.snapshot(store, embedder), embedder)
        if not _global_conflict(ctx, kind, body, said, result):
            _capture(ctx, kind, body, scope, stamp, said, result)
        result["warnings"] = list(ctx.snap.warnings) + store.warnings
    events.append(store.path, "capture", run_id=run_id, status=result["status"], entry_id=result["entry_id"],
                  polarity=kind, scope=scope, conflicts_with=(result.get("conflicts_with") or {}).get("id"))
    return result


def _global_conflict(ctx: Context, kind: str, body: str, said: str | None, result: dict[str, Any]) -> bool:
    """A new rule that a global issue forbids is a conflict too (resolved in the global layer)."""
    config = ctx.config
    if not config.consult_global or ctx.store.skill == GLOBAL or said == "new":
        return False
    layer = Store.open(config, GLOBAL)
    if not layer.exists:
        return False
    snap = index_mod.snapshot(layer, ctx.embedder)
    issues = np.flatnonzero(snap.alive & ~snap.is_learning)
    if not len(issues):
        return False
    sims = snap.vectors[issues] @ ctx.embedder.embed([body])[0]
    for at in np.argsort(-sims)[:10]:
        old = snap.entries[issues[at]]
        reason = contradiction(body, old.body, float(sims[at]), config)
        if reason:
            shown_id = GLOBAL_PREFIX + old.id
            result.update(status="conflict", conflicts_with={"id": shown_id, "rule": old.body, "scope": old.scope},
                          reason=reason, prompt=(
                              f"This contradicts the global issue {shown_id} ({old.scope}): "
                              f"\"{blocks.derive_title(old.body)}\" — {reason}. Nothing was written. Ask the user "
                              f"which holds: revise {shown_id} if the global rule should change, or repeat the "
                              f"capture with confirm='new' to keep this skill's exception."))
            return True
    return False


def _capture(ctx: Context, kind: str, body: str, scope: str, stamp: str, said: str | None,
             result: dict[str, Any]) -> None:
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
        result.update(status="conflict", conflicts_with=_brief(old), reason=verdict.reason, prompt=(
            f"This contradicts {old.id} ({old.scope}): \"{blocks.derive_title(old.body)}\" — {verdict.reason}. "
            f"Nothing was written. Ask the user which holds: to replace {old.id} with the new rule, repeat the "
            f"capture with confirm='replace'; to change {old.id}, use revise."))
        return
    if same and said not in ("new", "replace"):
        old, verdict = same
        if old.kind == "issue":
            result.update(status="noop", entry_id=old.id, confirmation=(
                f"Whetstone already has this as {old.id} ({old.scope}); nothing changed."))
            return
        if kind == "issue":  # an always/never rule that a learning already states softly
            if said != "yes":
                _ask(result, f"This hardens learning {old.id} (\"{blocks.derive_title(old.body)}\") into a "
                             f"mandatory issue. Repeat with confirm='yes' to promote {old.id}, or confirm='new' to "
                             f"keep both.")
                result["similar_to"] = _brief(old)
                return
            _promote(ctx, old, stamp, result, body=body)
            return
        _reinforce_or_ask(ctx, old, stamp, said, result)
        return
    if grey and said not in ("new", "replace") and config.supervision in ("balanced", "supervised"):
        old, verdict = grey
        if said is None or said == "yes":
            result["similar_to"] = _brief(old)
            _ask(result, f"This is close to {old.id} ({old.scope}): \"{blocks.derive_title(old.body)}\". Repeat "
                         f"with confirm='reinforce' if it is the same rule, or confirm='new' to store it separately.")
            return
        if said == "reinforce" and old.kind == "learning":
            _reinforce_or_ask(ctx, old, stamp, "yes", result)
            return
    if config.supervision == "supervised" and said is None:
        what = "learning" if kind == "learning" else "issue (a mandatory rule)"
        _ask(result, f"Record a new {what} in '{scope}': \"{blocks.derive_title(body)}\"? Repeat with "
                     f"confirm='yes' to write it.")
        return

    files: dict[str, str | None] = {}
    replaced = ""
    if conflict and said == "replace":
        old = conflict[0]
        text, block = ctx.block(old)
        files[old.path] = blocks.remove(text, block) or None
        replaced = f", replacing {old.id}"
    entry_id = add_block(ctx, kind, body, scope, [stamp], files)
    ctx.commit(f"capture: add {entry_id} ({scope}){replaced}\n\n{body}\n", files)
    noun = "learned" if kind == "learning" else "recorded the rule"
    result.update(status="committed", entry_id=entry_id, recurrence=1 if kind == "learning" else None,
                  confirmation=f"Whetstone {noun} {entry_id} ({scope}): {blocks.derive_title(body)}")


def _brief(entry: index_mod.Entry) -> dict[str, Any]:
    return {"id": entry.id, "rule": entry.body, "scope": entry.scope}


def _reinforce_or_ask(ctx: Context, old: index_mod.Entry, stamp: str, said: str | None,
                      result: dict[str, Any]) -> None:
    if ctx.config.supervision == "supervised" and said is None:
        result["similar_to"] = _brief(old)
        _ask(result, f"This repeats {old.id} ({old.scope}): \"{blocks.derive_title(old.body)}\". Repeat with "
                     f"confirm='yes' to reinforce it (recurrence {old.recurrence} → {old.recurrence + 1}).")
        return
    _reinforce(ctx, old, stamp, result, verb="capture")


def _reinforce(ctx: Context, old: index_mod.Entry, stamp: str | None, result: dict[str, Any], *, verb: str,
               body: str | None = None) -> None:
    text, block = ctx.block(old)
    count = old.recurrence + 1
    changed = blocks.update_fields(block, {"recurrence": str(count), "last_seen": today().isoformat()}, stamp)
    if body is not None:
        changed = _reword(changed, block, body)
    ctx.commit(f"{verb}: reinforce {old.id} ({old.scope}), recurrence {count}\n\n{body or old.body}\n",
               {old.path: blocks.replace(text, block, changed)})
    result.update(status="reinforced" if verb == "capture" else "committed", entry_id=old.id, recurrence=count,
                  confirmation=f"Whetstone reinforced {old.id} ({old.scope}) to recurrence {count}: "
                               f"{blocks.derive_title(body or old.body)}")
    threshold = ctx.config.promotion_threshold
    if old.recurrence < threshold <= count and not _promotion_declined(old):
        result["promotion"] = {"entry_id": old.id, "recurrence": count, "prompt": (
            f"{old.id} has now been asked for {count} times. Ask the user whether it should become a mandatory "
            f"issue: revise(entry_id='{old.id}', action='promote', confirm='yes') promotes it; confirm='no' "
            f"records the answer so this is not asked again.")}


def _reword(block_text: str, block: blocks.Block, body: str) -> str:
    """A block's text with a new body and the title derived from it; metadata lines untouched."""
    lines = block_text.split("\n")
    lines[0] = f"## {block.id} {blocks.DOT} {blocks.derive_title(body)}"
    head = "\n".join(lines[: 1 + len(block.fields)])
    trailing = block.raw[len(block.raw.rstrip("\n")):]
    return head + "\n\n" + body + (trailing or "\n")


def _promote(ctx: Context, old: index_mod.Entry, stamp: str | None, result: dict[str, Any], *,
             body: str | None = None, scope: str | None = None, verb: str = "capture") -> None:
    """Move a learning into issues/ under a new id (or an issue into learnings/, for demote)."""
    to_kind = "issue" if old.kind == "learning" else "learning"
    text, block = ctx.block(old)
    files: dict[str, str | None] = {old.path: blocks.remove(text, block) or None}
    moved = "promoted from" if to_kind == "issue" else "demoted from"
    provenance = list(old.provenance) + [f"{today().isoformat()} — {moved} {old.id}"]
    if stamp:
        provenance.append(stamp)
    new_scope, new_body = scope or old.scope, body or old.body
    recurrence = max(1, ctx.config.promotion_threshold - 1)
    new_id = add_block(ctx, to_kind, new_body, new_scope, provenance, files, recurrence=recurrence,
                        first_seen=old.first_seen)
    action = "promote" if to_kind == "issue" else "demote"
    ctx.commit(f"{verb}: {action} {old.id} to {new_id} ({new_scope})\n\n{new_body}\n", files)
    noun = "a mandatory issue" if to_kind == "issue" else "a learning"
    result.update(status="committed", entry_id=new_id, replaced_id=old.id,
                  recurrence=recurrence if to_kind == "learning" else None,
                  confirmation=f"Whetstone made {old.id} {noun}: it is now {new_id} ({new_scope}).")


# --- revise ---------------------------------------------------------------------------------------

def revise(skill: str, entry_id: str, action: str, body: str | None = None, scope: str | None = None,
           run_id: str | None = None, confirm: bool | str | None = None, *,
           config: Config | None = None) -> dict[str, Any]:
    """Change an entry recall showed: reinforce, weaken, remove, promote (learning → issue) or demote
    (issue → learning), optionally rewording it (`body`) or moving it to another `scope`."""
    config = config or load()
    if not isinstance(action, str) or action.strip().lower() not in ACTIONS:
        raise WhetstoneError(f"unknown action {shown(action)}: use one of {', '.join(ACTIONS)}")
    action = action.strip().lower()
    if not isinstance(entry_id, str) or not re.fullmatch(r"(?:[Gg]:)?[LlIi][1-9]\d*", entry_id.strip()):
        raise WhetstoneError(f"unknown entry id {shown(entry_id)}: ids look like L3 or I2")
    entry_id = entry_id.strip().upper()
    if entry_id.startswith(GLOBAL_PREFIX):  # an id recall showed from the global layer
        skill, entry_id = GLOBAL, entry_id[len(GLOBAL_PREFIX):]
    new_body = clean_body(body) if body not in (None, "") else None
    new_scope = clean_scope(scope) if scope not in (None, "") else None
    run_id, said = clean_run_id(run_id), answer(confirm)
    if action == "remove" and (new_body or new_scope):
        raise WhetstoneError("remove takes no body or scope")
    store, embedder = _open(config, skill, create=False)
    result: dict[str, Any] = {"skill": store.skill, "status": None, "action": action, "entry_id": entry_id,
                              "recurrence": None, "confirmation": None, "run_id": run_id, "warnings": []}
    with store.lock():
        ctx = Context(config, store, index_mod.snapshot(store, embedder), embedder)
        _revise(ctx, ctx.entry(entry_id), action, new_body, new_scope, said, result)
        result["warnings"] = list(ctx.snap.warnings) + store.warnings
    events.append(store.path, "revise", run_id=run_id, action=action, status=result["status"],
                  entry_id=entry_id, new_entry_id=result.get("entry_id"))
    return result


def _revise(ctx: Context, entry: index_mod.Entry, action: str, body: str | None, scope: str | None,
            said: str | None, result: dict[str, Any]) -> None:
    if action in ("reinforce", "weaken") and entry.kind != "learning":
        raise WhetstoneError(f"{entry.id} is an issue: issues have no weight to {action}; "
                             f"use demote or remove")
    if action == "promote" and entry.kind != "learning":
        raise WhetstoneError(f"{entry.id} is already an issue")
    if action == "demote" and entry.kind != "issue":
        raise WhetstoneError(f"{entry.id} is a learning; only issues can be demoted")
    result["recurrence"] = entry.recurrence if entry.kind == "learning" else None

    if action == "promote" and said == "no":
        if _promotion_declined(entry):
            result.update(status="noop", confirmation=f"{entry.id} stays a learning (already noted).")
            return
        text, block = ctx.block(entry)
        stamp = f"{today().isoformat()} — {DECLINED}"
        ctx.commit(f"revise: keep {entry.id} a learning ({entry.scope})\n\nThe user declined promotion.\n",
                   {entry.path: blocks.replace(text, block, blocks.update_fields(block, {}, stamp))})
        result.update(status="committed", confirmation=f"{entry.id} stays a learning; whetstone will not ask again.")
        return

    new_text = body or entry.body
    if body is not None or scope is not None or action in ("promote", "demote"):
        target_kind = {"promote": "issue", "demote": "learning"}.get(action, entry.kind)
        for other, verdict in ctx.nearest(new_text, scope or entry.scope, exclude=entry.id):
            if verdict.relation == "conflict":
                result.update(status="conflict", conflicts_with=_brief(other), reason=verdict.reason,
                              prompt=f"The revised rule contradicts {other.id} ({other.scope}) — {verdict.reason}. "
                                     f"Nothing was written; resolve {other.id} first.")
                return
            if verdict.relation == "duplicate" and other.kind == target_kind:
                result.update(status="noop", entry_id=other.id, duplicate_of=_brief(other), confirmation=(
                    f"{other.id} already says this; nothing changed. Remove {entry.id} if it is redundant."))
                return

    needs = action in ("remove", "promote", "demote") or ctx.config.supervision == "supervised"
    if needs and said != "yes":
        what = {"remove": f"delete {entry.id}", "promote": f"make {entry.id} a mandatory issue",
                "demote": f"make {entry.id} a soft learning"}.get(action, f"{action} {entry.id}")
        _ask(result, f"Confirm: {what} (\"{blocks.derive_title(entry.body)}\"). Repeat the call with confirm='yes'.")
        return

    if action == "reinforce":
        if scope:
            _move(ctx, entry, body, scope, result, extra={"recurrence": str(entry.recurrence + 1),
                                                           "last_seen": today().isoformat()})
        else:
            _reinforce(ctx, entry, None, result, verb="revise", body=body)
    elif action == "weaken":
        if entry.recurrence <= 1 and not (body or scope):
            result.update(status="noop", confirmation=(
                f"{entry.id} is already at recurrence 1; use remove to drop it."))
            return
        count = max(1, entry.recurrence - 1)
        if scope:
            _move(ctx, entry, body, scope, result, extra={"recurrence": str(count)})
        else:
            text, block = ctx.block(entry)
            changed = blocks.update_fields(block, {"recurrence": str(count)})
            if body:
                changed = _reword(changed, block, body)
            ctx.commit(f"revise: weaken {entry.id} ({entry.scope}), recurrence {count}\n",
                       {entry.path: blocks.replace(text, block, changed)})
            result.update(status="committed", recurrence=count,
                          confirmation=f"Whetstone weakened {entry.id} ({entry.scope}) to recurrence {count}.")
    elif action == "remove":
        text, block = ctx.block(entry)
        ctx.commit(f"revise: remove {entry.id} ({entry.scope})\n\n{entry.body}\n",
                   {entry.path: blocks.remove(text, block) or None})
        result.update(status="committed", recurrence=None,
                      confirmation=f"Whetstone removed {entry.id} ({entry.scope}): {blocks.derive_title(entry.body)}")
    else:
        _promote(ctx, entry, None, result, body=body, scope=scope, verb="revise")


def _move(ctx: Context, entry: index_mod.Entry, body: str | None, scope: str, result: dict[str, Any],
          extra: dict[str, str]) -> None:
    """Move an entry to another scope (its file may change), keeping its id and history."""
    text, block = ctx.block(entry)
    changed = blocks.update_fields(block, {**extra, "scope": scope})
    if body:
        changed = _reword(changed, block, body)
    files: dict[str, str | None] = {}
    known = ctx.known_scopes()
    target = ctx.store.rel(ctx.store.file_for_scope(entry.kind, scope, known))
    if target == entry.path:
        files[entry.path] = blocks.replace(text, block, changed)
    else:
        files[entry.path] = blocks.remove(text, block) or None
        target_text, _ = ctx.read(target)
        files[target] = blocks.append(target_text, changed.rstrip("\n") + "\n")
    ctx.commit(f"revise: move {entry.id} to scope '{scope}'\n\n{body or entry.body}\n", files)
    count = int(extra["recurrence"]) if "recurrence" in extra else entry.recurrence
    result.update(status="committed", recurrence=count,
                  confirmation=f"Whetstone moved {entry.id} to '{scope}' (recurrence {count}).")
