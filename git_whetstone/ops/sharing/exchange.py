"""Sharing taste (SPEC §4 export/import): a store exported as a pack or a rule file, and a pack
or a rule file imported into a store.

Import judges each entry against the store as it was before, with capture's judge, and merges only
what the judge is sure of. Every write records its source in a provenance line ending
`(import:<source>:<rule hash>)`: that marker is how a second import of the same pack recognises what
it already brought in, so importing again changes nothing and makes no commit.
"""
from __future__ import annotations

import datetime as dt
import gc
import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ...base.clock import today
from ...base.config import Config
from ...base.errors import RUNTIME, WhetstoneError, shown
from ...base.files import write_atomic
from ...format import blocks, edits
from ...format.entry import Entry
from ...format.layout import scope_key
from ...semantics.judge import CONTRADICTS, SAME, triage
from ..writing.attach import create
from ..writing.context import Context, candidate
from ..workspace import Workspace
from ..writing.inputs import clean_body, clean_provenance, clean_scope
from .packs import MAX_EXPANDED, Item, build_pack, marker, read_pack, rule_hash, store_items
from .rules import read_rules, render_rules

FORMATS = ("pack", "agents-md", "claude-md", "cursor-rule")
MODES = ("merge", "replace")
MAX_RULE_FILE = 1 << 20        # an AGENTS.md / CLAUDE.md / .mdc to import
DEFAULT_MIN_WEIGHT = 0.3       # rule files list learnings at least this firm: a fresh one-off (0.5)
#                                is in, one left unused for ~4 months or more is out
RULES_SOURCE = "rules"         # the source name in markers of entries read from a rule file
_ALSO = "reinforced once already by this import"  # a noop that still records its source marker
_MARKER = re.compile(r"\(import:([a-z0-9._-]+):([0-9a-f]{16})\)")


def export(skill: str, output: str | None = None, fmt: str = "pack", *, min_weight: float = DEFAULT_MIN_WEIGHT,
           config: Config | None = None) -> dict[str, Any]:
    """Write `skill`'s entries as a pack (default file `<skill>.whetstone.tar.gz` in the current
    directory) or as a rule file (`agents-md`, `claude-md`, `cursor-rule`: returned as `text`
    unless `output` names a file). Rule files list every issue and the learnings weighing at least
    `min_weight`."""
    ws = Workspace.of(config)
    fmt = _choice(fmt, FORMATS, "format")
    if isinstance(min_weight, bool) or not isinstance(min_weight, (int, float)) or not 0 <= min_weight <= 1:
        raise WhetstoneError(f"min_weight must be a number from 0 to 1, got {shown(min_weight)}")
    store = ws.store(skill, must_exist=True)
    day = today()
    if fmt == "pack" and output == "-":
        raise WhetstoneError("a pack is binary: give a file name to write it to")
    # No collection passes while the entries are read and packed: 100,000 of them make hundreds of
    # thousands of small objects, none of them garbage, and every full pass would walk them all again
    # (0.3-0.8 s of CPU). The collector is left as it was found.
    collecting = gc.isenabled()
    gc.disable()
    try:
        items, warnings = store_items(store)
        data = build_pack(store.skill, items, day) if fmt == "pack" else b""
    finally:
        if collecting:
            gc.enable()
    learnings = sum(i.kind == "learning" for i in items)
    result: dict[str, Any] = {"skill": store.skill, "format": fmt, "path": None, "learnings": learnings,
                              "issues": len(items) - learnings, "warnings": warnings}
    if fmt == "pack":
        target = Path(output) if output else Path.cwd() / f"{store.skill}.whetstone.tar.gz"
        _write_output(target, data)
        result.update(path=str(target), bytes=len(data), sha256=hashlib.sha256(data).hexdigest(),
                      scopes=len({scope_key(i.scope) for i in items}))  # distinct scopes, as scopes compare
        return result
    text, listed = render_rules(store.skill, items, fmt, day, float(min_weight), ws.config)
    result.update(rules=listed["issues"], preferences=listed["learnings"], min_weight=float(min_weight),
                  left_out=learnings - listed["learnings"])
    if output and output != "-":
        target = Path(output)
        _write_output(target, text)
        result["path"] = str(target)
    else:
        result["text"] = text
    return result


def _write_output(target: Path, data: str | bytes) -> None:
    if target.is_dir():
        raise WhetstoneError(f"{target} is a directory: give a file name to write to")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)  # .cursor/rules/ in a project that has none yet
        write_atomic(target, data)
    except OSError as exc:
        raise WhetstoneError(f"cannot write {target}: {exc.strerror or exc}", exit_code=RUNTIME) from None


@dataclass
class Step:
    """What the import does with one item: add, reinforce, noop or conflict."""

    item: Item
    action: str
    marker: str
    target: Entry | None = None
    reason: str = ""
    bump: bool = False      # a reinforce that raises the recurrence (once per entry per import)
    mark: bool = False      # the pack says the rule holds for every task; the store's copy does not yet
    new_id: str | None = None
    similar: list[dict[str, Any]] = field(default_factory=list)  # look-alikes the judge was unsure of


def import_pack(skill: str, source: str, mode: str = "merge", dry_run: bool = False, fmt: str | None = None, *,
                progress: Callable[[int, int], None] | None = None, config: Config | None = None) -> dict[str, Any]:
    """Import a pack (or, with `fmt`, a rule file) into `skill`, creating the store if needed.

    `merge` adds what is new, reinforces near-duplicate learnings once, and skips (and reports)
    what the store already holds or what contradicts it; `replace` swaps every entry for the
    pack's. Either way it is one commit, or none when nothing changes; `dry_run` only reports.
    `progress(done, total)` is called as entries are judged."""
    ws = Workspace.of(config)
    mode = _choice(mode, MODES, "mode")
    fmt = "pack" if fmt in (None, "") else _choice(fmt, FORMATS, "format")
    path = Path(source) if isinstance(source, str) and source else None
    if path is None:
        raise WhetstoneError(f"give the pack to import, got {shown(source)}")
    data = _read_source(path, MAX_EXPANDED if fmt == "pack" else MAX_RULE_FILE)
    day = today()
    if fmt == "pack":
        pack = read_pack(data, path.name)
        items, origin, label = pack.items, pack.skill, f"pack {pack.skill}"
        about = {"skill": pack.skill, "whetstone_version": pack.version, "date": pack.date}
    else:
        items, origin, label = read_rules(data, path.name, fmt, day), RULES_SOURCE, path.name
        about = {"file": path.name}

    store = ws.store(skill)
    result: dict[str, Any] = {"skill": store.skill, "source": str(path), "format": fmt, "from": about, "mode": mode,
                              "dry_run": bool(dry_run), "status": None, "commit": None, "committed": [],
                              "reinforced": [], "noop": [], "conflicts": [], "removed": [], "warnings": []}
    if not store.exists:
        if dry_run:  # nothing to judge against, and nothing may be written: not even the store
            steps = [Step(item, "add", marker(origin, item)) for item in items]
            return {**result, **_summary(steps, [], None, dry_run)}
        create(store)
    tick = _ticker(progress, len(items) * (1 if dry_run else 2))  # judging, then writing
    with store.lock():
        ctx = Context.open(ws, store)
        live = ctx.live()
        if mode == "merge":
            steps, removed = _plan_merge(ctx, live, items, origin, fmt, tick), []
        else:
            steps, removed = _plan_replace(live, items, origin)
            for _ in steps:
                tick()
        result["warnings"] = list(ctx.snap.warnings) + store.warnings
        # (a noop that only records its marker always rides along with a reinforcement)
        if not dry_run and (removed or any(s.action in ("add", "reinforce") or s.mark for s in steps)):
            _apply(ctx, steps, removed, label, day, mode, tick)
            result["commit"] = store.head()
    return {**result, **_summary(steps, removed, result["commit"], dry_run)}


def _ticker(progress: Callable[[int, int], None] | None, total: int) -> Callable[[], None]:
    """A step counter that reports `progress(done, total)` after each step."""
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(min(done, total), total)
    return tick


def _read_source(path: Path, limit: int) -> bytes:
    try:
        if not path.is_file():
            raise WhetstoneError(f"{path}: no such file" if not path.exists() else f"{path} is not a regular file")
        with path.open("rb") as handle:
            data = handle.read(limit + 1)  # bounded, whatever stat said a moment ago
        if len(data) > limit:
            raise WhetstoneError(f"{path.name}: refusing it: larger than {limit >> 20} MiB")
        return data
    except OSError as exc:
        raise WhetstoneError(f"cannot read {path}: {exc.strerror or exc}", exit_code=RUNTIME) from None


def _plan_merge(ctx: Context, live: list[Entry], items: list[Item], origin: str, fmt: str,
                tick: Callable[[], None]) -> list[Step]:
    """Judge every item against the store as it was before the import (never against each
    other, so a pack's own near-duplicates all arrive, as they were in its store). An item is not
    judged against the store's copy of an entry the pack says holds beside it (`differs_from`)."""
    markers: dict[str, Entry] = {}
    same_rule: dict[str, list[Entry]] = {}
    for e in live:
        for found in _markers(e):
            markers.setdefault(found, e)
        same_rule.setdefault(rule_hash(e.kind, e.scope, e.body), []).append(e)
    steps: list[Step] = []
    bumped: set[str] = set()
    marked: set[str] = set()
    named_by: dict[str, set[str]] = defaultdict(set)  # a pack id -> the pack ids whose differs_from name it
    for item in items:
        for other in item.differs:
            named_by[other].add(item.id)
    met: dict[str, str] = {}  # a pack id -> the store entry it was met as, so far
    for item in items:
        apart = {met[i] for i in (*item.differs, *named_by.get(item.id, ())) if i in met}
        step = _judge(ctx, item, marker(origin, item), markers, same_rule, fmt, bumped, apart)
        if item.id and step.action in ("noop", "reinforce") and step.target is not None:
            met[item.id] = step.target.id
        if item.always and step.target is not None and not step.target.always and step.action in ("noop", "reinforce") \
                and step.reason != "imported before" and step.target.id not in marked:
            step.mark = True  # the store's copy takes the mark: a rule for every task stays one
            marked.add(step.target.id)
        steps.append(step)
        tick()
    return steps


def _judge(ctx: Context, item: Item, mark: str, markers: dict[str, Entry],
           same_rule: dict[str, list[Entry]], fmt: str, bumped: set[str], apart: set[str]) -> Step:
    if mark in markers:
        return Step(item, "noop", mark, markers[mark], "imported before")
    provenance = {clean_provenance(p, cut=True) for p in item.provenance}
    for e in same_rule.get(rule_hash(item.kind, item.scope, item.body), []):
        # The same rule, and nothing in its history the store does not know: this store is
        # where it came from (or a rule file restates it). A teammate's identical rule with its
        # own history is evidence, and falls through to be reinforced.
        if fmt != "pack" or provenance <= {clean_provenance(p, cut=True) for p in e.provenance}:
            return Step(item, "noop", mark, e, "already in the store")
    judged = [(e, v) for e, v in ctx.nearest(item.body, item.scope) if e.id not in apart]
    decisive = next(((e, v) for e, v in judged if v.relation in (SAME, CONTRADICTS)), None)
    if decisive is None:  # nothing the judge is sure of: both rules are kept, the look-alikes listed
        return Step(item, "add", mark, similar=[candidate(e, v) for e, v in triage(judged).mentioned])
    old, verdict = decisive
    if verdict.relation == CONTRADICTS:
        return Step(item, "conflict", mark, old, verdict.reason)
    if old.kind == "issue":
        return Step(item, "noop", mark, old, "an issue already says this")
    if item.kind == "issue":  # a hard rule the store holds only as a preference: keep both
        return Step(item, "add", mark, old, f"hardens learning {old.id}")
    if old.id in bumped:
        return Step(item, "noop", mark, old, _ALSO)
    bumped.add(old.id)
    return Step(item, "reinforce", mark, old, "near-duplicate", bump=True)


def _plan_replace(live: list[Entry], items: list[Item], origin: str) -> tuple[list[Step], list[str]]:
    """Every entry out, every item in; nothing at all when the store already holds exactly what
    this pack brought in by an earlier replace (or merge into an empty store)."""
    wanted = {marker(origin, item) for item in items}
    held = [set(_markers(e)) & wanted for e in live]
    if len(live) == len(items) and all(held) and set().union(*held) == wanted:
        return [Step(item, "noop", marker(origin, item), None, "already the store's content") for item in items], []
    steps = [Step(item, "add", marker(origin, item)) for item in items]
    return steps, sorted((e.id for e in live), key=blocks.id_order)


def _markers(e: Entry) -> list[str]:
    """The import markers an entry's provenance holds, in order."""
    return [f"import:{m.group(1)}:{m.group(2)}" for line in e.provenance for m in _MARKER.finditer(line)]


def _apply(ctx: Context, steps: list[Step], removed: list[str], label: str, day: dt.date, mode: str,
           tick: Callable[[], None]) -> None:
    """Write the plan as one commit."""
    stamp = day.isoformat()
    pending: dict[str, str | None] = {}

    def named(item: Item) -> str:  # "pack theirs L3", or "AGENTS.md:7" for a rule file
        return f"{label} {item.id}" if item.id else item.where

    def text_of(rel: str) -> str:
        if rel in pending:
            return pending[rel] or ""
        return ctx.read(rel)[0]

    if removed:
        for kind in ("learning", "issue"):
            for path in ctx.store.scope_files(kind):
                pending[ctx.store.rel(path)] = None
    touched: dict[str, list[Step]] = {}
    for step in steps:
        if step.target is not None and (step.action == "reinforce" or step.reason == _ALSO or step.mark):
            touched.setdefault(step.target.id, []).append(step)
    for entry_id, group in touched.items():
        entry = group[0].target
        text = text_of(entry.path)
        block = next((b for b in blocks.parse(text, entry.path).blocks if b.id == entry_id), None)
        if block is None:
            raise WhetstoneError(f"{entry_id} moved while importing; try again", exit_code=RUNTIME)
        changes = {"recurrence": str(block.recurrence + 1), "last_seen": max(stamp, block.get("last_seen") or "")}
        lines = [f"{stamp} — reinforced by import from {named(s.item)} ({s.marker})" for s in group]
        new = edits.update_fields(block, changes if any(s.bump for s in group) else {}, lines)
        if any(s.mark for s in group):
            new = edits.with_always(block, True, new)
        pending[entry.path] = edits.replace(text, block, new)
        for s in group:
            s.new_id = entry_id
    for step in steps:
        tick()
        if step.action != "add":
            continue
        item = step.item
        provenance = [clean_provenance(p, cut=True) for p in item.provenance]
        provenance.append(f"{stamp} — imported from {named(item)} ({step.marker})")
        body, scope = clean_body(item.body), clean_scope(item.scope)
        step.new_id = ctx.add_block(item.kind, body, scope, provenance, pending, recurrence=item.recurrence,
                                    first_seen=item.first_seen if item.kind == "learning" else None,
                                    last_seen=item.last_seen if item.kind == "learning" else None,
                                    always=item.always)
    _carry_differs(steps, pending)
    added = [s for s in steps if s.action == "add"]
    reinforced = [s for s in steps if s.action == "reinforce"]
    if mode == "replace":
        subject = f"import: replace every entry with {label} ({len(added)} in, {len(removed)} out)"
    else:
        subject = f"import: {len(added)} added, {len(reinforced)} reinforced from {label}"
    lines = [f"- remove {i}" for i in removed]
    lines += [f"- add {s.new_id} ({s.item.scope}) from {named(s.item)}" for s in added]
    lines += [f"- reinforce {s.new_id} ({s.target.scope}) from {named(s.item)}" for s in reinforced]
    lines += [f"- mark {s.new_id} ({s.target.scope}) for every task, as {named(s.item)} is" for s in steps if s.mark]
    ctx.commit(subject + "\n\n" + "\n".join(lines) + "\n",
               {rel: (text if text and text.strip() else None) for rel, text in pending.items()})


def _carry_differs(steps: list[Step], pending: dict[str, str | None]) -> None:
    """Write the pack's `differs_from` pairs on the blocks this import adds, with the store's ids: a
    pack id stands for the entry it was added as, or met in the store (reinforced or a noop); an id
    that stands for none (an entry the pack does not hold, one left out as a conflict) is dropped.
    A pair goes on an added block; a pair of two entries the store already held is left as the
    store has it (its owner's judgement, not the pack's)."""
    became = {s.item.id: s.new_id if s.action == "add" else s.target.id for s in steps
              if s.item.id and (s.action == "add" or s.action in ("noop", "reinforce") and s.target is not None)}
    added = {s.item.id for s in steps if s.action == "add" and s.item.id}
    extra: dict[str, set[str]] = defaultdict(set)  # an added entry's id -> the store ids it differs from
    for step in steps:
        for other in step.item.differs:
            one, two = became.get(step.item.id), became.get(other)
            if one is None or two is None or one == two:
                continue
            if step.item.id in added:
                extra[one].add(two)
            elif other in added:
                extra[two].add(one)
    if not extra:
        return
    for rel, text in pending.items():
        if not text or rel == "next_ids.json":
            continue
        found = [b for b in blocks.parse(text, rel, rel.split("/", 1)[0]).blocks if b.id in extra]
        for block in sorted(found, key=lambda b: b.start, reverse=True):  # later blocks first: offsets hold
            text = edits.replace(text, block, edits.with_differs(block, extra[block.id]))
        pending[rel] = text


def _summary(steps: list[Step], removed: list[str], commit: str | None, dry_run: bool) -> dict[str, Any]:
    """What an import did with each item, as its JSON reports it: the lists, their counts, the
    status, and the commit (only when something was committed)."""
    lists: dict[str, list[Any]] = {"committed": [], "reinforced": [], "noop": [], "conflicts": [], "similar": [],
                                   "marked": []}
    for step in steps:
        item = step.item
        source = {"from": item.label, "kind": item.kind, "scope": item.scope, "rule": item.body}
        if step.mark:  # the store's copy now holds for every task, as the imported one does
            lists["marked"].append({"id": step.target.id, "from": item.label, "scope": step.target.scope,
                                    "rule": step.target.body})
        if step.action == "add":
            lists["committed"].append({"id": step.new_id, **source})
            if step.similar:  # kept beside look-alikes the judge could not tell apart: for a person to settle
                lists["similar"].append({"id": step.new_id, **source, "similar": step.similar})
        elif step.action == "reinforce":
            lists["reinforced"].append({"id": step.target.id, "from": item.label, "scope": step.target.scope,
                                        "rule": step.target.body, "recurrence": step.target.recurrence + 1})
        elif step.action == "noop":
            lists["noop"].append({"id": step.target.id if step.target else None, "from": item.label,
                                  "reason": step.reason})
        else:
            lists["conflicts"].append({**source, "conflicts_with": {
                "id": step.target.id, "rule": step.target.body, "scope": step.target.scope}, "reason": step.reason})
    counts = {key: len(lists[key]) for key in ("committed", "reinforced", "noop", "conflicts", "marked")} | {
        "removed": len(removed)}
    changes = counts["committed"] + counts["reinforced"] + counts["marked"] + len(removed)
    status = "dry_run" if dry_run else ("committed" if commit and changes else "unchanged")
    return {"status": status, "commit": commit if status == "committed" else None, **lists, "removed": removed,
            "counts": counts}


def _choice(value: object, allowed: tuple[str, ...], what: str) -> str:
    if isinstance(value, str) and value.strip().lower() in allowed:
        return value.strip().lower()
    raise WhetstoneError(f"unknown {what} {shown(value)}: use one of {', '.join(allowed)}")

