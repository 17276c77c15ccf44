"""compact at 100,000 entries: the fast paths give what asking the judge about every pair gives.

compact asks the judge only about close pairs that share a `decisive_key` (the words a same or a
contradicts verdict needs), reads only the most alike of the other look-alikes, and keeps each
text's key in .git/whetstone-compact.json for the next run. These tests build a synthetic store of
the benchmark's kind, then compare compact's plan and report with the reference that judges every
close pair, on a fresh snapshot, after each kind of edit a person or a tool makes in between: a
new duplicate, a scope renamed to a look-alike, a hand edit, a revert, and a second compact.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from git_whetstone.format import blocks
from git_whetstone.index import freshness
from git_whetstone.ops import compact as compact_op
from git_whetstone.ops.workspace import Workspace
from git_whetstone.semantics.judge import CONTRADICTS, SAME, decisive_key, judge, read
from tests.helpers import bench_store, git, respell

SKILL = "big"


def _reference(config) -> compact_op.Plan:
    """The plan judging every close pair, on the snapshot compact used (its row order decides the
    order of the retire lines)."""
    ws = Workspace.of(config)
    snap = ws.snapshot(ws.store(SKILL, must_exist=True))
    return compact_op.plan_of(snap, config, every_pair=True)


def _check(config, path: Path) -> dict:
    """A dry run (with the keys saved by earlier runs) says what the reference says."""
    result = compact_op.compact(SKILL, dry_run=True, config=config)
    plan = _reference(config)
    assert result["changes"] == plan.changes
    ws = Workspace.of(config)
    snap = ws.snapshot(ws.store(SKILL, must_exist=True))
    assert compact_op.plan_of(snap, config) == plan  # every update and removal, not only the lines
    # and with what the dry run kept (the scopes' close pairs among them, found by their phrases' digest)
    assert compact_op.plan_of(snap, config, keys=compact_op.Keys.load(ws.store(SKILL, must_exist=True))) == plan
    every = compact_op.look_alikes(snap, config, 10_000)
    for limit in (0, 1, 7):  # the first of them, contradictions first
        assert compact_op.look_alikes(snap, config, limit) == every[:limit]
    assert json.loads((path / ".git" / compact_op.Keys.FILE).read_text())["keys"]
    for kind in ("stale", "always"):  # listed by id: prefix, then number
        ids = [f["id"] for f in result["report"][kind]]
        assert ids == sorted(ids, key=lambda i: (i[0], int(i[1:])))
    return result


def _edit(path: Path, rel: str, change, message: str) -> None:
    file = path / rel
    file.write_text(change(file.read_text()))
    git(path, "commit", "-qam", message)


def test_compact_plans_the_same_as_judging_every_pair_through_edits(store_root, monkeypatch) -> None:
    _, config, built = bench_store(monkeypatch, SKILL, 3_000, 5)
    path = built.path
    first = _check(config, path)
    assert first["changes"] and first["report"]["look_alikes"]

    # a new duplicate of a learning, in its own scope file, under a fresh id
    entry_id, body, scope = built.learnings[10]
    rel = next(str(p.relative_to(path)) for p in (path / "learnings").glob("*.md")
               if f"## {entry_id} " in p.read_text() or p.read_text().startswith(f"## {entry_id}\n"))
    text = (path / rel).read_text()
    block = next(b for b in blocks.parse(text, rel).blocks if b.id == entry_id)
    copy = blocks.render("L90001", block.title, [("recurrence", "1"), ("first_seen", "2026-06-01"),
                                                  ("last_seen", "2026-06-30"), ("scope", block.scope)],
                         block.body.replace(".", ". "))
    _edit(path, rel, lambda t: blocks.append(t, copy), "hand: a duplicate")
    second = _check(config, path)
    assert any("L90001" in c for c in second["changes"])

    # two rules that differ by one value, and one that says the opposite: contradictions to report
    fields = [("recurrence", "1"), ("first_seen", "2026-06-01"), ("last_seen", "2026-06-30"), ("scope", block.scope)]
    opposed = [blocks.render(f"L9000{n}", "Opposed", fields, rule) for n, rule in (
        (2, "Right-align the amounts in the summary table"), (3, "Left-align the amounts in the summary table"),
        (4, "Never right-align the amounts in the summary table"))]
    _edit(path, rel, lambda t: blocks.append(blocks.append(blocks.append(t, opposed[0]), opposed[1]), opposed[2]),
          "hand: opposed rules")
    third = _check(config, path)
    assert sum(f["relation"] == "contradicts" for f in third["report"]["look_alikes"]) >= 2

    # a scope renamed to a look-alike of another (its phrase in capitals and plural)
    other = next(p for p in sorted((path / "learnings").glob("*.md")) if str(p.relative_to(path)) != rel)
    other_rel = str(other.relative_to(path))
    old_scope = blocks.parse(other.read_text(), other_rel).blocks[0].scope
    _edit(path, other_rel, lambda t: t.replace(f"- scope: {old_scope}\n", f"- scope: {old_scope.upper()}S\n"),
          "hand: a scope renamed")
    _check(config, path)

    # a hand edit that makes a rule say what another of its file says (same ids, same scope): the
    # verdicts kept for that scope must not be reused
    target = next(p for p in sorted((path / "learnings").glob("*.md"))[5:] if p.read_text().count("\n## ") >= 3)
    t_rel = str(target.relative_to(path))
    first, _, third = blocks.parse(target.read_text(), t_rel).blocks[:3]
    head, _, tail = third.raw.rpartition(third.body)
    _edit(path, t_rel, lambda t: t[:third.start] + head + first.body + tail + t[third.end:], "hand: a rule said twice")
    assert any(c.startswith(f"merge {third.id} into {first.id} ") for c in _check(config, path)["changes"])

    # a hand edit: a rule turned into its opposite (right for left, or a number changed)
    def flip(t: str) -> str:
        for a, b in (("left", "right"), ("right", "left"), ("2", "3"), ("never", "always")):
            if a in t:
                return t.replace(a, b, 1)
        return t.replace("- scope:", "- scope:", 1)
    _edit(path, rel, flip, "hand: an edit")
    _check(config, path)

    # a revert of that edit
    git(path, "revert", "--no-edit", "HEAD")
    _check(config, path)

    # compact applied, then a second compact: nothing left to change, and still the reference
    applied = compact_op.compact(SKILL, config=config)
    assert applied["committed"] and git(path, "status", "--porcelain").stdout == ""
    # its report is about the store it left, as a process reading that store from scratch finds it
    freshness.LIVE.clear()
    ws = Workspace.of(config)
    store = ws.store(SKILL, must_exist=True)
    assert applied["report"] == compact_op.findings(store, ws.snapshot(store), config)
    again = _check(config, path)
    assert again["changes"] == []
    kept = json.loads((path / ".git" / compact_op.Keys.FILE).read_text())["scopes"]
    assert len(kept) > 100  # each scope's verdicts, which the next run reuses where nothing changed

    # a branch of an older commit (before the compact and the revert), then back, then that branch
    # reset by hand to older still: every scope the switch changed is judged again
    git(path, "checkout", "-q", "-b", "older", "HEAD~3")
    _check(config, path)
    git(path, "checkout", "-q", "-")
    assert _check(config, path)["changes"] == []
    git(path, "checkout", "-q", "older")
    git(path, "reset", "-q", "--hard", "HEAD~2")
    _check(config, path)

    # a day half a year later: more learnings decay below the bar, and nothing kept hides them
    later = _check(config, path)["changes"]
    monkeypatch.setenv("WHETSTONE_TODAY", "2027-01-01")
    assert sum(c.startswith("retire") for c in _check(config, path)["changes"]) > \
        sum(c.startswith("retire") for c in later)


def test_the_decisive_key_is_shared_by_every_pair_the_judge_settles(store_root, monkeypatch) -> None:
    """Over every pair of a synthetic store's rules in one scope (siblings that differ by a value, a
    negation, a number), the judge says same or contradicts only for rules sharing a key."""
    _, config, built = bench_store(monkeypatch, "small", 600, 9)
    by_scope: dict[str, list[str]] = {}
    for _, body, scope in built.learnings + built.issues:
        by_scope.setdefault(scope, []).append(body)
    settled = 0
    for bodies in by_scope.values():
        for i, a in enumerate(bodies):
            for b in bodies[i + 1:]:
                verdict = judge(a, b, 0.99, config, same_scope=True)
                if verdict.relation in (SAME, CONTRADICTS):
                    settled += 1
                    assert decisive_key(a) == decisive_key(b), (a, b)
    assert settled
    # and the words it keeps are the judge's: a value or a number is what two contradicting rules differ in
    assert decisive_key("Right-align the numbers") == decisive_key("Left-align the numbers")
    assert decisive_key("Show 2 decimals") == decisive_key("show 0 decimals")
    assert read("Never round the corners").sequence and decisive_key("Never round corners") == decisive_key("round corners")


@pytest.mark.parametrize("broken", ["code", "json"])
def test_saved_keys_of_other_code_or_a_broken_file_are_read_again(store_root, monkeypatch, broken) -> None:
    _, config, built = bench_store(monkeypatch, SKILL, 400, 2)
    reference = compact_op.compact(SKILL, dry_run=True, config=config)
    saved = built.path / ".git" / compact_op.Keys.FILE
    data = json.loads(saved.read_text())
    if broken == "code":  # keys written by another version of the judge: every key made wrong on purpose
        saved.write_text(json.dumps({"code": "other", "keys": {k: "x" for k in data["keys"]}}))
    else:
        saved.write_text("{not json")
    again = compact_op.compact(SKILL, dry_run=True, config=config)
    assert again == reference
    assert json.loads(saved.read_text()) == data


def test_retiring_without_parsing_writes_what_parsing_every_file_writes(store_root, monkeypatch) -> None:
    """A block is retired from a file the index read cleanly by its heading's place alone; the
    files come out as when every file is parsed, including a file edited after the snapshot."""
    _, config, built = bench_store(monkeypatch, SKILL, 3_000, 6)
    # copies of a rule in its own file, for blocks merged in place (a file edited several times)
    for n, file in enumerate(sorted((built.path / "learnings").glob("*.md"))[:40:2]):
        text = file.read_text()
        block = blocks.parse(text, file.name).blocks[-1]
        copy = blocks.render(f"L9{n:04d}", block.title, [("recurrence", "2"), ("first_seen", "2026-06-01"),
                                                         ("last_seen", "2026-06-30"), ("scope", block.scope)],
                             block.body.replace(".", ". "))
        file.write_text(blocks.append(text, copy) if n % 2 else copy + "\n" + text)
    git(built.path, "commit", "-qam", "hand: copies")
    respell(built.path, 60)
    ws = Workspace.of(config)
    store = ws.store(SKILL, must_exist=True)
    snap = ws.snapshot(store)
    entries = compact_op.rows_of(snap)
    plan = compact_op.plan_of(snap, config, entries=entries)
    retired = [entry_id for entry_id, why in plan.removed.items() if why.startswith("weight")]
    assert len(retired) > 100
    # a file touched after the snapshot (same text, new stamp): it must be parsed again
    touched = store.path / entries[snap.by_id[retired[0]]].path
    touched.write_text(touched.read_text())
    fast = compact_op._apply(store, snap, plan, entries)
    # as when every block looked up is found by parsing its file as it is then (no block's place
    # carried over from an earlier edit of the file): blocks moved out, merged in place, retired
    moved = sum("scope" in update for update in plan.updates.values())
    merged = sum("provenance" in update for update in plan.updates.values())
    assert moved > 100 and merged >= 10
    assert fast == compact_op._apply(store, snap, plan, entries, reference=True)
    # and the entries it hands the index for the files it wrote, placed from those texts at once
    # as when each heading line is read in turn (`_placed_by_line`)
    known, reference = {}, {}
    compact_op._apply(store, snap, plan, entries, written=known)
    compact_op._apply(store, snap, plan, entries, reference=True, written=reference)
    assert len(known) > 100 and known == reference


def test_files_a_merge_empties_are_deleted_as_removing_each_block_leaves_them(store_root, monkeypatch) -> None:
    """A file every block leaves (retired, or moved to the merged scope's file) is deleted without
    its blocks removed one by one, the moved blocks taken from it as read: the files and entries
    written are the reference's, which edits every block. Files of such a scope edited by hand (blocks
    in reverse order ending in a line of spaces, a `##x` line in a body) go the old way, and come out as the
    reference's too, as do those with blank lines around their blocks."""
    _, config, built = bench_store(monkeypatch, SKILL, 3_000, 6)
    respell(built.path, 30)
    ws = Workspace.of(config)
    store = ws.store(SKILL, must_exist=True)
    snap = ws.snapshot(store)
    entries = compact_op.rows_of(snap)
    plan = compact_op.plan_of(snap, config, entries=entries)
    row_of = {entries[i].id: i for i in snap.by_key.values()}
    moving = sorted({entries[row_of[i]].path for i, u in plan.updates.items() if "scope" in u})
    assert len(moving) >= 10
    edits = [lambda t: " \n\t\n" + t, _reversed_with_lines_of_spaces,
             lambda t: t.rstrip("\n") + "\n##x\n", lambda t: "\n\n" + t.rstrip("\n") + "\n\n\n"]
    for n, edit in enumerate(edits):
        file = store.path / moving[n]
        file.write_text(edit(file.read_text()))
    git(built.path, "commit", "-qam", "hand: edits")
    snap = ws.snapshot(store)
    entries = compact_op.rows_of(snap)
    plan = compact_op.plan_of(snap, config, entries=entries)
    taken: list[str] = []
    real = compact_op._blocks_leaving
    monkeypatch.setattr(compact_op, "_blocks_leaving",
                        lambda text, ids: taken.append(text) or real(text, ids))
    known, reference = {}, {}
    fast = compact_op._apply(store, snap, plan, entries, written=known)
    emptied = sum(real(text, {b.id for b in blocks.parse(text, "x.md").blocks}) is not None for text in taken)
    assert emptied >= 4 and len(taken) > emptied  # (the hand-edited ones among those tried)
    slow = compact_op._apply(store, snap, plan, entries, reference=True, written=reference)
    assert fast == slow and known == reference
    assert sum(text is None for text in fast.values()) >= 4


def _reversed_with_lines_of_spaces(text: str) -> str:
    """A file's blocks in reverse order, each ending in a line of spaces: moved in the plan's order,
    each block is then the last one left in its file (which takes that line off it)."""
    parsed = blocks.parse(text, "x.md").blocks
    return "\n".join(b.raw.rstrip("\n") + "\n  \n" for b in reversed(parsed))


_OTHER_LINES = st.sampled_from(["##", "## L2", "##x", "##  · no id", " ## L3 · indented", "## L9 · not held",
                                "- scope: s", "body text", "", "  ", "\t"])


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["L1", "L2", "L3", "I7", "L12"]), max_size=5, unique=True), st.booleans(),
       st.lists(st.tuples(st.integers(0, 60), _OTHER_LINES), max_size=2), st.integers(0, 2),
       st.sampled_from(["\n", "\r\n"]), st.booleans(), st.sampled_from(["exact", "one less", "one more"]))
def test_placing_a_written_files_entries_at_once_reads_what_the_line_by_line_reading_reads(
        ids, twice, others, blank_first, newline, final, held) -> None:
    """`_placed` (the text split at its headings at once) gives what `_placed_by_line` gives, on
    files of blocks (an id twice among them) with lines of every other shape put in (a bare `##`,
    a heading without title or id, `##x`, blank lines first or between), either line ending, with or
    without a final newline, the entries held being the blocks' or one fewer or one more."""
    ids = ids + ids[:1] if twice else ids
    lines = [""] * blank_first
    for n, bid in enumerate(ids):
        lines += [f"## {bid} · title {n}", "- scope: s", "", f"body of {bid}" + " more" * n, ""][:5 - n % 2]
    for at, line in others:
        lines.insert(min(at, len(lines)), line)
    text = newline.join(lines) + (newline if final and lines else "")
    wanted = set(ids)
    if held == "one less" and wanted:
        wanted.discard(min(wanted))
    elif held == "one more":
        wanted.add("L4")
    by_id = {bid: compact_op.Entry(bid, "learning", "x.md", 0, "t", "s", "b", 1, None, None, ()) for bid in wanted}
    assert compact_op._placed("x.md", text, by_id) == compact_op._placed_by_line("x.md", text, by_id)


def test_a_big_compact_says_how_long_it_will_take_and_reports_its_progress(store_root, monkeypatch):
    """From ESTIMATE_FROM entries, `notice` gets one line with an estimate before the work (the
    default pace, then the pace this store's last run took), and `progress` counts scopes up to
    all of them; a smaller store gets no notice."""
    _, config, built = bench_store(monkeypatch, "big", 600, 4)
    said, steps = [], []
    compact_op.compact("big", dry_run=True, config=config, notice=said.append,
                       progress=lambda done, total: steps.append((done, total)))
    assert said == [] and steps and steps[-1][0] == steps[-1][1]  # under the estimate's floor
    monkeypatch.setattr(compact_op, "ESTIMATE_FROM", 100)
    said, steps = [], []
    compact_op.compact("big", dry_run=True, config=config, notice=said.append,
                       progress=lambda done, total: steps.append((done, total)))
    assert len(said) == 1 and said[0].startswith("planning a compaction of 600 entries in ") and said[0].endswith(" s")
    assert [d for d, _ in steps] == sorted(d for d, _ in steps) and steps[-1][0] == steps[-1][1] > 0
    pace = json.loads((built.path / ".git" / compact_op.RATE).read_text())
    assert pace["dry"] > 0  # the run's own pace, kept for the next estimate
    (built.path / ".git" / compact_op.RATE).write_text(json.dumps({"dry": 10_000.0}))
    said = []
    compact_op.compact("big", dry_run=True, config=config, notice=said.append)
    assert said[0].endswith("about 6000 s")  # 10,000 s per 1,000 entries × 600 entries


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="a\r\n \t#", max_size=12),
       st.lists(st.text(alphabet="a\r\n \t#", max_size=8), max_size=6))
def test_blocks_appended_at_once_as_one_by_one(text: str, added: list[str]) -> None:
    """`blocks.append_all` (a file's arriving blocks, as compact adds them) is `append` in turn,
    whatever the file's line endings, blank lines, or a block of blank space alone."""
    want = text
    for block_text in added:
        want = blocks.append(want, block_text)
    assert blocks.append_all(text, added) == want


def test_the_keys_saved_are_each_rules_key_by_its_texts_hash_when_hashed_all_at_once(store_root, monkeypatch) -> None:
    """plan_of hashes every body at once (`Keys.hash_all`): each hash is the text's own
    (`text_hash`, one at a time), so the keys kept in .git are each rule's `decisive_key` by the
    hash of its text, as a run hashing one text at a time keeps them."""
    from git_whetstone.index.records import text_hash

    _, config, built = bench_store(monkeypatch, SKILL, 1_000, 5)
    keys = compact_op.Keys()
    texts = ["b", "a", "b", "c \u00b7 d", "a"]
    keys.hash_all(texts)
    assert keys.hashes == {text: text_hash(text) for text in texts}
    compact_op.compact(SKILL, dry_run=True, config=config)
    saved = json.loads((built.path / ".git" / compact_op.Keys.FILE).read_text())["keys"]
    ws = Workspace.of(config)
    snap = ws.snapshot(ws.store(SKILL, must_exist=True))
    bodies = {e.body for e in compact_op.rows_of(snap) if e is not None}
    assert len(saved) > 500 and {text_hash(b): decisive_key(b) for b in bodies if text_hash(b) in saved} == saved


@settings(max_examples=1000, deadline=None)
@given(st.text(alphabet="- :ab_1\n\t\u00b7", max_size=40), st.text(alphabet="- :ab_1\n\t", max_size=3))
def test_a_blocks_fields_read_at_once_as_line_by_line(text: str, head: str) -> None:
    """`blocks.fields_of` (one match of the run of field lines) reads what `_fields` reads line by
    line, and `compact.blank` is `not text.strip()`, on any text."""
    assert blocks.fields_of(head + text) == blocks._fields_one_by_one(head + text)
    assert blocks.fields_of("## L1 \u00b7 t\n- a: b\n- c:\n- d:  e \n\nbody") == (("a", "b"), ("c", ""), ("d", "e"))
    assert compact_op.blank(text) == (not text.strip())
