"""Merging a scope file three ways, block by block: what git's merge driver does with one file.

The union of the blocks; a block changed on one side only takes that side; a learning changed on
both sides keeps every reinforcement (recurrence is the base's plus both sides' increments), the
earliest first_seen, the latest last_seen and every provenance line (and `differs_from` changed on
both sides, the ids of both); a block whose body (or scope)
both sides changed differently is left as a conflict between markers, which `validate` explains. A
block one side deleted and the other changed is kept: data is never lost to a merge. Two different
entries minted under one id on two machines are both kept here; `ops.settle` re-mints one of them
once the whole store is merged.

Everything here depends only on the contents of the sides (and their merge base), never on which
side is "ours", so A merging B and B merging A give the same blocks.
"""
from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from . import blocks, edits
from .blocks import Block
from .ids import line_id
from .layout import scope_key

_OPEN = re.compile(r"^<{7,}(?: |$)")
_CLOSE = re.compile(r"^>{7,}(?: |$)")


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
            ids = tuple(dict.fromkeys(bid for line in current for bid in [line_id(line)] if bid))
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


def trimmed(block: Block | None) -> str | None:
    """A block's text without the blank lines after it, for comparing sides."""
    return None if block is None else re.sub(r"(?:\n[ \t]*)+\Z", "", block.raw.replace("\r\n", "\n"))


def _body_key(block: Block) -> str:
    return " ".join(block.body.split())


def content_hash(block: Block) -> str:
    return hashlib.sha1(f"{block.kind}\n{scope_key(block.scope)}\n{_body_key(block)}".encode()).hexdigest()


def rank(block: Block) -> tuple[str, str]:
    """The order of two entries minted under one id in a merged file: the earlier first_seen,
    then the smaller content hash. Depends on the blocks only, so every machine decides alike
    (which of them keeps the id is `ops.sync.settle`'s call: the older minting commit)."""
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
    # the every-task mark three-way: a side that changed it wins; minted on both, either side's mark holds
    always, _ = _three(base and base.always, ours.always, theirs.always)
    applies = [("applies", blocks.ALWAYS)] if (ours.always or theirs.always if always is None else always) else []
    # "both hold" three-way: a side that changed the ids wins; changed on both sides, every id either names
    differs, _ = _three(base and _differs(base), _differs(ours), _differs(theirs))
    named = _differs(ours) | _differs(theirs) if differs is None else differs
    differing = [("differs_from", blocks.IDS_SEPARATOR.join(sorted(named, key=blocks.id_order)))] if named else []

    def render(title: str, body: str, scope_value: str) -> str:
        fields = meta + [("scope", scope_value)] + applies + differing + [("provenance", p) for p in provenance]
        return edits.render(ours.id, title, fields, body).rstrip("\n")

    if ok_body and ok_scope:
        return Outcome(text=render(unit[0], unit[1], scope), id=ours.id)
    return Outcome(versions=(render(ours.title, ours.body, scope if ok_scope else ours.get("scope") or ""),
                             render(theirs.title, theirs.body, scope if ok_scope else theirs.get("scope") or "")),
                   id=ours.id)


def _differs(block: Block) -> frozenset[str]:
    """The ids a block's `differs_from` names, as a set (their order and repeats mean nothing)."""
    return frozenset(block.differs)


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
    o, a, b = trimmed(base), trimmed(ours), trimmed(theirs)
    if a == b:
        return [Outcome(text=a, id=ours.id)] if ours is not None else []
    if o is not None and a == o:
        return [Outcome(text=b, id=theirs.id)] if theirs is not None else []
    if o is not None and b == o:
        return [Outcome(text=a, id=ours.id)] if ours is not None else []
    if ours is None or theirs is None:  # deleted on one side, changed on the other: keep the change
        kept = ours or theirs
        return [Outcome(text=trimmed(kept), id=kept.id)]
    if base is None and not same_rule(ours, theirs):
        return [Outcome(text=trimmed(x), id=x.id) for x in sorted((ours, theirs), key=rank)]
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
                parts.append(conflict_text(out, marker_size))

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
                    parts.append(trimmed(mine[bid]) or "")
                    if bid not in other:
                        emitted.add(bid)

    emit_new(None)
    for bid in skeleton:
        emit(outcomes[bid])
        emit_new(bid)
    newline = edits.newline_of(ours or theirs or base)
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


def conflict_text(out: Outcome, size: int) -> str:
    ours, theirs = out.versions  # type: ignore[misc]
    return (f"{'<' * size} ours: {out.id} as changed on this side\n{ours}\n{'=' * size}\n"
            f"{theirs}\n{'>' * size} theirs: {out.id} as changed on the other side")
