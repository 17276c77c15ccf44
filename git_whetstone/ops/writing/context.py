"""A write in progress (`Context`): the workspace, the store under its lock and its fresh snapshot,
with what every write needs: an entry by id, a file's blocks, the nearest rules judged, a new block,
one commit.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ...base.clock import today
from ...base.config import Config
from ...base.errors import RUNTIME, WhetstoneError
from ...format import blocks, edits
from ...format.layout import scope_key
from ...format.entry import Entry, differs
from ...index.snapshot import Snapshot
from ...semantics.embed import Embedder
from ...semantics.judge import Judgement, judge
from ...store import events
from ...store.store import Store, refuse_unfinished
from ..workspace import Workspace


NEAREST = 25  # stored entries the judge looks at for one new rule, closest first
SCOPE_PULL = 0.3  # how much closer a rule in a close scope counts, when picking the look-alikes (fitted on dev)
BASELINE_FROM = 3  # entries a store needs before a look-alike must stand out from the rest of it


def candidate(entry: Entry, judgement: Judgement) -> dict[str, object]:
    """A stored entry as offered to the caller to decide about: id, rule, scope, similarity."""
    return {"id": entry.id, "rule": entry.body, "scope": entry.scope, "similarity": round(judgement.similarity, 3)}


class Context:
    """A write in progress: the locked store, its fresh snapshot, and the workspace."""

    def __init__(self, workspace: Workspace, store: Store, snap: Snapshot) -> None:
        self.workspace, self.store, self.snap = workspace, store, snap
        self.both_hold: list[tuple[Entry, str]] = []  # (entry, id): the next commit records that both hold
        self.run_id: str | None = None  # the caller's run, else one made for this write (`run`)

    @property
    def config(self) -> Config:
        return self.workspace.config

    @property
    def embedder(self) -> Embedder:
        return self.workspace.embedder

    @classmethod
    def open(cls, workspace: Workspace, store: Store) -> "Context":
        """The context of a write to `store` (call with its lock held)."""
        return cls(workspace, store, workspace.snapshot(store))

    def run(self) -> str:
        """The run this write belongs to: the caller's run_id, else a new one (made once)."""
        if self.run_id is None:
            self.run_id = events.new_run_id(today())
        return self.run_id

    def entry(self, entry_id: str) -> Entry:
        row = self.snap.row_of(entry_id)
        if row is None:
            raise WhetstoneError(f"unknown entry id {entry_id} in {self.store.skill}")
        return self.snap.entries[row]

    def live(self) -> list[Entry]:
        """Every entry of the store, in row order."""
        return [self.snap.entries[row] for row in np.flatnonzero(self.snap.alive)]

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

    def block(self, entry: Entry, pending: dict[str, str | None] | None = None) -> tuple[str, blocks.Block]:
        """The text of an entry's file (as `pending` holds it, when it does) and the entry's block in it."""
        if pending is not None and entry.path in pending:
            text = pending[entry.path] or ""
            found = blocks.parse(text, entry.path, entry.path.split("/", 1)[0]).blocks
        else:
            text, found = self.read(entry.path)
        for block in found:
            if block.id == entry.id:
                return text, block
        raise WhetstoneError(f"{entry.id} moved while being changed; try again", exit_code=RUNTIME)

    def nearest(self, body: str, scope: str, exclude: Entry | None = None,
                limit: int = NEAREST) -> list[tuple[Entry, Judgement]]:
        """The stored entries most like `body` (at most `limit`, closest first, ties by id), each
        with the judge's answer about the two. `exclude` is the entry being changed (a revise): it
        and the entries recorded as differing from it (`differs_from`) are left out."""
        if not self.snap.count:
            return []
        config = self.config
        snap, floor = self.snap, config.threshold("candidate")
        body_vec, scope_vec = self.embedder.embed([body, scope])
        sims = snap.similarities(body_vec)
        baseline = float(sims[snap.alive].mean())
        near = np.flatnonzero(sims >= floor)
        row_sims = sims[near]
        scope_sims = snap.phrases @ scope_vec
        sims = dict(zip(near.tolist(), row_sims.tolist()))
        # closest first, where a rule in the same or a close scope counts as a little closer
        likeness = row_sims + SCOPE_PULL * scope_sims[snap.scope_of[near]]
        # what any rule of the store scores against this one: a look-alike stands out from it (a store
        # of a few entries has no such level yet)
        baseline = baseline if np.count_nonzero(snap.alive) >= BASELINE_FROM else 0.0
        found = []
        for row in near[np.lexsort((self.snap.id_key[near], -likeness))]:
            e = self.snap.entries[row]
            if exclude is not None and (e.id == exclude.id or differs(exclude, e)):
                continue
            scope_similarity = float(scope_sims[self.snap.scope_of[row]])
            close = scope_key(e.scope) == scope_key(scope) or scope_similarity >= config.threshold("scope")
            found.append((e, judge(body, e.body, sims[int(row)], config, same_scope=close, baseline=baseline)))
            if len(found) == limit:
                break
        return found

    def add_block(self, kind: str, body: str, scope: str, provenance: list[str], pending: dict[str, str | None],
                  recurrence: int = 1, first_seen: str | None = None, last_seen: str | None = None,
                  always: bool = False, differs: Iterable[str] = ()) -> str:
        """Add a new entry's block to `pending` (the files this change writes, next_ids.json included) and
        return its id. Dates default to today (an import keeps its source's, so a stale preference does not
        arrive looking fresh); `differs` names the entries the caller said hold beside it."""
        rel = self.store.rel(self.store.file_for_scope(kind, scope, self.snap.known))
        text = pending[rel] if rel in pending else self.read(rel)[0]
        if rel not in pending:
            refuse_unfinished(self.store, [rel])  # before an id is minted for a write that cannot happen
        entry_id, ids_text = self.store.mint(kind, self.snap.top)
        day = today().isoformat()
        fields: list[tuple[str, str]] = []
        if kind == "learning":
            fields += [("recurrence", str(recurrence)), ("first_seen", first_seen or day),
                       ("last_seen", last_seen or day)]
        fields.append(("scope", scope))
        if always:
            fields.append(("applies", blocks.ALWAYS))
        if differs:
            fields.append(("differs_from", blocks.IDS_SEPARATOR.join(sorted(set(differs), key=blocks.id_order))))
        fields += [("provenance", blocks.encode_value(p)) for p in provenance]
        pending[rel] = edits.append(text or "", edits.render(entry_id, blocks.derive_title(body), fields, body))
        pending["next_ids.json"] = ids_text
        return entry_id

    def remember_both_hold(self, entry_id: str, others: list[Entry]) -> None:
        """Have the next commit record, on each of `others`, that it holds beside `entry_id`
        (`differs_from`): the caller said so, and the pair is never raised again."""
        self.both_hold += [(other, entry_id) for other in others]

    def commit(self, message: str, files: dict[str, str | None]) -> None:
        """Write the files (None: delete) and commit them as one change (with the pairs remembered
        as both holding, on the blocks of theirs still there)."""
        for other, entry_id in self.both_hold:
            text = files[other.path] if other.path in files else self.read(other.path)[0]
            block = next((b for b in blocks.parse(text or "", other.path).blocks if b.id == other.id), None)
            if block is not None:
                files[other.path] = edits.replace(text, block, edits.with_differs(block, block.differs + (entry_id,)))
        self.both_hold = []
        self.store.write_and_commit(message, {self.store.path / rel: text for rel, text in files.items()})
