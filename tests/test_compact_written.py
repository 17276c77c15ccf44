"""An applied compact hands the index the entries of the files it wrote (`build.Written`): it
made them as it wrote them (the snapshot's entries with the plan's changes, placed by the new
text's headings), so the refresh after its commit parses none of those files, and compact does not
decode their records again for its report. Proved against a build from scratch: the `files` the
index holds after the compact are byte for byte those every file parsed again gives, with the
workers (as at 100,000 entries) and without, and with a hand edit landing between compact's write
and its refresh (that file is parsed, not taken)."""
from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings, strategies as st

from git_whetstone.format import blocks
from git_whetstone.index import build, freshness
from git_whetstone.ops import compact as compact_op
from git_whetstone.ops.workspace import Workspace
from git_whetstone.store.store import Store
from tests.helpers import bench_store, git


def files_table(path) -> dict[str, tuple]:
    db = sqlite3.connect(path / "index.sqlite")
    try:
        return {row[0]: row for row in db.execute("SELECT * FROM files")}
    finally:
        db.close()


def scratch(config, skill: str, path) -> tuple[dict[str, tuple], dict]:
    """The `files` of an index built from scratch, and compact's report on it."""
    freshness.LIVE.clear()
    ws = Workspace.of(config)
    store = ws.store(skill)
    freshness.forget(store)
    snap = ws.snapshot(store)
    report = compact_op.findings(store, snap, config)
    freshness.LIVE.clear()
    return files_table(path), report


def with_copies(path) -> None:
    """Copies of rules beside them (merged into them by compact: recurrences summed, provenance
    lines added, a copy's `applies: always` kept), some at the end of a file, some at its start."""
    for n, file in enumerate(sorted((path / "learnings").glob("*.md"))[:60:2]):
        text = file.read_text()
        block = blocks.parse(text, file.name).blocks[-1]
        fields = [("recurrence", "2"), ("first_seen", "2026-06-01"), ("last_seen", "2026-06-30"), ("scope", block.scope)]
        if n % 3 == 0:
            fields.append(("applies", "always"))
        fields.append(("provenance", blocks.encode_value(f'run {n}: said "twice" \u2014 again')))
        copy = blocks.render(f"L9{n:04d}", block.title, fields, block.body.replace(".", ". "))
        file.write_text(blocks.append(text, copy) if n % 2 else copy + "\n" + text)
    git(path, "commit", "-qam", "hand: copies")


def _handed_over(monkeypatch) -> list[build.Written]:
    """Each `build.Written` a refresh is handed, as it is handed."""
    handed: list[build.Written] = []
    real_take = build.Written.take

    def take(self, store, paths):
        handed.append(self)
        return real_take(self, store, paths)

    monkeypatch.setattr(build.Written, "take", take)
    return handed


@pytest.mark.parametrize("pooled", [True, False])
def test_the_index_after_a_compact_is_the_one_built_from_scratch(store_root, monkeypatch, pooled):
    _, config, built = bench_store(monkeypatch, "written", 3_000, 17)
    with_copies(built.path)
    compact_op.compact("written", dry_run=True, config=config)
    monkeypatch.setattr(build, "POOL_FROM", 10 if pooled else 10 ** 9)
    handed = _handed_over(monkeypatch)
    out = compact_op.compact("written", config=config)
    assert out["committed"]
    assert sum(c.startswith("merge L9") for c in out["changes"]) >= 10
    written = handed[-1]
    kept = {str(p.relative_to(built.path)) for folder in ("learnings", "issues")
            for p in (built.path / folder).glob("*.md")}
    # every file compact wrote and left standing: taken, none parsed again
    assert len(written.taken) > 100 and written.taken.keys() == written.files.keys() <= kept
    after = files_table(built.path)
    monkeypatch.setattr(build, "POOL_FROM", 10 ** 9)
    fresh, report = scratch(config, "written", built.path)
    assert after == fresh
    assert out["report"] == report


@pytest.mark.parametrize("overlap", [True, False])
def test_a_file_edited_between_compacts_write_and_its_refresh_is_parsed(store_root, monkeypatch, overlap):
    _, config, built = bench_store(monkeypatch, "written", 3_000, 19)
    compact_op.compact("written", dry_run=True, config=config)
    monkeypatch.setattr(compact_op, "OVERLAP", overlap)
    edited: list[str] = []
    real_write = Store.write_and_commit

    def write_then_edit(self, message, files, meanwhile=None, **kw):
        def edit() -> None:
            # a person's edit right after compact's write: a rule reworded, same length, same file
            path = max((p for p, data in files.items() if data), key=lambda p: len(files[p]))
            text = path.read_text()
            at = text.index("\n\n") + 2  # the first block's body
            path.write_text(text[:at] + ("X" if text[at] != "X" else "Y") + text[at + 1:])
            edited.append(str(path.relative_to(self.path)))

        def edit_then_refresh():  # (the refresh runs while git stages the files)
            edit()
            return meanwhile()
        made = real_write(self, message, files, meanwhile=edit_then_refresh if meanwhile else None, **kw)
        if meanwhile is None:  # (the refresh runs after the commit)
            edit()
        return made

    monkeypatch.setattr(Store, "write_and_commit", write_then_edit)
    handed = _handed_over(monkeypatch)
    out = compact_op.compact("written", config=config)
    assert out["committed"] and edited
    assert edited[0] in handed[-1].files and edited[0] not in handed[-1].taken
    assert len(handed[-1].taken) == len(handed[-1].files) - 1
    after = files_table(built.path)
    fresh, report = scratch(config, "written", built.path)
    assert after == fresh
    assert out["report"] == report


@pytest.mark.parametrize("git_refuses", [True, False])
def test_a_compacts_journal_names_head_blobs_and_recovery_restores_or_completes_from_them(
        store_root, monkeypatch, git_refuses):
    """A compact's journal holds the scope files it rewrites as HEAD holds them by their blob's id
    (not their text): a writer killed after its files and before its commit is still completed, or
    undone to exactly the bytes that were there when git refuses the commit."""
    import json

    from git_whetstone.base.errors import WhetstoneError
    from git_whetstone.store import journal

    _, config, built = bench_store(monkeypatch, "journal", 1_000, 6)
    path = built.path
    scope_files = {p: p.read_bytes() for folder in ("learnings", "issues") for p in (path / folder).glob("*.md")}
    kept: list[bytes] = []
    real_record = journal.record

    def record(*args, **kw):
        made = real_record(*args, **kw)
        kept.append(made.read_bytes())
        return made

    monkeypatch.setattr(journal, "record", record)
    assert compact_op.compact("journal", config=config)["committed"]
    data = json.loads(kept[-1])
    befores = {item["path"]: item["before"] for item in data["files"]}
    assert len(befores) > 32 and all(isinstance(b, dict) and set(b) == {"blob"}
                                     for rel, b in befores.items() if rel.endswith(".md"))
    compacted = git(path, "rev-parse", "HEAD^{tree}").stdout
    after = {p: p.read_bytes() if p.exists() else None for p in scope_files}
    # killed after its files, before its commit: HEAD and git's index as before, the journal left
    git(path, "reset", "-q", "HEAD~1")
    (path / ".git" / journal.JOURNAL).write_bytes(kept[-1])
    store = Workspace.of(config).store("journal")

    def commit(message, rels):
        if git_refuses:
            raise WhetstoneError("a hook said no")
        store.commit_paths(message, rels)

    action, _ = journal.recover(path, commit, None)
    if git_refuses:
        assert action == "rolled_back"
        assert {p: p.read_bytes() if p.exists() else None for p in scope_files} == scope_files
    else:
        assert action == "committed"
        assert git(path, "rev-parse", "HEAD^{tree}").stdout == compacted
        assert {p: p.read_bytes() if p.exists() else None for p in scope_files} == after


def snapshot_state(snap) -> dict:
    """Everything a snapshot holds that recall and capture read: its arrays (and their compact
    copies), scopes, files and their rows, live ids, duplicates and warnings."""
    arrays = {name: array.tobytes() for name, array in snap.image_arrays().items()}
    return {"arrays": arrays, "size": snap.size, "count": snap.count, "dead": snap.dead, "scopes": list(snap.scopes),
            "files": [(path, snap.files[path].start, snap.files[path].n) for path in sorted(snap.files)],
            "by_key": sorted(dict(snap.by_key).items()), "duplicates": dict(snap.duplicates),
            "warned": sorted(snap.warned), "stamped": sorted(snap.stamps)}  # (two copies: inodes, times differ)


def test_a_compacts_refresh_adds_its_rows_to_the_compacted_snapshot_as_adding_then_compacting_does(
        store_root, monkeypatch):
    """The refresh after a compact adds the files it read once all are read, to the compacted
    snapshot when the change leaves it compacted (`freshness.DEFER`): the same snapshot as adding
    them batch by batch to the live one, growing its matrices, then compacting (the reference),
    on two copies of one store, with the workers."""
    import shutil

    from git_whetstone.base.config import load

    _, config, built = bench_store(monkeypatch, "big", 3_000, 23)
    with_copies(built.path)
    other = store_root.parent / "reference"
    shutil.copytree(built.path, other / "big", symlinks=True)
    monkeypatch.setattr(build, "POOL_FROM", 10)
    states = []
    for root, defer in ((store_root, True), (other, False)):
        monkeypatch.setenv("WHETSTONE_STORE_ROOT", str(root))
        monkeypatch.setattr(freshness, "DEFER", defer)
        freshness.LIVE.clear()
        config = load()
        compact_op.compact("big", dry_run=True, config=config)  # a live snapshot, as compact keeps one
        made: list = []
        real = freshness.snapshot

        def keep(*args, **kw):
            made.append(real(*args, **kw))
            return made[-1]

        monkeypatch.setattr(freshness, "snapshot", keep)
        monkeypatch.setattr("git_whetstone.ops.workspace.snapshot", keep)
        assert compact_op.compact("big", config=config)["committed"]
        monkeypatch.setattr(freshness, "snapshot", real)
        monkeypatch.setattr("git_whetstone.ops.workspace.snapshot", real)
        assert made[-1].dead == 0 and made[-1] is not made[0]  # compacted after the commit's refresh
        states.append(snapshot_state(made[-1]))
        freshness.LIVE.clear()
    assert states[0]["count"] > 2_000
    assert states[0] == states[1]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 40), unique=True, max_size=30),
       st.lists(st.tuples(st.booleans(), st.integers(0, 50), st.integers(0, 999)), max_size=40))
def test_a_key_index_gives_its_rows_as_looking_up_each_key_does(keys, changes) -> None:
    """`KeyIndex.values` (at once) is the rows a Mapping gives key by key, through sets and deletes."""
    import numpy as np

    from git_whetstone.index.snapshot import KeyIndex

    index = KeyIndex(np.array(keys[::-1], np.int64), np.arange(len(keys), dtype=np.int64) * 3)
    for remove, key, row in changes:
        if remove and key in index:
            del index[key]
        elif not remove:
            index[key] = row
        assert index.values() == [index[key] for key in index]


def scope_bytes(path) -> dict:
    return {p: p.read_bytes() for folder in ("learnings", "issues") for p in (path / folder).glob("*.md")}


def test_a_compacts_refresh_beside_git_gives_the_commit_index_and_output_of_a_refresh_after_it(
        store_root, monkeypatch):
    """The refresh after an applied compact runs while git stages its files (`OVERLAP`): on two
    copies of one store, with the workers, the same commit, the same index and the same output as
    refreshing once the commit is made (the reference), nothing committed while it ran, and the
    snapshot left naming the commit's HEAD."""
    import shutil

    from git_whetstone.base.config import load

    _, config, built = bench_store(monkeypatch, "big", 3_000, 29)
    with_copies(built.path)
    other = store_root.parent / "reference"
    shutil.copytree(built.path, other / "big", symlinks=True)
    monkeypatch.setattr(build, "POOL_FROM", 10)
    seen: dict[bool, list] = {True: [], False: []}
    real_take = build.Written.take
    results = {}
    for root, overlap in ((store_root, True), (other, False)):
        monkeypatch.setenv("WHETSTONE_STORE_ROOT", str(root))
        monkeypatch.setattr(compact_op, "OVERLAP", overlap)
        freshness.LIVE.clear()
        config = load()
        path = root / "big"
        before = git(path, "rev-parse", "HEAD").stdout

        def take(self, store, paths, overlap=overlap, path=path, before=before):
            # what the refresh finds: HEAD (not committed yet, or committed) and the journal
            seen[overlap].append((git(path, "rev-parse", "HEAD").stdout == before,
                                  (path / ".git" / "whetstone-journal.json").exists()))
            return real_take(self, store, paths)
        monkeypatch.setattr(build.Written, "take", take)
        out = compact_op.compact("big", config=config)
        assert out["committed"] and len(out["changes"]) > 32
        snap = freshness.LIVE[(str(path), Workspace.of(config).embedder.identity)]
        assert snap.stamps["@HEAD"] == git(path, "rev-parse", "HEAD").stdout.strip() != before.strip()
        results[overlap] = (out, git(path, "rev-parse", "HEAD^{tree}").stdout, files_table(path),
                            git(path, "log", "-1", "--format=%B").stdout)
    assert seen[True] == [(True, True)] and seen[False] == [(False, False)]
    (out, tree, table, message), (ref_out, ref_tree, ref_table, ref_message) = results[True], results[False]
    assert out == ref_out and tree == ref_tree and message == ref_message
    assert {p: row[:1] + row[2:] for p, row in table.items()} == {p: row[:1] + row[2:] for p, row in ref_table.items()}
    fresh, _ = scratch(config, "big", store_root / "big")
    assert table == fresh


@pytest.mark.parametrize("overlap", [True, False])
def test_a_compact_whose_commit_a_hook_refuses_puts_its_files_back_and_the_index_follows_them(
        store_root, monkeypatch, overlap):
    """A commit refused (a pre-commit hook says no) after the refresh ran beside git: the compact
    fails with one line, every file is put back, HEAD and git's index are as before, and the next
    read's index is the one built from scratch, its snapshot naming HEAD."""
    from git_whetstone.base.errors import WhetstoneError

    _, config, built = bench_store(monkeypatch, "refused", 1_000, 31)
    with_copies(built.path)
    monkeypatch.setattr(compact_op, "OVERLAP", overlap)
    monkeypatch.setattr(build, "POOL_FROM", 10)
    path = built.path
    hook = path / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'not today' >&2\nexit 1\n")
    hook.chmod(0o755)
    handed = _handed_over(monkeypatch)
    files, head = scope_bytes(path), git(path, "rev-parse", "HEAD").stdout
    with pytest.raises(WhetstoneError, match="not today"):
        compact_op.compact("refused", config=config)
    assert bool(handed and handed[-1].taken) is overlap  # the refresh ran beside git, over the files written
    assert scope_bytes(path) == files and git(path, "rev-parse", "HEAD").stdout == head
    assert git(path, "status", "--porcelain", "--untracked-files=no").stdout == ""
    assert not (path / ".git" / "whetstone-journal.json").exists()
    ws = Workspace.of(config)
    snap = ws.snapshot(ws.store("refused"))
    assert snap.stamps["@HEAD"] == head.strip()
    after = files_table(path)
    fresh, _ = scratch(config, "refused", path)
    assert after == fresh
