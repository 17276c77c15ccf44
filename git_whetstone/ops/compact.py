"""compact (SPEC §4): the tidy-up a person runs on purpose, never an agent mid-task.

The structural pass is applied as one commit that lists every change, so `git revert` of that
commit undoes the whole compaction: scopes that mean the same are merged into one (the most used
spelling wins), duplicate entries in a scope are merged into the oldest (a learning keeps the
summed recurrence, the earliest first_seen, the latest last_seen and every provenance line),
learnings whose weight decayed below `retire_weight_threshold` are retired, and scope files left
empty are deleted. Issues never retire, nor do learnings marked for every task. Running it twice
changes nothing the second time.

The behavioral pass only reports, from events.jsonl and the markdown, over time windows: learnings
worth hardening into issues, rules that may hold for every task (recalled for most of the different
tasks lately, or said again in several runs: a person marks them with `revise --always`), scopes
with capture churn, learnings never surfaced, and conflicts never resolved. It is printed and written to the git-ignored compact-report.md.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..base.clock import today
from ..base.config import Config
from ..base.errors import RUNTIME, WhetstoneError
from ..base.heap import no_collection
from ..format import blocks
from ..format.ids import DOT
from ..format.layout import GLOBAL_PREFIX, scope_key
from ..index.freshness import stamp_of
from ..index.snapshot import Snapshot
from ..base.files import write_atomic
from ..index.records import Entry, day_number, differs, text_hash, text_hashes
from ..semantics import judge as judge_module, words as words_module
from ..semantics.judge import CONTRADICTS, LIKELY, SAME, Groups, decisive_key, judge, may_oppose, read
from ..semantics.words import content_words, name_words
from ..store import events
from ..store.store import Store, list_skills
from ..store.weight import weight, weights
from .workspace import Workspace, Written
from .global_layer import clusters

REPORT = "compact-report.md"
_HEADS = re.compile(r"^##(?: |$)", re.M)  # the lines `blocks.parse` starts a block at
HARDEN_WINDOW_DAYS = 90      # reinforced this often within this window: worth making an issue
CHURN_WINDOW_DAYS = 30       # captured, then weakened or removed within this window: churn
STALE_DAYS = 90              # never surfaced by recall for this long: stale
ALWAYS_WINDOW_DAYS = 90      # recalled for many different tasks within this window: a rule for every task?
ALWAYS_MIN_TASKS = 5         # ... for at least this many different intents,
ALWAYS_SHARE = 0.5           # ... making at least this share of the different intents recalled
ALWAYS_MIN_RUNS = 3          # or captured again in this many different runs (tasks)


# The refresh after an applied compact runs while git stages its files (False: after the commit,
# the reference the tests compare with).
OVERLAP = True
ESTIMATE_FROM = 5_000        # entries from which compact says how long it will take
RATE = "whetstone-compact-rate.json"  # in .git: the last runs' seconds per 1,000 entries
DEFAULT_RATE = {"dry": 0.12, "apply": 0.45}  # seconds per 1,000 entries on a 2-core machine, at 100,000


def compact(skill: str, *, dry_run: bool = False, config: Config | None = None,
            notice: Callable[[str], None] | None = None,
            progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Compact one skill's store; with `dry_run`, only say what the structural pass would do.
    For a big store, `notice` is told how long it will take before the work starts (from the last
    run's pace, if any), and `progress` is called with (scopes done, scopes in all) as it goes."""
    return _compact(Workspace.of(config), skill, dry_run, notice, progress)


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


def _compact(ws: Workspace, skill: str, dry_run: bool, notice: Callable[[str], None] | None = None,
             progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    config = ws.config
    store = ws.store(skill, must_exist=True)
    started = time.monotonic()
    keys = Keys.load(store)
    # no collection passes while 100,000 entries' objects are read, planned, written and refreshed:
    # none of them is garbage (`_apply` alone spent up to a second of CPU in them)
    with store.lock(), no_collection():
        snap = ws.snapshot(store)
        if notice is not None and snap.count >= ESTIMATE_FROM:
            scopes = len({snap.scopes[n][1] for n in np.unique(snap.scope_of[snap.alive]).tolist()})
            notice(estimate(store, snap.count, scopes, dry_run))
        read: dict[tuple[str, str], list[Entry]] = {}
        entries = rows_of(snap, read)
        plan = plan_of(snap, config, keys=keys, entries=entries, progress=progress)
        committed = False
        if plan.changes and not dry_run:
            known: dict[str, list[Entry]] = {}
            files = _apply(store, snap, plan, entries, written=known)
            data = {rel: None if text is None else text.encode("utf-8") for rel, text in files.items()}
            lines = "\n".join(f"- {c}" for c in plan.changes)

            def refresh() -> tuple[Snapshot, list[Entry | None]]:
                # the files it wrote are not parsed again, nor their records decoded after: their
                # entries are the ones it made as it wrote them
                written = Written({rel: (data[rel], found) for rel, found in known.items()}, read)
                fresh = ws.snapshot(store, written)
                for rel, found in written.taken.items():
                    rows = fresh.files.get(rel)
                    if rows is not None and rows.warning is None:
                        read[(rel, rows.stamp)] = found
                return fresh, rows_of(fresh, read)  # the files the commit left alone are not decoded again
            # the index is brought up to date with the files written while git stages them
            # (`meanwhile`); committed only once write_and_commit has returned
            made = store.write_and_commit(f"compact: {len(plan.changes)} changes\n\n{lines}\n",
                                          {store.path / rel: blob for rel, blob in data.items()},
                                          meanwhile=refresh if OVERLAP else None)
            committed = True
            snap, entries = made if OVERLAP else refresh()
            # HEAD has moved since the refresh looked: a recheck, which reads a broken file again
            # from the new HEAD (and nothing else: the snapshot's stamps then name the new HEAD)
            again = ws.snapshot(store)
            if again is not snap or again.warned:
                snap, entries = again, rows_of(again, read)
    report = findings(store, snap, config, keys, entries)
    keys.save()
    _remember_pace(store, snap.count, time.monotonic() - started, not committed)  # nothing written: a dry run's pace
    if not dry_run:
        (store.path / REPORT).write_text(render_report(store.skill, plan.changes, report), encoding="utf-8")
    return {"skill": store.skill, "dry_run": dry_run, "committed": committed, "changes": plan.changes,
            "report": report, "warnings": list(snap.warnings) + store.warnings}


# --- the structural pass --------------------------------------------------------------------------

@dataclass
class Plan:
    """What the structural pass changes: one line per change (the commit message lists them), the
    entries rewritten (id → new scope, merged fields, provenance to add) and those removed (id →
    why)."""

    changes: list[str]
    updates: dict[str, dict[str, Any]]
    removed: dict[str, str]


def rows_of(snap: Snapshot, read: dict[tuple[str, str], list[Entry]] | None = None) -> list[Entry | None]:
    """`snap.entries` as a list, each file's entries decoded once (row by row, a big store decodes
    a file again for every few rows asked of it). `read` maps (path, stamp) to the entries of a
    file as an earlier call found them: a file with the same stamp is not decoded again, and the
    files decoded now are added to it."""
    out: list[Entry | None] = [None] * snap.size
    for path, rows in snap.files.items():
        # (a file read with a warning serves its last commit, which a stamp does not pin: decoded again)
        found = read.get((path, rows.stamp)) if read is not None and rows.warning is None else None
        if found is None:
            found = rows.entries
            if read is not None and rows.warning is None:
                read[(path, rows.stamp)] = found
        out[rows.start:rows.start + rows.n] = found
    return out


class Keys:
    """Each rule's `decisive_key`, read once: two rules whose keys differ are never the same rule
    nor a contradiction, so compact asks the judge only about close pairs that share one. The keys
    are kept in .git/whetstone-compact.json by the hash of the rule's text (and of the code that
    reads it), so the next compact reads only the rules it has not seen; beside them, each scope's
    duplicates, so the next compact judges only the scopes that changed."""

    FILE = "whetstone-compact.json"

    def __init__(self, saved: dict[str, str] | None = None, path: Path | None = None,
                 scopes: dict[str, Any] | None = None) -> None:
        self.saved = saved or {}            # text hash -> key, as found on disk
        self.path = path
        self.number_of: dict[str, int] = {}  # text -> number of its key
        self.known: dict[str, int] = {}      # key -> its number
        self.used: dict[str, str] = {}       # text hash -> key, for every text looked at
        self.read = 0                        # texts whose key was not saved
        self.hashes: dict[str, str] = {}     # text -> its hash (a run asks for each body's more than once)
        self.config: tuple[Config, bytes] | None = None  # the configuration a digest starts with, and its bytes
        # A scope's duplicates by the digest of all they depend on (see `digest`): a scope nobody
        # changed since the last compact is not judged again. (Its look-alikes are not kept: their
        # unsure pairs and cosines made the file tens of MB at 100,000 entries, slower to read
        # and write than judging them again.)
        self.saved_scopes = scopes or {}
        self.used_scopes: dict[str, Any] = {}

    @classmethod
    def load(cls, store: Store) -> "Keys":
        path = store.path / ".git" / cls.FILE
        try:
            data = json.loads(path.read_bytes())
            ours = data.get("code") == _code()
            saved = data["keys"] if ours and isinstance(data.get("keys"), dict) else {}
            scopes = data.get("scopes") if ours and isinstance(data.get("scopes"), dict) else {}
        except (OSError, ValueError, AttributeError):
            saved, scopes = {}, {}
        return cls(saved, path, scopes)

    def save(self) -> None:
        """Keep the keys of the texts looked at this time, and the verdicts of the scopes (when one
        was new, or some are gone)."""
        if self.path is None or (not self.read and len(self.used) == len(self.saved)
                                 and self.used_scopes.keys() == self.saved_scopes.keys()):
            return
        try:
            write_atomic(self.path, json.dumps({"code": _code(), "keys": self.used, "scopes": self.used_scopes},
                                               separators=(",", ":")))
        except OSError:
            pass  # a cache: the next compact reads the texts again

    def digest(self, config: Config, snap: Snapshot, entries: list[Entry | None], rows: list[int]) -> str:
        """Everything a scope's same-rule verdicts depend on: the configuration, and its rows
        in order (id, scope as written, rule, vector). The keys saved for its rules are kept too:
        a scope not judged again still has its rules looked at."""
        if self.config is None or self.config[0] is not config:
            self.config = (config, f"{config!r}\0".encode())
        h = hashlib.sha1(self.config[1])
        parts = []
        for i in rows:
            e = entries[i]
            digest = self.hash(e.body)
            key = self.saved.get(digest)
            if key is not None:
                self.used[digest] = key
            parts.append(f"{e.id}\0{e.scope}\0{digest}\0")
        h.update("".join(parts).encode())  # (the bytes one update a row gave)
        h.update(np.ascontiguousarray(snap.vectors[rows]).tobytes())
        return h.hexdigest()

    def recall(self, digest: str) -> Any:
        """The verdicts kept for `digest` (None: not kept)."""
        found = self.used_scopes.get(digest)
        if found is None:
            found = self.saved_scopes.get(digest)
            if found is not None:
                self.used_scopes[digest] = found
        return found

    def keep(self, digest: str, verdicts: Any) -> None:
        self.used_scopes[digest] = verdicts

    def close_pairs(self, vectors: np.ndarray, bar: float) -> list[tuple[int, int]]:
        """`_close_pairs(vectors, bar)`, kept by a digest of the bar and the vectors' bytes: the
        scopes' phrases rarely change between two runs, and their product is most of a plan's
        time at 10,000 scopes (a run that finds them kept reuses the very pairs it found)."""
        vectors = np.ascontiguousarray(vectors, np.float32)
        h = hashlib.sha1(f"close pairs\0{bar!r}\0{vectors.shape}\0".encode())
        h.update(vectors.tobytes())
        digest = h.hexdigest()
        found = self.recall(digest)
        if not isinstance(found, list):
            found = _close_pairs(vectors, bar)
            self.keep(digest, found)
        return [(a, b) for a, b in found]

    def shared(self, texts: list[str], pairs: np.ndarray) -> np.ndarray:
        """A mask over `pairs` (positions in `texts`): the pairs whose two texts share a key."""
        if not len(pairs):
            return np.zeros(0, bool)
        number = self.numbers(texts)
        return number[pairs[:, 0]] == number[pairs[:, 1]]

    def numbers(self, texts: list[str]) -> np.ndarray:
        """`number` of each text, as an array (the texts seen before in one dict lookup each)."""
        found = list(map(self.number_of.get, texts))
        for at, n in enumerate(found):
            if n is None:
                found[at] = self.number(texts[at])
        return np.array(found, np.int64)

    def hash(self, text: str) -> str:
        found = self.hashes.get(text)
        if found is None:
            found = self.hashes[text] = text_hash(text)
        return found

    def hash_all(self, texts: list[str]) -> None:
        """`hash` each of many texts at once (`text_hashes`: half the time of one call a text)."""
        new = [text for text in dict.fromkeys(texts) if text not in self.hashes]
        self.hashes.update(zip(new, text_hashes(new)))

    def number(self, text: str) -> int:
        found = self.number_of.get(text)
        if found is None:
            digest = self.hash(text)
            key = self.saved.get(digest)
            if key is None:
                key = decisive_key(text)
                self.read += 1
            self.used[digest] = key
            found = self.number_of[text] = self.known.setdefault(key, len(self.known))
        return found


@functools.cache
def _code() -> str:
    """What the keys and the verdicts depend on: the judge's, the words' and compact's code."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for module in (judge_module, words_module):
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()[:16]


def _close_pairs(vectors: np.ndarray, bar: float, block: int = 1024) -> list[tuple[int, int]]:
    """Every pair (a < b) of rows whose cosine reaches `bar`, a block of rows at a time (the full
    matrix of 10,000 scopes would be 400 MB)."""
    pairs: list[tuple[int, int]] = []
    for start in range(0, len(vectors), block):
        sims = vectors[start:start + block] @ vectors[start:].T
        for a, b in np.argwhere(sims >= bar).tolist():
            if start + a < start + b:
                pairs.append((start + a, start + b))
    return pairs


def plan_of(snap: Snapshot, config: Config, *, every_pair: bool = False, keys: Keys | None = None,
            entries: list[Entry | None] | None = None, progress: Callable[[int, int], None] | None = None) -> Plan:
    """What to change: entries to rewrite (new scope, merged fields), to remove, and why.
    `every_pair` is the slow reference the tests compare with (the same plan): every close pair
    judged, not only those whose words could make them one rule, nothing reused from an earlier
    run, and every learning weighed one by one. (`_compact` calls it with the collector paused.)"""
    day = today()
    alive = np.flatnonzero(snap.alive).tolist()
    every = entries if entries is not None else rows_of(snap)
    entries = {i: every[i] for i in alive}
    keys = keys if keys is not None else Keys()
    if not every_pair:
        keys.hash_all([e.body for e in entries.values()])  # the digests and the keys ask for (nearly) every body's
    changes: list[str] = []
    scope_of: dict[int, str] = {i: e.scope for i, e in entries.items()}  # the scope each entry ends in
    updates: dict[str, dict[str, Any]] = {}  # id -> {"scope": …, "fields": {…}, "provenance": [...]}
    removed: dict[str, str] = {}             # id -> why

    id_key = snap.id_key.tolist()  # (a list's ints: a key a row to sort by, not a numpy scalar each)

    # 1. scopes whose names are the same after normalisation (case, plurals, word order,
    # punctuation), per kind: one spelling, one file. Names that differ in a word, a value among
    # them (light / dark, 2 / 3), never merge: scopes only close in meaning are advice (`similar_scopes`).
    members: dict[int, list[int]] = {}
    for i, n in zip(alive, snap.scope_of[alive].tolist()):
        members.setdefault(n, []).append(i)
    for kind in ("learning", "issue"):
        numbers = [n for n in sorted(members) if snap.scopes[n][0] == kind]
        if not numbers:
            continue
        groups = Groups(len(numbers))
        named: dict[tuple[str, ...], int] = {}  # "currency format" and "Formats, currency" are one
        for at, n in enumerate(numbers):
            name = name_words(snap.scopes[n][2])
            if name in named:
                groups.union(named[name], at)
            named.setdefault(name, at)
        grouped = groups.groups()
        in_group = {i for g in grouped for i in g}
        clusters = grouped + [[i] for i in range(len(numbers)) if i not in in_group]
        for group in clusters:
            rows = sorted((i for g in group for i in members[numbers[g]]), key=id_key.__getitem__)
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
        digest = None if every_pair else keys.digest(config, snap, every, rows)
        found = None if digest is None else keys.recall(digest)
        if found is None:
            found = _duplicates(snap, config, every_pair, keys, entries, rows)
            if digest is not None:
                keys.keep(digest, found)
        for group in found:
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

    # 3. learnings that decayed away (weights use the merged fields). Every weight is first bounded
    # over arrays; only the learnings whose weight may be below the threshold are weighed one by
    # one, as shown to people (rounded), to decide (`every_pair`: every learning, the reference).
    order = [i for i, e in entries.items() if e.kind == "learning" and e.id not in removed and not e.always]
    if not every_pair and order:
        merged = [updates.get(entries[i].id, {}).get("fields", {}) for i in order]
        rough = weights(np.array([int(f.get("recurrence", entries[i].recurrence)) for i, f in zip(order, merged)]),
                        np.array([day_number(f.get("last_seen", entries[i].last_seen)) for i, f in zip(order, merged)]),
                        day, config)
        order = np.array(order)[rough < config.retire_weight_threshold + 1e-3].tolist()  # rounding moves it 5e-5
    for i in order:
        e = entries[i]
        fields = updates.get(e.id, {}).get("fields", {})
        w = weight(int(fields.get("recurrence", e.recurrence)), fields.get("last_seen", e.last_seen), day, config)
        if w < config.retire_weight_threshold:
            removed[e.id] = f"weight {w:.3f} below {config.retire_weight_threshold}"
            updates.pop(e.id, None)
            changes.append(f"retire {e.id} ({e.scope}): weight {w:.3f} < {config.retire_weight_threshold:g}")
    return Plan(changes, updates, removed)


def _duplicates(snap: Snapshot, config: Config, every_pair: bool, keys: Keys, entries: dict[int, Entry],
                rows: list[int]) -> list[list[int]]:
    """The groups of one scope's rows (positions in `rows`, sorted by id) that the judge is sure
    are one rule."""
    sims = snap.vectors[rows] @ snap.vectors[rows].T
    groups = Groups(len(rows))
    # only a pair at the dedup bar can be a duplicate: the judge is asked about those alone
    # (and of those, only about the pairs whose words could make them one rule), and only a
    # pair it is sure of merges (what it is unsure of, the report lists)
    pairs = np.argwhere(np.triu(sims >= config.threshold("dedup"), 1))
    if not every_pair:
        pairs = pairs[keys.shared([entries[i].body for i in rows], pairs)]
    for a, b in pairs.tolist():
        if differs(entries[rows[a]], entries[rows[b]]):  # the caller said both hold
            continue
        verdict = judge(entries[rows[b]].body, entries[rows[a]].body, float(sims[a, b]), config, same_scope=True)
        if verdict.relation == SAME:
            groups.union(a, b)
    return groups.groups()


def _apply(store: Store, snap: Snapshot, plan: Plan, entries: list[Entry | None], *,
           reference: bool = False, written: dict[str, list[Entry]] | None = None) -> dict[str, str | None]:
    """The new text of every file the plan touches (None: delete the file). `reference` parses
    the file again for every block it looks up (the slow reference the tests compare with).
    `written` is given the entries of each file written whose entries compact knows: every block
    of it came from a file the index read cleanly and nobody touched since, so its entry is the
    snapshot's with the plan's changes, its place read from the new text (`_placed`); the index
    takes them instead of parsing those files again. A file every block of which leaves (a merged
    scope's file, its blocks moved to the winning scope's file) is deleted without removing them
    one by one (`_leaving`, `_blocks_leaving`); `reference` edits those block by block too."""
    texts: dict[str, str] = {}
    # rel -> id -> entry (its line not placed yet) of each file edited, as the edits leave it; None:
    # a file whose entries compact does not know (the index parses it)
    held: dict[str, dict[str, Entry] | None] = {}

    def held_in(rel: str) -> dict[str, Entry] | None:
        if rel not in held:
            rows = snap.files.get(rel)
            ok = written is not None and rows is not None and unchanged(rel)
            held[rel] = {e.id: e for e in entries[rows.start:rows.start + rows.n] if e is not None} if ok else None
        return held[rel]
    # rel -> blocks moved into it, not yet added to its text: added all at once (`blocks.append_all`)
    # when the text is next read, not one by one (a merged scope's file gains thousands at 100,000)
    arriving: dict[str, list[str]] = {}

    def text_of(rel: str) -> str:
        if rel not in texts:
            path = store.path / rel
            texts[rel] = path.read_text(encoding="utf-8") if path.exists() else ""
        if rel in arriving:
            texts[rel] = blocks.append_all(texts[rel], arriving.pop(rel))
        return texts[rel]

    # rel -> (the text its blocks were read from, its blocks by id as parsed, the edits made since):
    # a file is parsed once, not once per entry changed in it (quadratic at 100,000 entries); an
    # edit inside the file shifts the blocks after it (kept as (end of the edited block as parsed,
    # characters added, lines added) and summed when a block is looked up: shifting every block
    # after each edit was quadratic again), anything else (an append, removing the last block)
    # reads the file again. `reference` parses the file for every block looked up instead.
    known: dict[str, tuple[str, dict[str, blocks.Block], list[tuple[int, int, int]]]] = {}

    clean: dict[str, bool] = {}  # rel -> whether the file is as the snapshot read it (so it validated)

    def unchanged(rel: str) -> bool:
        if rel not in clean:
            rows = snap.files.get(rel)
            try:
                st = os.stat(store.path / rel)
            except OSError:
                clean[rel] = False
            else:  # the index's stamp of a file; any other format only sends every file the slow way
                clean[rel] = rows is not None and rows.warning is None and rows.stamp == stamp_of(st)
        return clean[rel]

    def find(rel: str, entry_id: str, span_only: bool = False) -> blocks.Block:
        """The block `entry_id` of `rel` as it is now. In a file the index read without a warning
        and nobody touched since, it needs no parse: a block runs from its heading to the next
        line `blocks.parse` takes for one, its fields are the `- key: value` lines after its
        heading (every block there validated; an edit here keeps blocks valid), and title and body
        are left empty (an edit needs only its place and its fields; `span_only`: its place alone,
        to retire it). (read_text turns CRLF and a lone CR into LF, and the file is written back so.)"""
        text = text_of(rel)
        cached = known.get(rel)
        if not reference and (cached is None or cached[0] is not text) and unchanged(rel):
            heading = f"## {entry_id} {DOT}"  # (a line that starts so is one `blocks.parse` starts a block at)
            at = 0 if text.startswith(heading) else text.find(f"\n{heading}") + 1
            if at or text.startswith(heading):
                after = _HEADS.search(text, at + 1)
                end = after.start() if after else len(text)
                raw = text[at:end]
                return blocks.Block(entry_id, "", () if span_only else blocks.fields_of(raw), "",
                                    text.count("\n", 0, at) + 1, at, end, raw)
        if reference or cached is None or cached[0] is not text or entry_id not in cached[1]:
            parsed = blocks.parse(text, rel)
            by_id: dict[str, blocks.Block] = {}
            for b in parsed.blocks:
                by_id.setdefault(b.id, b)
            if parsed.errors or entry_id not in by_id:
                raise WhetstoneError(f"{rel} changed or does not validate; run compact again", exit_code=RUNTIME)
            cached = known[rel] = (text, by_id, [])
        b = cached[1][entry_id]
        delta = lines = 0
        for end, more, more_lines in cached[2]:
            if b.start >= end:
                delta, lines = delta + more, lines + more_lines
        return dataclasses.replace(b, start=b.start + delta, end=b.end + delta, line=b.line + lines) if delta or lines else b

    def edited(rel: str, block: blocks.Block, new_text: str, removed: bool) -> None:
        old = texts[rel]
        texts[rel] = new_text
        cached = known.pop(rel, None)
        if cached is None or cached[0] is not old or (removed and (block.end >= len(old) or not new_text)):
            return
        parsed = cached[1].pop(block.id)  # the block edited (or removed): never looked up again
        cached[2].append((parsed.end, len(new_text) - len(old), new_text.count("\n") - old.count("\n")))
        known[rel] = (new_text, cached[1], cached[2])

    target: dict[tuple[str, str], str] = {}  # (kind, scope key) -> file the merged scope lives in
    updates, removed = plan.updates, plan.removed
    for i in np.flatnonzero(snap.alive).tolist():  # (the live rows in order, not a numpy scalar a row)
        e = entries[i]
        if e is None:
            continue
        update = updates.get(e.id)
        if (update is None or update.get("scope", e.scope) == e.scope) and e.id not in removed:
            target.setdefault((e.kind, scope_key(e.scope)), e.path)
    # id -> row of its live copy (as `snap.by_id`, without a binary search an id)
    row_of = snap.by_id if reference else {entries[i].id: i for i in snap.by_key.values()}
    # the home of each entry updated, decided before any edit (as the edits' loop decides it)
    homes: dict[str, str] = {}
    for entry_id, update in updates.items():
        e = entries[row_of[entry_id]]
        homes[entry_id] = target.setdefault((e.kind, scope_key(update.get("scope", e.scope))), e.path)
    leaving = {} if reference else _leaving(snap, entries, plan, homes, row_of)
    # rel -> its blocks' sources by id, for a file every block leaves (retired or moved to another
    # file): it is deleted, so its blocks are taken from it as read, not removed one by one (None:
    # a file edited block by block)
    emptied: dict[str, dict[str, str] | None] = {}

    def emptied_of(rel: str) -> dict[str, str] | None:
        if rel not in emptied:
            emptied[rel] = _blocks_leaving(text_of(rel), leaving[rel]) if rel in leaving and unchanged(rel) else None
        return emptied[rel]
    for entry_id, why in plan.removed.items():
        e = entries[row_of[entry_id]]
        if emptied_of(e.path) is None:
            block = find(e.path, entry_id, span_only=True)
            edited(e.path, block, blocks.remove(text_of(e.path), block), removed=True)
        if held_in(e.path) is not None:
            held[e.path].pop(entry_id, None)
    for entry_id, update in plan.updates.items():
        e = entries[row_of[entry_id]]
        taken = emptied_of(e.path)
        if taken is None:
            block = find(e.path, entry_id)
        else:  # (its source as `find` gives it, fields read: the tail `_blocks_leaving` checked makes no difference)
            raw = taken[entry_id]
            block = blocks.Block(entry_id, "", blocks.fields_of(raw), "", 0, 0, len(raw), raw)
        fields = dict(update.get("fields", {}))
        scope = update.get("scope", e.scope)
        if scope != e.scope:
            fields["scope"] = scope
        new = blocks.update_fields(block, fields, update.get("provenance"))
        if update.get("always"):
            new = blocks.with_always(block, True, new)
        home = homes[entry_id]
        source = held_in(e.path)
        if source is not None:
            source.pop(entry_id, None)
        if held_in(home) is not None:  # the entry parsing its new block gives (its line placed at the end)
            if source is None:
                held[home] = None
            else:
                held[home][entry_id] = _updated(e, home, scope, fields, update)
        if home == e.path:
            edited(e.path, block, blocks.replace(text_of(e.path), block, new), removed=False)
        else:
            if taken is None:
                edited(e.path, block, blocks.remove(text_of(e.path), block), removed=True)
            if reference:
                texts[home] = blocks.append(text_of(home), new.rstrip("\r\n") + "\n")
                continue
            arriving.setdefault(home, []).append(new.rstrip("\r\n") + "\n")
    for rel in list(arriving):
        text_of(rel)
    for rel, taken in emptied.items():
        if taken is not None:
            texts[rel] = ""  # (every block left it: what removing them one by one leaves)
    if written is not None:
        for rel, text in texts.items():
            by_id = held.get(rel)
            placed = None
            if by_id is not None and not blank(text):
                placed = (_placed_by_line if reference else _placed)(rel, text, by_id)
            if placed is not None:
                written[rel] = placed
    return {rel: (None if blank(text) else text) for rel, text in texts.items()}


def _leaving(snap: Snapshot, entries: list[Entry | None], plan: Plan, homes: dict[str, str],
             row_of: dict[str, int]) -> dict[str, set[str]]:
    """rel -> the ids of its entries, for each file the plan empties: every row of it a live entry
    the plan retires or moves to another file, and no block moving into it."""
    out: dict[str, set[str]] = {}
    for entry_id in plan.removed:
        out.setdefault(entries[row_of[entry_id]].path, set()).add(entry_id)
    stays: set[str] = set()
    for entry_id, home in homes.items():
        rel = entries[row_of[entry_id]].path
        if home == rel or entry_id in plan.removed:  # (an id both retired and moved: edited as before)
            stays.add(rel)
        else:
            stays.add(home)
            out.setdefault(rel, set()).add(entry_id)
    kept: dict[str, set[str]] = {}
    for rel, ids in out.items():
        rows = snap.files.get(rel)
        if rel in stays or rows is None or rows.n != len(ids):
            continue
        if all(e is not None and e.id in ids for e in entries[rows.start:rows.start + rows.n]):
            kept[rel] = ids
    return kept


def _blocks_leaving(text: str, ids: set[str]) -> dict[str, str] | None:
    """The source of each block of `text` by id (as `_apply`'s `find` reads it), when its blocks are
    exactly `ids`, each once, nothing but blank space before the first, and none ends in a line of
    spaces (which removing the blocks after it first would take off); else None."""
    whole = "\n" + text  # (a heading on the first line: read as if after a newline; its place in
    heads = list(_HEAD_WITH_ID.finditer(whole))  # `whole` is the one after the newline in `text`)
    if len(heads) != len(ids) or len(heads) != whole.count("\n##") or not blank(text[:heads[0].start()]) \
            or "\r" in text:  # (a `##` line of another shape, text before the first heading: edited as before)
        return None
    out: dict[str, str] = {}
    for head, end in zip(heads, [h.start() for h in heads[1:]] + [len(text)]):
        bid, raw = head.group(1), text[head.start():end]
        if bid not in ids or bid in out or not raw.startswith(f"## {bid} {DOT}") or raw.rstrip() != raw.rstrip("\n"):
            return None
        out[bid] = raw
    return out


def blank(text: str) -> bool:
    """`not text.strip()` without copying a file's text."""
    return not text or text.isspace()


def _updated(e: Entry, rel: str, scope: str, fields: dict[str, str], update: dict[str, Any]) -> Entry:
    """The entry `blocks.parse` reads from `e`'s block after `_apply`'s edit (in file `rel`): its
    fields set (`update_fields`), the provenance lines added after the others, `applies: always`
    added; its line is placed later."""
    added = update.get("provenance")
    return tuple.__new__(Entry, (
        e.id, e.kind, rel, 0, e.title, scope, e.body,
        int(fields["recurrence"]) if "recurrence" in fields else e.recurrence,
        fields.get("first_seen", e.first_seen), fields.get("last_seen", e.last_seen),
        e.provenance + tuple(added) if added else e.provenance, e.always or bool(update.get("always")), e.differs))


# a heading line after a newline as `_placed_by_line` reads its id: up to the first space after `## `
_HEAD_WITH_ID = re.compile(r"\n## ([^ \n]*) ")


def _placed(rel: str, text: str, by_id: dict[str, Entry]) -> list[Entry] | None:
    """`_placed_by_line` without a regular expression tried at every line (`^` is no literal an
    expression's search can skip to) nor a step per heading to find its id and line: the text split
    at each `\n## <id> ` at once, the lines counted in the pieces between. It takes a text whose
    every `\n##` starts such a heading, and reads any other as `_placed_by_line` does."""
    if "\r" in text:
        return None
    lead = text.startswith("##")  # (a heading on the first line: read as if after a newline)
    whole = "\n" + text if lead else text
    pieces = _HEAD_WITH_ID.split(whole)  # before the first, then each heading's id and what follows it
    ids = pieces[1::2]
    if not ids or len(ids) != whole.count("\n##"):  # a `##` line of another shape: read line by line
        return _placed_by_line(rel, text, by_id)
    if pieces[0].strip() or len(ids) != len(by_id):
        return None
    line = pieces[0].count("\n") + (1 if lead else 2)  # the first heading's (its newline split off)
    out: list[Entry] = []
    for bid, more in zip(ids, map(str.count, pieces[2::2], repeat("\n"))):  # (the lines of each block)
        e = by_id.get(bid)
        if e is None:
            return None
        out.append(tuple.__new__(Entry, (*e[:3], line, *e[4:])))
        line += more + 1
    return out if len({e.id for e in out}) == len(out) else None


def _placed_by_line(rel: str, text: str, by_id: dict[str, Entry]) -> list[Entry] | None:
    """The entries of `text` in file order with their lines, from `by_id`, when its blocks are
    exactly those (each heading `## <id> ` of an entry there, once, nothing before the first, no
    carriage return); else None."""
    if "\r" in text:
        return None
    out: list[Entry] = []
    line, last = 1, 0
    for match in _HEADS.finditer(text):
        at = match.start()
        if not out and text[:at].strip():
            return None
        space = text.find(" ", at + 3)
        e = by_id.get(text[at + 3:space]) if space > 0 else None
        if e is None:
            return None
        line += text.count("\n", last, at)
        last = at
        out.append(tuple.__new__(Entry, (*e[:3], line, *e[4:])))
    if len(out) != len(by_id) or len({e.id for e in out}) != len(out):
        return None
    return out


# --- the behavioral pass --------------------------------------------------------------------------

@no_collection()  # (after the lock is let go: compact's own pause has ended)
def findings(store: Store, snap: Snapshot, config: Config, keys: Keys | None = None,
             entries: list[Entry | None] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The behavioral pass: what compact advises (and writes nothing for), from events.jsonl and
    the snapshot: learnings worth hardening, rules that may hold for every task, scopes with churn,
    stale learnings, conflicts never resolved, and look-alike pairs the judge could not settle."""
    day = today()
    log = list(events.read(store.path))

    def when(event: dict[str, Any]) -> dt.date | None:
        try:
            return dt.datetime.fromisoformat(str(event.get("ts"))).date()
        except ValueError:
            return None

    entries = entries if entries is not None else rows_of(snap)
    live_rows = np.fromiter(snap.by_key.values(), np.int64, len(snap.by_key))
    held = {entries[i].id for i in live_rows.tolist()}  # the ids of the live rows
    live = {e.id: e for e in entries if e is not None and e.id in held}
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
            "look_alikes": look_alikes(snap, config, entries=entries),
            "similar_scopes": similar_scopes(snap, config, keys if keys is not None else Keys())}


def look_alikes(snap: Snapshot, config: Config, limit: int = 200, *,
                entries: list[Entry | None] | None = None) -> list[dict[str, Any]]:
    """Pairs of entries in one scope (learnings and issues alike) that the judge finds contradicting,
    or likely one rule or opposites: for a person to settle, since compact merges only what the judge
    is sure of; never a pair recorded as holding side by side (`differs_from`). At most `limit`,
    contradictions first, then most alike. The judge reads only the pairs close enough to be
    likely: its `ask` bar, or a possible opposition (`may_oppose`) at the candidate floor."""
    entries = entries if entries is not None else rows_of(snap)
    floor, ask = config.threshold("candidate"), config.threshold("ask")
    found = []
    rows, starts, ends = _scope_runs(snap)
    for start, end in zip(starts.tolist(), ends.tolist()):
        run = rows[start:end].tolist()
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
    return found[:limit]


def similar_scopes(snap: Snapshot, config: Config, keys: Keys, limit: int = 50) -> list[dict[str, Any]]:
    """Scopes of one kind whose phrases are close (the `scope_merge` cosine) but whose names are not
    the same: compact does not merge them (one may be the other's opposite), a person may, with
    revise --scope. At most `limit`, closest first."""
    found = []
    used = np.unique(snap.scope_of[snap.alive]).tolist()
    for kind in ("learning", "issue"):
        numbers = [n for n in used if snap.scopes[n][0] == kind]
        if len(numbers) < 2:
            continue
        phrases = snap.phrases[numbers]
        for a, b in keys.close_pairs(phrases, config.threshold("scope_merge")):
            one, two = snap.scopes[numbers[a]][2], snap.scopes[numbers[b]][2]
            if name_words(one) != name_words(two):
                found.append({"scopes": sorted([one, two]), "kind": kind,
                              "similarity": round(float(phrases[a] @ phrases[b]), 3)})
    found.sort(key=lambda f: (-f["similarity"], f["scopes"]))
    return found[:limit]


def _by_scope(snap: Snapshot) -> list[list[int]]:
    """The live rows of each scope (by its key, learnings and issues together) that holds two or
    more, each sorted by id; grouped row by row (`_scope_runs` groups them over arrays: this is the
    reference the tests compare it with)."""
    by_scope: dict[str, list[int]] = {}
    for i in np.flatnonzero(snap.alive).tolist():
        by_scope.setdefault(snap.scopes[int(snap.scope_of[i])][1], []).append(i)
    return [sorted(rows, key=lambda i: snap.id_key[i]) for rows in by_scope.values() if len(rows) > 1]


def _scope_runs(snap: Snapshot) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_by_scope` over arrays: the live rows grouped by scope (in an order of scopes that means
    nothing), sorted by id in each, and the start and end in them of each scope that holds two or
    more."""
    alive = np.flatnonzero(snap.alive)
    number: dict[str, int] = {}
    key_of = np.array([number.setdefault(key, len(number)) for _, key, _ in snap.scopes] or [0], np.int64)
    group = key_of[snap.scope_of[alive]]
    order = np.lexsort((snap.id_key[alive], group))
    rows, group = alive[order], group[order]
    cuts = np.flatnonzero(np.diff(group)) + 1
    starts, ends = np.concatenate([[0], cuts]).astype(np.int64), np.concatenate([cuts, [len(rows)]]).astype(np.int64)
    two = ends - starts > 1
    return rows, starts[two], ends[two]


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


# --- every skill ----------------------------------------------------------------------------------

def compact_all(*, dry_run: bool = False, config: Config | None = None) -> dict[str, Any]:
    """Compact every skill, then report preferences shared by several skills as global candidates
    (see `global_layer.clusters`). Writes nothing global."""
    ws = Workspace.of(config)
    results = [_compact(ws, name, dry_run) for name in list_skills(ws.config)]
    return {"skills": results, "clusters": clusters(ws)}
