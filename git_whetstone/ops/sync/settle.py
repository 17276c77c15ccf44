"""Settling a merged store: every id claimed once, next_ids.json above every id either side used.

Two copies of an entry that existed before the merge (moved on one side, changed on the other)
become one. Two entries minted under one id on two machines: the one whose minting commit is older
(author time, which a rebase keeps; then the smaller content hash) keeps it, the other is re-minted
above every id either side ever used, the rename in its provenance. The outcome never depends on
which side is "ours", so both machines get the same ids. A `differs_from` naming a re-minted id
follows the copy it was written beside (`_follow`).
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ...format import edits
from ...format.blocks import Block
from ...format.counters import ids_text, read_counters
from ...format.ids import with_id
from ...format.merging import Piece, conflict_text, join, merge_block, pieces, rank, same_rule, trimmed
from ...git import runner, tree
from ...git.history import id_history
from ...store import events
from ...store.store import Store

_DUPLICATE = "re-minted from {old}: another entry was minted as {old} on another machine"


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
    """Make the ids of the merged scope files `files` unique; `parents` are the commits merged, `base`
    their merge base (None for unrelated histories)."""
    split = {rel: pieces(text, rel) for rel, text in sorted(files.items())}
    claims: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for rel, parts in split.items():
        for index, piece in enumerate(parts):
            for bid in piece.ids:
                claims[bid].append((rel, index))
    known_before = _base_blocks(repo, base)
    result = Settlement()
    losers: list[tuple[str, int, Block]] = []
    contested: dict[str, list[Block]] = {}  # an id minted for different rules: its copies, the keeper first
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
        for rel, index, piece in sorted(copies, key=lambda c: (_minted(repo, parents, base, c[2].block),
                                                               rank(c[2].block)[1], c[0], c[1])):
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
        if len(distinct) > 1:
            contested[bid] = [piece.block for _, _, piece in distinct]
    # numbers above everything either side ever used: both histories, both next_ids.json, the tree
    top = id_history(repo, *parents).top
    for rel, parts in split.items():
        for piece in parts:
            for bid in piece.ids:
                top[bid[0]] = max(top[bid[0]], int(bid[1:]))
    nxt = {"learning": top["L"] + 1, "issue": top["I"] + 1}
    for text in [runner.run(repo, "show", f"{p}:next_ids.json", check=False).stdout for p in parents] + [current_ids]:
        found = read_counters(text)
        if found:
            nxt = {k: max(nxt[k], found[k]) for k in nxt}
    day = _date_of(repo, parents)
    renamed: dict[tuple[str, int], tuple[Block, str]] = {}  # where a re-minted block is: (it before, its new id)
    for rel, index, block in sorted(losers, key=lambda x: (x[2].prefix, x[2].number, rank(x[2]))):
        number = nxt[block.kind]
        nxt[block.kind] += 1
        new_id = f"{block.prefix}{number}"
        note = f"{day} \u2014 " + _DUPLICATE.format(old=block.id)
        raw = edits.update_fields(block, {}, note).rstrip("\n")
        raw = with_id(raw, block.id, new_id)
        split[rel][index] = _reparsed(raw, rel)
        renamed[(rel, index)] = (block, new_id)
        result.reminted.append({"from": block.id, "to": new_id, "path": rel})
    if renamed:
        _follow(repo, parents, split, contested, renamed)
    for rel, parts in split.items():
        text = join([p.text for p in parts], edits.newline_of(files[rel]))
        if text != files[rel] or not text.strip():
            result.files[rel] = text if text.strip() else None
    result.next_ids = ids_text(nxt)
    result.reminted.sort(key=lambda r: _id_order(r["to"]))
    return result


def _minted(repo: Path, parents: list[str], base: str | None, block: Block) -> int:
    """When a copy of a contested id was minted: the author time of the oldest commit, since the
    sides parted, that added its heading (a rebase keeps author times); later than any commit when
    none did (a heading changed by hand in the merge itself)."""
    heading = block.raw.split("\n", 1)[0].rstrip("\r")  # `## L1 · …`: never empty
    times = runner.run(repo, "log", "--format=%at", "-S", heading, *parents, *([f"^{base}"] if base else []),
                       "--", "learnings", "issues", check=False).stdout.split()
    return min((int(t) for t in times if t.isdigit()), default=1 << 62)


def _fold_copies(bid: str, copies: list[tuple[str, int, Piece]], before: tuple[str, Block],
                 split: dict[str, list[Piece]], result: Settlement) -> None:
    """Two copies of an entry that existed before the merge (moved to another file on one side,
    changed on the other): one entry again, where it was moved to."""
    base_rel, base_block = before
    copies = sorted(copies, key=lambda c: (c[0] == base_rel, c[0], c[1]))
    keep_rel, keep_index, merged_piece = copies[0]
    merged: Block = merged_piece.block  # type: ignore[assignment]
    text: str | None = trimmed(merged)
    for rel, index, piece in copies[1:]:
        outcome = merge_block(base_block, merged, piece.block)
        split[rel][index] = Piece("", (), None)
        if not outcome:
            continue
        if outcome[0].versions is not None:
            text = conflict_text(outcome[0], 7)
            result.conflicts.append({"path": keep_rel, "id": bid, "message": (
                f"both sides changed {bid} differently, and one of them also moved it; keep one version "
                f"in {keep_rel}")})
            break
        text = outcome[0].text
        merged = _reparsed(text or "", keep_rel).block or merged
    split[keep_rel][keep_index] = _reparsed(text, keep_rel)


def _follow(repo: Path, parents: list[str], split: dict[str, list[Piece]], contested: dict[str, list[Block]],
            renamed: dict[tuple[str, int], tuple[Block, str]]) -> None:
    """Point every `differs_from` that names a re-minted id at the copy it was written about: the copy
    held on every side that holds the reference (and, when several are, on exactly those sides); one
    each side wrote beside its own copy names both; otherwise it stays."""
    moved = {id(block): to for block, to in renamed.values()}  # (each re-minted block is one of `contested`'s)
    copies = {bid: [(copy, moved.get(id(copy), bid)) for copy in found] for bid, found in contested.items()}
    citing = [(rel, index, piece.block) for rel, parts in split.items() for index, piece in enumerate(parts)
              if piece.block is not None and set(piece.block.differs) & copies.keys()]
    if not citing:
        return
    sides = [_side_blocks(repo, parent) for parent in parents]
    for rel, index, block in citing:
        was = renamed[(rel, index)][0] if (rel, index) in renamed else block  # as the sides hold it
        versions = [_same_entry(side.get(was.id, []), was, was.id in contested) for side in sides]
        named = set(block.differs)
        for old in set(block.differs) & copies.keys():
            cited = frozenset(i for i, v in enumerate(versions) if v is not None and old in v.differs)
            held = [frozenset(i for i, side in enumerate(sides) if any(same_rule(b, copy) for b in side.get(old, [])))
                    for copy, _ in copies[old]]
            fits = [k for k, where in enumerate(held) if cited <= where]
            if len(fits) > 1:  # held wherever the reference is: the copy held there and nowhere else
                fits = [k for k in fits if held[k] == cited]
                if len(fits) != 1:
                    continue
            elif not fits:  # each side wrote it beside its own copy
                fits = [k for k, where in enumerate(held) if where & cited]
            if fits:
                named.discard(old)
                named.update(copies[old][k][1] for k in fits)
        if named != set(block.differs):
            split[rel][index] = _reparsed(edits.with_differs(block, named).rstrip("\n"), rel)


def _commit_blocks(repo: Path, commit: str) -> Iterator[tuple[str, Block]]:
    """The blocks of a commit's scope files, each with its file."""
    for rel, data in tree.commit_files(repo, commit).items():
        for piece in pieces(data.decode("utf-8", "replace"), rel):
            if piece.block is not None:
                yield rel, piece.block


def _side_blocks(repo: Path, commit: str) -> dict[str, list[Block]]:
    """The blocks of a commit, by id (an id may be claimed twice: a rebase's side)."""
    found: dict[str, list[Block]] = defaultdict(list)
    for _, block in _commit_blocks(repo, commit):
        found[block.id].append(block)
    return found


def _same_entry(found: list[Block], block: Block, contested: bool) -> Block | None:
    """Of a side's blocks under `block`'s id, the one that is the same entry: any (its only one) for
    an id minted once, the same rule for an id minted for different rules on two machines."""
    if contested:
        return next((b for b in found if same_rule(b, block)), None)
    return found[0] if found else None


def _reparsed(text: str | None, rel: str) -> Piece:
    found = pieces(text or "", rel)
    return found[0] if len(found) == 1 else Piece(text or "", (), None)


def _id_order(bid: str) -> tuple[str, int]:
    return bid[0], int(bid[1:])


def _base_blocks(repo: Path, base: str | None) -> dict[str, tuple[str, Block]]:
    found: dict[str, tuple[str, Block]] = {}
    for rel, block in _commit_blocks(repo, base) if base else ():
        found.setdefault(block.id, (rel, block))
    return found


def _date_of(repo: Path, parents: list[str]) -> str:
    """The date a re-mint is recorded under: the later commit date of the merged sides, the same on
    every machine that makes this merge."""
    dates = [runner.run(repo, "log", "-1", "--format=%cs", p, check=False).stdout.strip() for p in parents]
    return max((d for d in dates if d), default="1970-01-01")


def settle_head(store: Store, rebased: bool = False) -> list[str]:
    """After a plain `git merge` or `git pull` (post-merge), or a rebase (post-rewrite, `rebased`): fix
    ids claimed twice, or next_ids.json below the ids used, in one more commit. Returns what was done.
    A rebase's two sides are the rebased HEAD and ORIG_HEAD."""
    repo = store.path
    if rebased:
        before = runner.run(repo, "rev-parse", "--verify", "-q", "ORIG_HEAD", check=False).stdout.strip()
        head = runner.head(repo)
        if not before or not head or runner.is_ancestor(repo, before, head):
            return []  # an amend, or a rebase that replayed nothing: one side only
        parents = [head, before]
    else:
        parents = runner.run(repo, "show", "-s", "--format=%P", "HEAD", check=False).stdout.split()
        if len(parents) != 2:
            return []
    base = runner.run(repo, "merge-base", *parents, check=False).stdout.strip() or None
    committed = {rel: data.decode("utf-8", "replace") for rel, data in tree.commit_files(repo, "HEAD").items()}
    current = runner.run(repo, "show", "HEAD:next_ids.json", check=False).stdout
    plan = settle(repo, committed, parents, base, current)
    writes: dict[Path, str | None] = {repo / rel: text for rel, text in plan.files.items()}
    if read_counters(current) != read_counters(plan.next_ids):
        writes[repo / "next_ids.json"] = plan.next_ids
    if not writes or plan.conflicts:
        return [c["message"] for c in plan.conflicts]
    for path in writes:
        rel = store.rel(path)
        disk = path.read_bytes() if path.exists() else None
        at_head = committed.get(rel) if rel != "next_ids.json" else current
        if (disk.decode("utf-8", "replace") if disk is not None else None) != at_head:
            return [f"{rel} has uncommitted changes, so ids the {'rebase' if rebased else 'merge'} left claimed "
                    f"twice were not re-minted; commit them, then run git whetstone sync {store.skill}"]
    # git runs post-merge before it clears the merge's state: MERGE_HEAD still names the commit just
    # merged (HEAD^2), and a commit now would take it as a second parent again. It is done with.
    merge_head = repo / ".git" / "MERGE_HEAD"
    if not rebased and merge_head.exists() and merge_head.read_text().split()[:1] == parents[1:]:
        for leftover in ("MERGE_HEAD", "MERGE_MSG", "MERGE_MODE"):
            (repo / ".git" / leftover).unlink(missing_ok=True)
    message = remint_message("rebase" if rebased else "merge", plan)
    store.write_and_commit(message, writes, finishing="rebase" if rebased else None)
    if plan.reminted:
        events.append(repo, "remint", via="rebase" if rebased else "merge", reminted=plan.reminted)
    return [message.split("\n", 1)[0]]


def remint_message(verb: str, plan: Settlement) -> str:
    """A commit message saying what a settlement changed, every rename in the body."""
    renames = ", ".join(f"{r['from']} as {r['to']}" for r in plan.reminted)
    head = f"{verb}: " + (f"re-mint {renames} (minted on two machines)" if renames
                          else "next_ids.json above every id either side used")
    return head + "\n\n" + "".join(f"{r['from']} -> {r['to']} in {r['path']}\n" for r in plan.reminted)
