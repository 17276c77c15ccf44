"""Merging taste: what git runs to merge a store's files, and the pass over the whole store that
a merge needs once git has merged it file by file.

- **Scope files** merge block by block (`merge_scope`): the union of the blocks; a block changed
  on one side only takes that side; a learning changed on both sides keeps every reinforcement
  (recurrence is the base's plus both sides' increments), the earliest first_seen, the latest
  last_seen and every provenance line; a block whose body (or scope) both sides changed
  differently is left as a conflict between markers, which `validate` explains. A block one side
  deleted and the other changed is kept: data is never lost to a merge.
- **next_ids.json** merges to the per-key maximum (`merge_ids`).
- **Ids** must be unique per store, but a driver sees one file at a time, so `settle` looks at
  the merged store as a whole: two copies of an entry that existed before (moved on one side,
  changed on the other) become one; two different entries minted under the same id on two
  machines keep it for one of them (the earlier first_seen, then the smaller content hash) and
  re-mint the other above every id either side ever used, with the rename recorded in its
  provenance.

Everything here depends only on the contents of the two sides (and their merge base and
history), never on which side is "ours", so A merging B and B merging A give the same blocks
and a later merge of the two merges is trivial.

The drivers are configured per clone (`install_drivers`): a `merge.<name>.driver` command in
.git/config and the attributes that select it in .git/info/attributes. Git never clones either,
so installing both together, with the hooks, is what makes a clone merge this way.
"""
from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import blocks, gitbin, validation
from .blocks import Block
from .errors import WhetstoneError
from .store import Store, ids_text, scope_key

BLOCKS_DRIVER = "whetstone-blocks"
IDS_DRIVER = "whetstone-ids"
_BEGIN = "# whetstone: merge drivers (git whetstone hooks install/uninstall keep these lines)"
_END = "# whetstone: end of merge drivers"
ATTRIBUTES = (f"/learnings/*.md merge={BLOCKS_DRIVER}", f"/issues/*.md merge={BLOCKS_DRIVER}",
              f"/next_ids.json merge={IDS_DRIVER}")
_OPEN = re.compile(r"^<{7,}(?: |$)")
_CLOSE = re.compile(r"^>{7,}(?: |$)")
_HEADING = re.compile(r"^## ([LI][1-9]\d*) \u00b7 ")
_DUPLICATE = "re-minted from {old}: another entry was minted as {old} on another machine"


# --- one scope file ---------------------------------------------------------------------------------

@dataclass
class Piece:
    """A stretch of a scope file: one block, or a conflict region left by a merge, or stray text.
    `text` has no separator after it; `ids` are the ids its headings claim; `block` is the block
    when the piece parses on its own."""

    text: str
    ids: tuple[str, ...]
    block: Block | None


def pieces(text: str, rel: str) -> list[Piece]:
    """Split a scope file into pieces, leniently: a broken block or a conflict region is a piece
    too, so nothing a file holds is lost by reading it this way."""
    folder = rel.split("/", 1)[0] if "/" in rel else None
    out: list[Piece] = []
    current: list[str] = []
    region = False

    def flush(conflict: bool = False) -> None:
        while current and not current[-1].strip():
            current.pop()
        if any(line.strip() for line in current):
            chunk = "\n".join(current)
            ids = tuple(dict.fromkeys(m.group(1) for line in current for m in [_HEADING.match(line)] if m))
            block = None
            if not conflict and current[0].startswith("## "):
                parsed = blocks.parse(chunk + "\n", rel, folder if folder in blocks.PREFIX else None)
                if not parsed.errors and len(parsed.blocks) == 1:
                    block = parsed.blocks[0]
            out.append(Piece(chunk, ids, block))
        current.clear()

    for line in text.replace("\r\n", "\n").split("\n"):
        if region:
            current.append(line)
            if _CLOSE.match(line):
                region = False
                flush(conflict=True)
        elif _OPEN.match(line):
            flush()
            current.append(line)
            region = True
        elif line.startswith("## "):
            flush()
            current.append(line)
        else:
            current.append(line)
    flush(conflict=region)
    return out


def join(parts: list[str], newline: str = "\n") -> str:
    """Pieces back into a file: one blank line between them, one newline at the end."""
    text = "\n\n".join(p for p in parts if p) + "\n" if any(parts) else ""
    return text.replace("\n", newline) if newline != "\n" else text


def _norm(block: Block | None) -> str | None:
    """A block's text without the blank lines after it, for comparing sides."""
    return None if block is None else re.sub(r"(?:\n[ \t]*)+\Z", "", block.raw.replace("\r\n", "\n"))


def _body_key(block: Block) -> str:
    return " ".join(block.body.split())


def content_hash(block: Block) -> str:
    return hashlib.sha1(f"{block.kind}\n{scope_key(block.scope)}\n{_body_key(block)}".encode()).hexdigest()


def rank(block: Block) -> tuple[str, str]:
    """Which of two entries minted under one id keeps it: the earlier first_seen, then the
    smaller content hash. Depends on the blocks only, so every machine decides alike."""
    return block.get("first_seen") or "9999-12-31", content_hash(block)


def same_rule(a: Block, b: Block) -> bool:
    return a.kind == b.kind and scope_key(a.scope) == scope_key(b.scope) and _body_key(a) == _body_key(b)


def _three(base: Any, ours: Any, theirs: Any) -> tuple[Any, bool]:
    """A three-way choice of one value: (value, True), or (None, False) when both sides changed it
    differently."""
    if ours == theirs:
        return ours, True
    if base is not None and ours == base:
        return theirs, True
    if base is not None and theirs == base:
        return ours, True
    return None, False


@dataclass
class Outcome:
    """What one id becomes in a merged file: a block's text, or a conflict (two versions)."""

    text: str | None = None
    versions: tuple[str, str] | None = None
    id: str = ""


def combine(base: Block | None, ours: Block, theirs: Block) -> Outcome:
    """One entry changed on both sides (or minted on both as the same rule): the metadata merged,
    the body and scope three-way, a conflict when both changed one of them differently."""
    unit, ok_body = _three(base and (base.title, base.body), (ours.title, ours.body), (theirs.title, theirs.body))
    if not ok_body and base is None and _body_key(ours) == _body_key(theirs):
        unit, ok_body = min((ours.title, ours.body), (theirs.title, theirs.body)), True
    scope, ok_scope = _three(base and base.get("scope"), ours.get("scope"), theirs.get("scope"))
    if not ok_scope and scope_key(ours.scope) == scope_key(theirs.scope):
        scope, ok_scope = min(ours.get("scope") or "", theirs.get("scope") or ""), True
    meta: list[tuple[str, str]] = []
    if ours.kind == "learning":
        if base is not None:  # every reinforcement counts, whichever machine saw it
            count = base.recurrence + (ours.recurrence - base.recurrence) + (theirs.recurrence - base.recurrence)
        else:
            count = max(ours.recurrence, theirs.recurrence)
        first, ok = _three(base and base.get("first_seen"), ours.get("first_seen"), theirs.get("first_seen"))
        if not ok:
            first = min(ours.get("first_seen") or "", theirs.get("first_seen") or "")
        last = max(ours.get("last_seen") or "", theirs.get("last_seen") or "")
        meta += [("recurrence", str(max(1, count))), ("first_seen", first), ("last_seen", max(last, first))]
    provenance = _provenance(base, ours, theirs)

    def render(title: str, body: str, scope_value: str) -> str:
        fields = meta + [("scope", scope_value)] + [("provenance", p) for p in provenance]
        return blocks.render(ours.id, title, fields, body).rstrip("\n")

    if ok_body and ok_scope:
        return Outcome(text=render(unit[0], unit[1], scope), id=ours.id)
    return Outcome(versions=(render(ours.title, ours.body, scope if ok_scope else ours.get("scope") or ""),
                             render(theirs.title, theirs.body, scope if ok_scope else theirs.get("scope") or "")),
                   id=ours.id)


def _provenance(base: Block | None, ours: Block, theirs: Block) -> list[str]:
    """Every provenance line either side has (as written), as a multiset merge: the base's lines in
    their order (unless a side removed one), then the lines the sides added, sorted."""
    def values(block: Block | None) -> list[str]:
        return [v for k, v in block.fields if k == "provenance"] if block is not None else []

    old = values(base)
    need = Counter(values(ours)) + Counter(values(theirs))
    need.subtract(Counter(old))
    out = []
    for line in old:
        if need[line] > 0:
            out.append(line)
            need[line] -= 1
    return out + sorted((+need).elements())


def merge_block(base: Block | None, ours: Block | None, theirs: Block | None) -> list[Outcome]:
    """What one id of a scope file becomes: nothing, one block, a conflict, or (minted on both sides
    for different rules) both blocks under the same id, for `settle` to re-mint one of them."""
    o, a, b = _norm(base), _norm(ours), _norm(theirs)
    if a == b:
        return [Outcome(text=a, id=ours.id)] if ours is not None else []
    if o is not None and a == o:
        return [Outcome(text=b, id=theirs.id)] if theirs is not None else []
    if o is not None and b == o:
        return [Outcome(text=a, id=ours.id)] if ours is not None else []
    if ours is None or theirs is None:  # deleted on one side, changed on the other: keep the change
        kept = ours or theirs
        return [Outcome(text=_norm(kept), id=kept.id)]
    if base is None and not same_rule(ours, theirs):
        return [Outcome(text=_norm(x), id=x.id) for x in sorted((ours, theirs), key=rank)]
    return [combine(base, ours, theirs)]


def _side(text: str, rel: str, base: bool = False) -> tuple[list[str], dict[str, Block]] | None:
    """A side of a three-way file merge: its ids in order and their blocks; None when some part of
    it is not a block (broken markdown, conflict markers) or, on either side, an id repeats: only
    git's line merge can take those without losing anything. (A base may repeat an id: git builds
    a virtual one from several merge bases, through this driver; its first copy stands.)"""
    order: list[str] = []
    found: dict[str, Block] = {}
    for piece in pieces(text, rel):
        if piece.block is None:
            return None
        if piece.block.id in found:
            if not base:
                return None
            continue
        order.append(piece.block.id)
        found[piece.block.id] = piece.block
    return order, found


def merge_scope(base: str, ours: str, theirs: str, rel: str, marker_size: int = 7) -> tuple[str, list[str]] | None:
    """Merge three versions of a scope file block by block: (merged text, ids left in conflict),
    or None when a version is not made of blocks (the caller falls back to a line merge).

    Order: blocks that were in the base keep the base's order (or the order one side gave them);
    blocks new on a side follow the block they followed there, each side's new blocks together."""
    sides = [_side(base, rel, base=True), _side(ours, rel), _side(theirs, rel)]
    if any(s is None for s in sides):
        return None
    (o_ids, o), (a_ids, a), (b_ids, b) = sides  # type: ignore[misc]
    outcomes = {bid: merge_block(o[bid], a.get(bid), b.get(bid)) for bid in o_ids}
    survivors = {bid for bid, out in outcomes.items() if out}
    skeleton = _skeleton(o_ids, a_ids, b_ids, survivors)
    # new blocks, by the old block they follow on their side (None: the top of the file)
    groups: dict[str | None, dict[str, list[str]]] = defaultdict(lambda: {"a": [], "b": []})
    for side, seq in (("a", a_ids), ("b", b_ids)):
        anchor = None
        for bid in seq:
            if bid in o:
                anchor = bid if bid in survivors else anchor
            else:
                groups[anchor][side].append(bid)
    parts: list[str] = []
    conflicts: list[str] = []
    emitted: set[str] = set()

    def emit(outs: list[Outcome]) -> None:
        for out in outs:
            if out.versions is None:
                parts.append(out.text or "")
            else:
                conflicts.append(out.id)
                parts.append(_conflict_text(out, marker_size))

    def run_order(run: tuple[str, list[str]]) -> tuple:
        ranks = [rank((a if run[0] == "a" else b)[bid]) for bid in run[1]]
        return not ranks, sorted(ranks), ranks

    def emit_new(anchor: str | None) -> None:
        group = groups.get(anchor)
        if not group:
            return
        # each side's new blocks together; the side holding the better-ranked block goes first
        runs = sorted([("a", group["a"]), ("b", group["b"])], key=run_order)
        for side, ids in runs:
            for bid in ids:
                if bid in emitted:
                    continue
                mine, other = (a, b) if side == "a" else (b, a)
                if bid in other and same_rule(mine[bid], other[bid]):
                    emitted.add(bid)
                    emit(merge_block(None, a[bid], b[bid]))
                else:  # new on this side only, or minted on both for different rules
                    parts.append(_norm(mine[bid]) or "")
                    if bid not in other:
                        emitted.add(bid)

    emit_new(None)
    for bid in skeleton:
        emit(outcomes[bid])
        emit_new(bid)
    newline = blocks._newline(ours or theirs or base)
    return join(parts, newline), conflicts


def _skeleton(o_ids: list[str], a_ids: list[str], b_ids: list[str], survivors: set[str]) -> list[str]:
    """The order of the blocks that were in the base: the base's, unless one side reordered them
    (then that side's; when both did, the smaller of the two orders)."""
    o_set = set(o_ids)
    a_seq, b_seq = [i for i in a_ids if i in o_set], [i for i in b_ids if i in o_set]
    a_moved = a_seq != [i for i in o_ids if i in set(a_seq)]
    b_moved = b_seq != [i for i in o_ids if i in set(b_seq)]
    if a_moved and b_moved:
        primary = min(a_seq, b_seq)
    else:
        primary = a_seq if a_moved else b_seq if b_moved else o_ids
    order = [i for i in primary if i in survivors]
    placed = set(order)
    for index, bid in enumerate(o_ids):  # kept although the primary side dropped it
        if bid in survivors and bid not in placed:
            before = next((p for p in reversed(o_ids[:index]) if p in placed), None)
            order.insert(order.index(before) + 1 if before else 0, bid)
            placed.add(bid)
    return order


def _conflict_text(out: Outcome, size: int) -> str:
    ours, theirs = out.versions  # type: ignore[misc]
    return (f"{'<' * size} ours: {out.id} as changed on this side\n{ours}\n{'=' * size}\n"
            f"{theirs}\n{'>' * size} theirs: {out.id} as changed on the other side")


def merge_ids(base: str, ours: str, theirs: str) -> str | None:
    """next_ids.json: the per-key maximum of the sides that can be read; None when neither can."""
    found = [_read_ids(text) for text in (ours, theirs)]
    valid = [f for f in found if f]
    if not valid:
        return None
    return ids_text({k: max(f[k] for f in valid) for k in ("learning", "issue")})


def _read_ids(text: str | None) -> dict[str, int] | None:
    try:
        data = json.loads(text or "")
    except ValueError:
        return None
    if isinstance(data, dict) and all(isinstance(data.get(k), int) and not isinstance(data.get(k), bool)
                                       and data[k] >= 1 for k in ("learning", "issue")):
        return {"learning": data["learning"], "issue": data["issue"]}
    return None


# --- the driver git runs ----------------------------------------------------------------------------

def run_driver(kind: str, base: str, ours: str, theirs: str, marker_size: str, path: str) -> int:
    """What `git whetstone merge-driver` does for git: merge the three files, write the result over
    `ours`, and return 0 when it is clean, 1 when a conflict is left. Something that is not blocks
    (or not UTF-8) goes to git's own line merge, so the driver never loses what it cannot read."""
    size = int(marker_size) if marker_size.isdigit() else 7
    try:
        texts = [Path(p).read_bytes().decode("utf-8") for p in (base, ours, theirs)]
    except UnicodeDecodeError:
        texts = None
    if kind == "ids":
        merged = merge_ids(*texts) if texts else None
        if merged is None:
            return 1
        Path(ours).write_text(merged, encoding="utf-8")
        return 0
    if kind != "blocks":
        raise WhetstoneError(f"unknown merge driver '{kind}' (expected blocks or ids)")
    result = merge_scope(*texts, path, size) if texts else None
    if result is None:
        import subprocess
        proc = subprocess.run(["git", "merge-file", f"--marker-size={size}", "-L", "ours", "-L", "base",
                               "-L", "theirs", ours, base, theirs], capture_output=True)
        return 0 if proc.returncode == 0 else 1
    text, conflicts = result
    with open(ours, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)
    return 1 if conflicts else 0


def _driver_command(kind: str) -> str:
    """The command git runs (through sh), written for the whetstone installing it, with
    `git-whetstone` on PATH as the fallback, as the hook shims do."""
    from .hooks import _installer

    exe, path = _installer()
    args = f"merge-driver {kind} %O %A %B %L %P"
    if path:
        first = f"PYTHONPATH={shlex.quote(path)}${{PYTHONPATH:+:$PYTHONPATH}} {shlex.quote(exe)} -m git_whetstone"
    else:
        first = shlex.quote(exe)
    return f"if [ -x {shlex.quote(exe)} ]; then {first} {args}; else git-whetstone {args}; fi"


def _attributes_path(store: Store) -> Path:
    rel = gitbin.run(store.path, "rev-parse", "--git-path", "info/attributes").stdout.strip()
    return (store.path / rel).resolve()


def _without_ours(text: str) -> list[str]:
    lines, inside = [], False
    for line in text.splitlines():
        if line == _BEGIN:
            inside = True
        elif line == _END and inside:
            inside = False
        elif not inside:
            lines.append(line)
    return lines


def install_drivers(store: Store) -> str:
    """Define the two drivers in the store's git config and select them in .git/info/attributes
    (other lines there are kept). Returns "installed", "updated" or "unchanged"."""
    wanted = {f"merge.{BLOCKS_DRIVER}.name": "whetstone: scope files, block by block",
              f"merge.{BLOCKS_DRIVER}.driver": _driver_command("blocks"),
              f"merge.{IDS_DRIVER}.name": "whetstone: next_ids.json, the per-key maximum",
              f"merge.{IDS_DRIVER}.driver": _driver_command("ids")}
    out = gitbin.run(store.path, "config", "--local", "--get-regexp", r"^merge\.whetstone-", check=False).stdout
    have = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)  # git lowers the keys
    changed = False
    for key, value in wanted.items():
        if have.get(key.lower()) != value:
            gitbin.run(store.path, "config", "--local", key, value)
            changed = True
    target = _attributes_path(store)
    try:
        old = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        old = ""
    new = "\n".join(_without_ours(old) + [_BEGIN, *ATTRIBUTES, _END]) + "\n"
    if new != old:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(new, encoding="utf-8")
        changed = True
    if not changed:
        return "unchanged"
    return "updated" if have or _BEGIN in old else "installed"


def uninstall_drivers(store: Store) -> str:
    """Remove the drivers' config and attribute lines; "removed" or "absent"."""
    removed = gitbin.run(store.path, "config", "--local", "--remove-section", f"merge.{BLOCKS_DRIVER}",
                         check=False).returncode == 0
    removed |= gitbin.run(store.path, "config", "--local", "--remove-section", f"merge.{IDS_DRIVER}",
                          check=False).returncode == 0
    target = _attributes_path(store)
    try:
        old = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        return "removed" if removed else "absent"
    if _BEGIN in old:
        kept = _without_ours(old)
        target.write_text("\n".join(kept) + "\n" if kept else "", encoding="utf-8")
        removed = True
    return "removed" if removed else "absent"


# --- the store as a whole, after a merge ------------------------------------------------------------

@dataclass
class Settlement:
    """What a merged store needs so every id is claimed once: the files that change (None: delete),
    the text of next_ids.json, the re-minted ids and the conflicts left for a person."""

    files: dict[str, str | None] = field(default_factory=dict)
    next_ids: str = ""
    reminted: list[dict[str, str]] = field(default_factory=list)
    conflicts: list[dict[str, str]] = field(default_factory=list)


def settle(repo: Path, files: dict[str, str], parents: list[str], base: str | None,
           current_ids: str | None = None) -> Settlement:
    """Make the ids of a merged store unique (see the module docstring). `files` are the merged
    scope files, `parents` the commits merged (their histories say which ids were ever used),
    `base` their merge base (None for unrelated histories)."""
    split = {rel: pieces(text, rel) for rel, text in sorted(files.items())}
    claims: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for rel, parts in split.items():
        for index, piece in enumerate(parts):
            for bid in piece.ids:
                claims[bid].append((rel, index))
    known_before = _base_blocks(repo, base)
    result = Settlement()
    losers: list[tuple[str, int, Block]] = []
    for bid, where in sorted(claims.items(), key=lambda item: _id_order(item[0])):
        if len(where) < 2:
            continue
        copies = [(rel, index, split[rel][index]) for rel, index in where]
        if any(piece.block is None for _, _, piece in copies):
            result.conflicts.append({"path": copies[0][0], "id": bid, "message": (
                f"{bid} is claimed in {len(copies)} places, one of them in a conflict or a broken block "
                f"({', '.join(sorted({rel for rel, _, _ in copies}))}); keep one")})
            continue
        if bid in known_before:
            _fold_copies(bid, copies, known_before[bid], split, result)
            continue
        distinct: list[tuple[str, int, Piece]] = []
        for rel, index, piece in sorted(copies, key=lambda c: (rank(c[2].block), c[0], c[1])):
            twin = next((d for d in distinct if same_rule(d[2].block, piece.block)), None)
            if twin is None:
                distinct.append((rel, index, piece))
                continue
            merged = merge_block(None, twin[2].block, piece.block)[0]
            split[twin[0]][twin[1]] = _reparsed(merged.text, twin[0])
            split[rel][index] = Piece("", (), None)
            idx = distinct.index(twin)
            distinct[idx] = (twin[0], twin[1], split[twin[0]][twin[1]])
        losers += [(rel, index, piece.block) for rel, index, piece in distinct[1:]]
    # numbers above everything either side ever used: both histories, both next_ids.json, the tree
    top = _history_top(repo, parents)
    for rel, parts in split.items():
        for piece in parts:
            for bid in piece.ids:
                top[bid[0]] = max(top[bid[0]], int(bid[1:]))
    nxt = {"learning": top["L"] + 1, "issue": top["I"] + 1}
    for text in [gitbin.run(repo, "show", f"{p}:next_ids.json", check=False).stdout for p in parents] + [current_ids]:
        found = _read_ids(text)
        if found:
            nxt = {k: max(nxt[k], found[k]) for k in nxt}
    day = _date_of(repo, parents)
    for rel, index, block in sorted(losers, key=lambda x: (x[2].prefix, x[2].number, rank(x[2]))):
        number = nxt[block.kind]
        nxt[block.kind] += 1
        new_id = f"{block.prefix}{number}"
        note = f"{day} \u2014 " + _DUPLICATE.format(old=block.id)
        raw = blocks.update_fields(block, {}, note).rstrip("\n")
        raw = raw.replace(f"## {block.id} \u00b7", f"## {new_id} \u00b7", 1)
        split[rel][index] = _reparsed(raw, rel)
        result.reminted.append({"from": block.id, "to": new_id, "path": rel})
    for rel, parts in split.items():
        text = join([p.text for p in parts], blocks._newline(files[rel]))
        if text != files[rel] or not text.strip():
            result.files[rel] = text if text.strip() else None
    result.next_ids = ids_text(nxt)
    result.reminted.sort(key=lambda r: _id_order(r["to"]))
    return result


def _fold_copies(bid: str, copies: list[tuple[str, int, Piece]], before: tuple[str, Block],
                 split: dict[str, list[Piece]], result: Settlement) -> None:
    """Two copies of an entry that existed before the merge (moved to another file on one side,
    changed on the other): one entry again, where it was moved to."""
    base_rel, base_block = before
    copies = sorted(copies, key=lambda c: (c[0] == base_rel, c[0], c[1]))
    keep_rel, keep_index, merged_piece = copies[0]
    merged: Block = merged_piece.block  # type: ignore[assignment]
    text: str | None = _norm(merged)
    for rel, index, piece in copies[1:]:
        outcome = merge_block(base_block, merged, piece.block)
        split[rel][index] = Piece("", (), None)
        if not outcome:
            continue
        if outcome[0].versions is not None:
            text = _conflict_text(outcome[0], 7)
            result.conflicts.append({"path": keep_rel, "id": bid, "message": (
                f"both sides changed {bid} differently, and one of them also moved it; keep one version "
                f"in {keep_rel}")})
            break
        text = outcome[0].text
        merged = _reparsed(text or "", keep_rel).block or merged
    split[keep_rel][keep_index] = _reparsed(text, keep_rel)


def _reparsed(text: str | None, rel: str) -> Piece:
    found = pieces(text or "", rel)
    return found[0] if len(found) == 1 else Piece(text or "", (), None)


def _id_order(bid: str) -> tuple[str, int]:
    return bid[0], int(bid[1:])


def _base_blocks(repo: Path, base: str | None) -> dict[str, tuple[str, Block]]:
    if not base:
        return {}
    found: dict[str, tuple[str, Block]] = {}
    for rel, data in validation.commit_files(repo, base).items():
        for piece in pieces(data.decode("utf-8", "replace"), rel):
            if piece.block is not None:
                found.setdefault(piece.block.id, (rel, piece.block))
    return found


def _history_top(repo: Path, revs: list[str]) -> dict[str, int]:
    """The highest id number per prefix that any commit reachable from `revs` ever held."""
    top = {"L": 0, "I": 0}
    log = validation._git(repo, "log", "--format=", "-p", "--unified=0", "--no-renames", *revs, "--", "learnings", "issues",
               inherit=False, check=False).decode("utf-8", "replace")
    for match in re.finditer(r"^[-+]## ([LI])([1-9]\d*) \u00b7", log, re.M):
        top[match.group(1)] = max(top[match.group(1)], int(match.group(2)))
    return top


def _date_of(repo: Path, parents: list[str]) -> str:
    """The date a re-mint is recorded under: the later commit date of the merged sides, the same on
    every machine that makes this merge."""
    dates = [gitbin.run(repo, "log", "-1", "--format=%cs", p, check=False).stdout.strip() for p in parents]
    return max((d for d in dates if d), default="1970-01-01")


def settle_head(store: Store) -> list[str]:
    """After a plain `git merge` or `git pull` (the post-merge hook): if the merge commit left an id
    claimed twice, or next_ids.json below the ids either side used, fix it in one more commit.
    Returns what was done, for the hook to say."""
    repo = store.path
    parents = gitbin.run(repo, "show", "-s", "--format=%P", "HEAD", check=False).stdout.split()
    if len(parents) != 2:
        return []
    base = gitbin.run(repo, "merge-base", *parents, check=False).stdout.strip() or None
    committed = {rel: data.decode("utf-8", "replace") for rel, data in validation.commit_files(repo, "HEAD").items()}
    current = gitbin.run(repo, "show", "HEAD:next_ids.json", check=False).stdout
    plan = settle(repo, committed, parents, base, current)
    writes: dict[Path, str | None] = {repo / rel: text for rel, text in plan.files.items()}
    if _read_ids(current) != _read_ids(plan.next_ids):
        writes[repo / "next_ids.json"] = plan.next_ids
    if not writes or plan.conflicts:
        return [c["message"] for c in plan.conflicts]
    for path in writes:
        rel = store.rel(path)
        disk = path.read_bytes() if path.exists() else None
        at_head = committed.get(rel) if rel != "next_ids.json" else current
        if (disk.decode("utf-8", "replace") if disk is not None else None) != at_head:
            return [f"{rel} has uncommitted changes, so ids the merge left claimed twice were not re-minted; "
                    f"commit them, then run git whetstone sync {store.skill}"]
    # git runs post-merge before it clears the merge's state: MERGE_HEAD still names the commit just
    # merged (HEAD^2), and a commit now would take it as a second parent again. It is done with.
    merge_head = repo / ".git" / "MERGE_HEAD"
    if merge_head.exists() and merge_head.read_text().split()[:1] == parents[1:]:
        for leftover in ("MERGE_HEAD", "MERGE_MSG", "MERGE_MODE"):
            (repo / ".git" / leftover).unlink(missing_ok=True)
    message = remint_message("merge", plan)
    store.write_and_commit(message, writes)
    return [message.split("\n", 1)[0]]


def remint_message(verb: str, plan: Settlement) -> str:
    """A commit message saying what a settlement changed, every rename in the body."""
    renames = ", ".join(f"{r['from']} as {r['to']}" for r in plan.reminted)
    head = f"{verb}: " + (f"re-mint {renames} (minted on two machines)" if renames
                          else "next_ids.json above every id either side used")
    return head + "\n\n" + "".join(f"{r['from']} -> {r['to']} in {r['path']}\n" for r in plan.reminted)


def worktree_texts(store: Store) -> dict[str, str]:
    """The store's scope files on disk, as text."""
    return {rel: data.decode("utf-8", "replace") for rel, data in validation.worktree_files(store).items()}


