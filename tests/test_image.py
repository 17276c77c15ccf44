"""A big store's snapshot image (index/image.py): a new process maps it instead of decoding
index.sqlite, and what it reads is what index.sqlite gives, however the files changed since.

The store is the benchmark's kind (6,000 entries written by git fast-import), big enough to get an
image. Each check compares a load through the image with a load from index.sqlite alone (the image
deleted), entry by entry, array by array, and recall's answers.
"""
from __future__ import annotations

import dataclasses
import json
import mmap
import re

import numpy as np
import pytest

from git_whetstone.format.layout import scope_key
from git_whetstone.index import columns, freshness, image
from git_whetstone.index.snapshot import KeyIndex
from git_whetstone.ops import capture as capture_op, recall as recall_op
from git_whetstone.ops.hooks import reindex
from git_whetstone.semantics.embed import get_embedder
from git_whetstone.store.store import Store
from tests.helpers import assert_heads_hold, bench_store, git

INTENTS = ["Build a quarterly revenue table: currency formatting, alignment and a totals row",
           "Chart churn by region for executives; pick colors, title and axis scale", "tide charts"]


@pytest.fixture
def big(store_root, monkeypatch):
    monkeypatch.setattr(columns, "HEADS_FROM", 1_000)  # the rows' heads too (from 20,000 rows by default)
    _, config, built = bench_store(monkeypatch, "big", 6_000, 3)
    return config, built.path


def _cold(config, path):
    """A new process's snapshot of the store: nothing in memory, then the usual refresh."""
    freshness.LIVE.clear()
    recall_op.recall("big", INTENTS[0], config=config)
    return next(s for k, s in freshness.LIVE.items() if k[0] == str(path))


def _answers(config) -> list[dict]:
    """Recall's answers, each from a new process's snapshot; the 8-bit scan (which reads rows from
    the image file) and float32 everywhere must agree."""
    out = []
    for intent in INTENTS:
        answers = []
        for way in ("int8", "numpy"):
            freshness.LIVE.clear()
            result = recall_op.recall("big", intent, config=dataclasses.replace(config, vector_scan=way))
            answers.append({k: v for k, v in result.items() if k != "run_id"})
        assert answers[0] == answers[1], intent
        out.append(answers[0])
    return out


def _same(a, b) -> None:
    assert a.size - a.dead == b.size - b.dead and a.count == b.count
    # a scan gives a mapped image's pages of 8-bit rows back as it goes (image.CodePages): what
    # it reads afterwards, rows appended since the image was written included, is unchanged
    queries = get_embedder("static", "").embed(INTENTS)
    for snap in (a, b):
        first = [x.copy() for x in snap.approximate(queries, 0.7)]
        assert all(np.array_equal(x, y) for x, y in zip(first, snap.approximate(queries, 0.7)))
        assert_heads_hold(snap, queries)  # the heads mapped, and those of rows appended since
    rows = np.array(list(a.by_key.values()), np.intp)
    others = np.array([b.by_key[key] for key in a.by_key], np.intp)
    # what recall reads with pread (vectors, and the scopes' phrases and centroids, a scope patched
    # since the image was written from memory) is what the arrays hold, and what the other load holds
    np.random.default_rng(1).shuffle(rows)  # in any order, as recall asks
    assert np.array_equal(a.vectors_of(rows), a.vectors[rows])
    # rows asked for sparsely (one read per run) and densely (chunks picked from), a chunk's edge crossed
    for step in (40, 20, 10, 3):
        some = np.sort(rows)[1::step]
        assert np.array_equal(a.vectors_of(some), a.vectors[some]), step
    live = [i for i, (kind, key, _) in enumerate(a.scopes) if a.holders[(kind, key)]]
    theirs = [b.scope_number[a.scopes[i][:2]] for i in live]
    for name in ("phrases", "centroids"):
        mine = a.scope_vectors_of(name, live[::-1])[::-1]
        assert np.array_equal(mine, getattr(a, name)[live]) and np.array_equal(mine, b.scope_vectors_of(name, theirs))
    # a scope's centroid and phrase, side by side in the image and read at once, scopes asked for
    # sparsely and densely (chunks): the pair the two matrices hold
    for some in (live, live[::-1], live[1::3], live[::40]):
        pairs = a.scope_pairs_of(some)
        assert pairs.shape == (len(some), 2, a.dim)
        assert np.array_equal(pairs[:, 0], a.centroids[some]) and np.array_equal(pairs[:, 1], a.phrases[some])
        assert np.array_equal(pairs, b.scope_pairs_of([theirs[live.index(i)] for i in some]))
    for key, row in a.by_key.items():
        other = b.by_key[key]
        assert a.entries[row] == b.entries[other]
        assert np.array_equal(a.vectors[row], b.vectors[other]) and np.array_equal(a.codes[row], b.codes[other])
        assert a.scopes[a.scope_of[row]] == b.scopes[b.scope_of[other]]
    assert a.files.keys() == b.files.keys()
    for path, rows in a.files.items():
        other = b.files[path]
        assert (rows.stamp, rows.scopes, rows.top, rows.warning, rows.entries) == \
            (other.stamp, other.scopes, other.top, other.warning, other.entries), path
        assert np.array_equal(rows.columns, other.columns) and np.array_equal(rows.phrases, other.phrases), path
        assert np.allclose(rows.sums, other.sums, atol=1e-5), path
        assert np.array_equal(a.alive[rows.start:rows.start + rows.n], b.alive[other.start:other.start + other.n])
    assert a.top == b.top and a.warnings == b.warnings
    for scope, at in a.scope_number.items():
        if a.holders[scope]:
            assert np.allclose(a.centroids[at], b.centroids[b.scope_number[scope]], atol=1e-6)
            assert np.array_equal(a.phrases[at], b.phrases[b.scope_number[scope]])


def test_a_new_process_maps_the_image_and_reads_what_the_index_holds(big):
    config, path = big
    first = _cold(config, path)  # builds index.sqlite, then writes the image
    assert not first.mapped and (path / image.NAME).is_file()
    (path / f"{image.NAME}.4242.tmp").write_bytes(b"what a killed writer leaves")
    assert "index.sqlite-snapshot" not in git(path, "status", "--porcelain").stdout  # ignored, like the index
    mapped = _cold(config, path)
    assert mapped.mapped and mapped.head_basis is not None  # the compact copies come with it, heads and basis
    assert mapped.compact_ready()
    assert set(mapped.readers) == {"vectors", "scope_pairs"}  # float32 read from the file, not the mapping
    answers = _answers(config)
    image.discard(path)
    _same(mapped, _cold(config, path))
    assert _answers(config) == answers


def test_files_changed_since_the_image_are_patched_in(big, monkeypatch):
    config, path = big
    _cold(config, path)
    capture = capture_op.capture("big", "learning", "Number every figure in quarterly board decks from one.",
                                 "figure numbering", "test", confirm="new", config=config)
    assert capture["status"] == "committed"
    files = sorted((path / "learnings").iterdir())
    files[5].unlink()  # a scope file deleted by hand
    copied = files[6].read_text(encoding="utf-8").split("\n\n## ")[0]  # and an id written twice
    with open(files[7], "a", encoding="utf-8") as out:
        out.write("\n" + copied.rstrip("\n") + "\n")
    git(path, "commit", "-qa", "--no-verify", "-m", "hand edits")

    patched = _cold(config, path)  # maps the old image and patches three files in
    assert patched.mapped and capture["entry_id"] in patched.by_id and patched.dead
    assert any("duplicate id" in w for w in patched.warnings)
    answers = _answers(config)
    image.discard(path)
    fresh = _cold(config, path)  # from index.sqlite alone; it writes a new image
    _same(patched, fresh)
    assert _answers(config) == answers
    _same(_cold(config, path), fresh)  # the new image, duplicate id and all

    # an image written by a process that patched many files holds dead rows too
    monkeypatch.setattr(image, "REWRITE_SHARE", 0)
    (path / "learnings" / files[9].name).unlink()
    git(path, "commit", "-qa", "-m", "another deletion")
    patched = _cold(config, path)
    assert patched.mapped and patched.dead
    again = _cold(config, path)
    assert again.mapped and again.dead == patched.dead
    _same(again, patched)
    image.discard(path)
    _same(again, _cold(config, path))


def test_files_the_index_holds_newer_than_the_image_are_taken_from_it(big, monkeypatch):
    """A capture leaves the image as it was and index.sqlite up to date: once one process has read
    the file, every new one takes its rows from the index (nothing read, embedded or written),
    while a file edited by hand since (its record's stamp is old) and a broken one (read from
    HEAD) are read again; the snapshot is the one built from the markdown alone."""
    from git_whetstone.index import build

    config, path = big
    _cold(config, path)
    capture = capture_op.capture("big", "learning", "Number every figure in quarterly board decks from one.",
                                 "figure numbering", "test", confirm="new", config=config)
    assert capture["status"] == "committed"
    read: list[list[str]] = []
    files_of = build.files
    monkeypatch.setattr(build, "files", lambda store, embedder, db, paths, *a, **k: (
        read.append(list(paths)), files_of(store, embedder, db, paths, *a, **k))[1])
    _cold(config, path)  # the first new process reads the captured file, and saves it to the index
    (captured,) = read[-1]
    assert f"## {capture['entry_id']} " in (path / captured).read_text(encoding="utf-8")
    files = sorted((path / "learnings").iterdir())
    edited, broken = f"learnings/{files[3].name}", f"learnings/{files[8].name}"
    assert captured not in (edited, broken)
    written = (path / "index.sqlite").stat().st_mtime_ns
    _cold(config, path)  # the captured file comes from the index now, and nothing is written to it
    assert read[-1] == [] and (path / "index.sqlite").stat().st_mtime_ns == written
    # both others are in the index as they are; then they change behind its back
    text = files[3].read_text(encoding="utf-8")
    files[3].write_text(text.replace("\n\n## ", " A line added by hand.\n\n## ", 1), encoding="utf-8")
    with open(files[8], "a", encoding="utf-8") as out:
        out.write("\n## L999999 · no metadata\n\nbody\n")
    patched = _cold(config, path)
    assert patched.mapped and capture["entry_id"] in patched.by_id and read[-1] == sorted([edited, broken])
    assert "A line added by hand." in " ".join(e.body for e in patched.files[edited].entries)
    assert patched.files[broken].warning
    again = _cold(config, path)
    assert read[-1] == [broken]  # a broken file is read again by every new process; the edited one no more
    _same(again, patched)
    monkeypatch.setattr(build, "files", files_of)
    answers = _answers(config)
    freshness.forget(Store.open(config, "big"))  # no index, no image: every file read from the markdown
    fresh = _cold(config, path)
    assert not fresh.mapped
    _same(patched, fresh)
    assert _answers(config) == answers


def test_a_damaged_or_foreign_image_is_ignored_and_replaced(big):
    config, path = big
    _cold(config, path)
    good = (path / image.NAME).read_bytes()
    answers = _answers(config)
    identity, dim = get_embedder(config.embedding_backend).identity, get_embedder(config.embedding_backend).dim
    older = good.replace(f'"version": {image.VERSION}'.encode(), f'"version": {image.VERSION - 1}'.encode(), 1)
    older = older.replace(b'"<u2"', b'"<f2"')  # as version 7 wrote them: the scopes' compact copies in float16
    assert older.count(b'"<f2"') == 2  # an image of the layout before: read as it is, it would be misread
    for damaged in (good[: len(good) // 2], b"not an image at all", good.replace(identity.encode(), b"x" * len(identity), 1),
                    older):
        (path / image.NAME).write_bytes(damaged)
        assert image.read(path, identity, dim) is None
        snap = _cold(config, path)
        assert not snap.mapped and _answers(config) == answers
        assert image.read(path, identity, dim) is not None  # written again by the process that loaded


def test_a_name_no_image_can_hold_drops_the_image_rather_than_keeping_an_old_one(big):
    """A scope name with a NUL (a hand edit) cannot go into the image's NUL-joined columns: the
    image is removed, so new processes load from index.sqlite instead of patching an old image."""
    config, path = big
    _cold(config, path)
    assert (path / image.NAME).exists()
    target = sorted((path / "learnings").glob("*.md"))[0]
    text = target.read_text()
    line = next(l for l in text.splitlines() if l.startswith("- scope: "))
    target.write_text(text.replace(line, line[:-1] + "\0" + line[-1:], 1))
    snap = _cold(config, path)
    assert any("\0" in display for _, _, display in snap.scopes)
    answers = _answers(config)
    embedder = get_embedder(config.embedding_backend)
    image.write(path, embedder.identity, snap)
    assert not (path / image.NAME).exists()
    assert not _cold(config, path).mapped and _answers(config) == answers


def test_reindex_drops_the_image_with_the_index(big):
    config, path = big
    _cold(config, path)
    with open(path / image.NAME, "ab") as old:
        old.write(b"the old image")  # still readable: what follows the entries is never read
    embedder = get_embedder(config.embedding_backend)
    assert image.read(path, embedder.identity, embedder.dim) is not None
    (path / f"{image.NAME}.4242.tmp").write_bytes(b"what a killed writer leaves")
    reindex("big", config=config)
    assert not (path / image.NAME).read_bytes().endswith(b"the old image")  # the rebuild wrote a new one
    assert not list(path.glob("*.tmp"))
    assert image.read(path, embedder.identity, embedder.dim) is not None


def _key_index(keys: list[int], gathered: bool) -> KeyIndex:
    """key i of `keys` held at row i: sorted on the spot, or gathered when first looked up from
    the rows' keys as a mapped snapshot has them (`KeyIndex.gathered`)."""
    if not gathered:
        return KeyIndex(np.array(keys, np.int64), np.arange(len(keys)))
    id_key = np.array(keys, np.int64)
    return KeyIndex.gathered(id_key, np.argsort(id_key, kind="stable"))


@pytest.mark.parametrize("gathered", [False, True])
def test_the_key_index_of_a_mapped_snapshot_behaves_as_a_dict(gathered):
    """A mapped snapshot's id key -> row index (`KeyIndex`: sorted arrays and a dict of changes)
    answers every lookup, change and count as a dict given the same operations does."""
    import random
    rng = random.Random(4)
    keys = rng.sample(range(2, 5_000), 1_500)
    expected = dict(zip(keys, range(len(keys))))
    index = _key_index(keys, gathered)
    assert len(index) == len(expected)
    for step in range(6_000):
        key = rng.randrange(0, 5_200)
        op = rng.random()
        if op < 0.3:
            assert index.setdefault(key, step) == expected.setdefault(key, step)
        elif op < 0.5 and key in expected:
            del index[key], expected[key]
        elif op < 0.6:
            index[key] = expected[key] = step
        else:
            assert index.get(key) == expected.get(key) and (key in index) == (key in expected)
        assert len(index) == len(expected)
    assert dict(index.items()) == expected and sorted(index) == sorted(expected)


@pytest.mark.parametrize("gathered", [False, True])
def test_the_key_index_forgets_a_files_keys_at_once_as_a_dict_does_one_by_one(gathered):
    """`KeyIndex.discard(keys, rows)` (one binary search for a removed file's rows) leaves what
    `if d.get(key) == row: del d[key]` leaves a dict, key by key: keys held at another row, keys
    never held, keys set since the image (its dict of changes), a key twice in one call."""
    import random
    rng = random.Random(9)
    keys = rng.sample(range(2, 40_000), 12_000)
    original = dict(zip(keys, range(len(keys))))
    expected = dict(original)
    index = _key_index(keys, gathered)
    del expected[keys[0]]  # a file's rows removed before anything else is asked: one held there, one not
    index.discard(np.array(keys[:2], np.int64), np.array([0, 5], np.int64))
    for step in range(3_000):
        op = rng.random()
        if op < 0.3:  # moved to another row, or new since the image
            key = rng.randrange(0, 41_000)
            index[key] = expected[key] = 100_000 + step
        elif op < 0.4 and expected:
            key = rng.choice(list(expected)) if step % 50 == 0 else rng.randrange(0, 41_000)
            if key in expected:
                del index[key], expected[key]
        else:  # a file's rows: most held there, some held elsewhere, some never held
            batch = [(key, row) for key, row in rng.sample(sorted(expected.items()), rng.randint(0, min(8, len(expected))))]
            batch += [(rng.randrange(0, 41_000), rng.randrange(0, 200_000)) for _ in range(rng.randint(0, 3))]
            batch += [(key, original[key]) for key in rng.sample(keys, 2)]  # as the image held them (gone since?)
            if rng.random() < 0.2:
                batch.append((batch[0][0], batch[0][1] + 1))  # the same key at another row too,
                batch.append(batch[0])                         # and at the same row again
            for key, row in batch:
                if expected.get(key) == row:
                    del expected[key]
            index.discard(np.array([k for k, _ in batch], np.int64), np.array([r for _, r in batch], np.int64))
        assert len(index) == len(expected)
    assert dict(index.items()) == expected and sorted(index) == sorted(expected)
    assert sorted(index.values()) == sorted(expected.values())

def test_a_mapped_snapshot_makes_each_file_as_the_load_from_the_index_does(big, monkeypatch):
    """A mapped snapshot keeps its files as arrays (`FileTable`) and makes a file's `FileRows` only
    when asked: its stamps, warnings, highest ids, row owners and scope holders, asked before any
    file is made and again after, are what the load from index.sqlite alone gives (and the holders'
    order, which picks the file a new entry of a scope goes to, is the order of the files)."""
    config, path = big
    _cold(config, path)
    files = sorted((path / "learnings").iterdir())
    files[5].unlink()  # a deletion, a duplicate id and a broken file, all in the image written next
    copied = files[6].read_text(encoding="utf-8").split("\n\n## ")[0]
    with open(files[7], "a", encoding="utf-8") as out:
        out.write("\n" + copied.rstrip("\n") + "\n")
    block = files[10].read_text(encoding="utf-8").split("\n\n## ")[0]
    scope = next(line for line in block.splitlines() if line.startswith("- scope: "))
    for number, other in ((900_001, files[9]), (900_002, files[11])):  # a scope held by three files
        with open(other, "a", encoding="utf-8") as out:
            copy = re.sub(r"^## L\d+", f"## L{number}", block)
            if number == 900_002:  # and named otherwise there (after the files naming it as files[10] does)
                copy = copy.replace(scope, "- scope: " + scope.removeprefix("- scope: ").upper())
            out.write("\n" + copy.rstrip("\n") + "\n")
    git(path, "commit", "-qa", "--no-verify", "-m", "hand edits")
    with open(files[8], "a", encoding="utf-8") as out:  # broken in the work tree: read from HEAD, with a warning
        out.write("\n## L999999 · no metadata\n\nbody\n")
    capture = capture_op.capture("big", "issue", "Never round a currency total before summing its rows.",
                                 "currency totals", "test", confirm="new", config=config)
    assert capture["status"] == "committed"
    share = image.REWRITE_SHARE
    monkeypatch.setattr(image, "REWRITE_SHARE", 0)  # the process that patches writes the image again
    _cold(config, path)
    monkeypatch.setattr(image, "REWRITE_SHARE", share)  # (the broken file is read again by every new process)
    mapped = _cold(config, path)
    assert mapped.mapped and mapped.dead and any("duplicate id" in w for w in mapped.warnings)
    image.discard(path)
    loaded = _cold(config, path)
    assert not loaded.mapped and any(files[8].name in w for w in loaded.warnings)

    table = mapped.files.table
    assert table is not None and len(table.paths) == len(mapped.files)
    made_by_recall = set(mapped.files._made)  # the files of the entries recall answered with
    assert len(made_by_recall) < len(table.paths) // 10
    assert mapped.files.keys() == loaded.files.keys() and len(list(mapped.files)) == len(loaded.files)
    for rel, rows in loaded.files.items():
        assert mapped.files.warning(rel) == rows.warning, rel
    stamps = {rel: rows.stamp for rel, rows in loaded.files.items()}
    assert mapped.files.outdated(stamps, stamps, False) == []
    assert mapped.files.outdated(stamps, stamps, True) == [rel for rel in stamps if loaded.files[rel].warning]
    some = sorted(stamps)[::7]
    assert mapped.files.outdated({**stamps, **{rel: "0:0:0" for rel in some}}, stamps, False) == some
    assert mapped.files.outdated({**stamps, "learnings/new.md": "1:1:1"}, ["learnings/new.md"], False) == ["learnings/new.md"]
    assert mapped.top == loaded.top and mapped.warnings == loaded.warnings and mapped.warned == loaded.warned
    assert set(mapped.files._made) == made_by_recall  # nothing above made a file's rows
    owners = [mapped.owner[row] for row in range(mapped.size)]
    made = dict(mapped.files.items())
    expected = [None] * mapped.size
    for rel, rows in made.items():
        expected[rows.start:rows.start + rows.n] = [rows] * rows.n
    assert all(a is b for a, b in zip(owners, expected))
    order = list(made)
    shared = (scope_key(scope.removeprefix("- scope: ")), [r for r in order if r.endswith((files[9].name, files[10].name, files[11].name))])
    assert shared[1] and list(mapped.holders[("learning", shared[0])]) == shared[1] and len(shared[1]) == 3
    for kind, key, _ in mapped.scopes:
        held = [rel for rel in order if any((k, s) == (kind, key) for k, s, _ in made[rel].scopes)]
        assert list(mapped.holders[(kind, key)]) == held, (kind, key)
        assert set(held) == set(loaded.holders.get((kind, key), {})), (kind, key)  # (a scope emptied: no holder)
    _same(mapped, loaded)
    # files removed from the table at once (their ids forgotten in one search, `KeyIndex.discard`)
    # leave what removing them one by one from the loaded snapshot leaves, and are read again when
    # they come back
    gone = sorted(stamps)[3::11]
    starts = [mapped.files[rel].start for rel in gone]
    mapped.remove_files(gone)
    for rel in gone:
        loaded.remove_files([rel])
    assert isinstance(mapped.by_key, KeyIndex) and mapped.by_key.keys() == loaded.by_key.keys()
    _same(mapped, loaded)
    assert not set(gone) & set(mapped.files) and len(list(mapped.files)) == len(stamps) - len(gone)
    assert mapped.files.outdated(stamps, stamps, False) == gone and all(mapped.owner[s] is None for s in starts)


def test_what_a_mapped_snapshot_reads_again_is_what_its_stamps_say(big):
    config, path = big
    _cold(config, path)
    embedder = get_embedder(config.embedding_backend, config.embedding_model)
    snap = image.read(path, embedder.identity, embedder.dim)  # as a new process has it before its first refresh
    assert snap is not None and snap.mapped
    table = snap.files.table
    held = dict(zip(table.paths, table.stamps))

    def reference(stamps: dict[str, str], paths: list[str]) -> list[str]:
        """From scratch: the paths on disk the image does not hold, or holds with another stamp."""
        return [p for p in paths if p in stamps and held.get(p) != stamps[p]]

    scanned = {p: s for p, s in freshness.scan(Store.open(config, "big")).items() if p != "@HEAD"}
    assert scanned == held  # the image holds the store as it is on disk
    first, second = table.paths[0], table.paths[len(table.paths) // 2]
    cases = [scanned,
             {**scanned, "learnings/new-0000.md": "1:2:3"},                      # a file the image does not hold
             {**scanned, second: "1:2:3"},                                          # a file changed since
             {p: s for p, s in scanned.items() if p != first},                      # a file deleted since
             {**{p: s for p, s in scanned.items() if p != first}, "issues/x.md": "4:5:6"}]
    expected = [[], ["learnings/new-0000.md"], [second], [], ["issues/x.md"]]
    for stamps, want in zip(cases, expected):
        for paths in (list(stamps), sorted(stamps)[::-1], [second, "learnings/new-0000.md", first, "issues/gone.md"]):
            got = snap.files.outdated(stamps, paths, True)
            assert got == reference(stamps, paths), (want, paths[:3])
            if paths == list(stamps):
                assert got == want


def _vm_flags(address: int) -> set[str] | None:
    """The flags /proc/self/smaps gives the mapping that holds `address`."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start <= address < end
            elif inside and line.startswith("VmFlags:"):
                return set(line.split()[1:])
    return None


def test_the_8bit_rows_of_a_mapped_image_ask_for_huge_pages(big):
    """The scan gives the 8-bit rows' pages back after each pass and maps them again on the next
    (image.CodePages): the mapping asks for huge pages there (THP's madvise mode), so once the
    kernel has evicted the file's pages they come back in large folios (a fault maps a whole
    folio) rather than 4 KB at a time. The rest of the image keeps the default."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as file:
            if "[never]" in file.read():
                pytest.skip("transparent huge pages are off here")
    except OSError:
        pytest.skip("no transparent huge pages here (not Linux)")
    config, path = big
    _cold(config, path)  # builds index.sqlite, then writes the image
    snap = _cold(config, path)
    assert snap.mapped and snap.release_codes is not None
    codes = snap.codes
    for row in (len(codes) // 4, len(codes) // 2, len(codes) * 3 // 4):
        assert "hg" in _vm_flags(codes[row].ctypes.data), row
    assert "hg" not in _vm_flags(snap.alive.ctypes.data) and "hg" not in _vm_flags(snap.phrases16.ctypes.data)


def test_a_mapped_snapshot_keeps_its_stamps_in_the_tables_strings(big):
    """A cold process's stamps as the snapshot keeps them (`Files.shared`): equal to the scan's
    whatever changed on disk, and made of the table's own strings only when they are equal."""
    config, path = big
    _cold(config, path)
    scanned = freshness.scan(Store.open(config, "big"))
    mapped = _cold(config, path)
    assert mapped.mapped and mapped.stamps == scanned
    table = mapped.files.table
    same = {id(s) for s in (*table.paths, *table.stamps)}
    assert all(id(p) in same and id(s) in same for p, s in mapped.stamps.items() if p != "@HEAD")
    first, second = table.paths[0], table.paths[len(table.paths) // 2]
    cases = [scanned, {**scanned, "@HEAD": "another"},
             {**scanned, "learnings/new-0000.md": "1:2:3"},                      # a file the table does not hold
             {**scanned, second: "1:2:3"},                                          # a file changed since
             {p: s for p, s in scanned.items() if p != first},                      # a file deleted since
             {**{p: s for p, s in scanned.items() if p != first}, "issues/x.md": "4:5:6"},
             {p: s for p, s in scanned.items() if p != "@HEAD"}]
    for stamps in cases:
        got = mapped.files.shared(stamps)
        assert got == stamps


def test_a_long_lived_process_keeps_few_files_parsed_and_reads_the_rest_again_alike(big, monkeypatch):
    """`records.PARSED_FILES`: once more files' entries were read than stay parsed, the oldest are
    kept as their JSON text only (`FileRows.unparse`), and read again they are the same entries."""
    from git_whetstone.index import records
    config, path = big
    _cold(config, path)
    snap = _cold(config, path)  # mapped: each file's entries decoded when first read
    monkeypatch.setattr(records, "PARSED_FILES", 5)
    for rows in list(records._PARSED.values()):  # what the recalls so far read
        rows.unparse()
    paths = list(snap.files)[:40]
    first = {p: list(snap.files[p].entries) for p in paths}
    assert len(records._PARSED) == 5 and all(snap.files[p]._entries is None for p in paths[:-5])
    assert all(snap.files[p]._entries is not None for p in paths[-5:])
    for p in paths:
        assert snap.files[p].entries == first[p] and len(records._PARSED) <= 5
    rows = snap.files[paths[0]]
    assert [snap.entries[rows.start + i] for i in range(rows.n)] == first[paths[0]]


def _present(address: int, length: int) -> int:
    """How many pages of [address, address + length) this process has mapped (/proc/self/pagemap)."""
    page = 4096
    first, last = address // page, -(-(address + length) // page)
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(first * 8)
        entries = np.frombuffer(pagemap.read((last - first) * 8), np.uint64)
    return int((entries >> np.uint64(63)).sum())


def _header(path) -> dict:
    with open(path / image.NAME, "rb") as file:
        head = file.read(len(image.MAGIC) + 8)
        return json.loads(file.read(int.from_bytes(head[len(image.MAGIC):], "little")))


def test_the_entries_of_a_mapped_image_are_read_not_mapped(big):
    """Every file's entries are decoded from bytes read with pread (`image.Texts`), never through
    the mapping: a recall decodes a few KB for each file it shows, and the page cache may hold the
    file in 2 MB folios, a byte touched mapping a whole one (11 MB at 100,000 entries). What they
    decode to is held to the load from index.sqlite (`_same`)."""
    config, path = big
    _cold(config, path)
    snap = _cold(config, path)
    assert snap.mapped
    mapped = snap.release_codes.mapped
    start = np.frombuffer(mapped, np.uint8).ctypes.data  # (touches nothing)
    # the region unmapped, and no fault from now on mapping more than its neighbours (no huge pages)
    raw = -(-_header(path)["raw_base"] // mmap.PAGESIZE) * mmap.PAGESIZE
    mapped.madvise(mmap.MADV_NOHUGEPAGE)
    mapped.madvise(mmap.MADV_DONTNEED, raw, len(mapped) - raw)  # (nothing writes there)
    for file in snap.files.values():
        assert file.entries
    around = 64 << 10  # the kernel's fault-around: a fault in the last array may map a few pages past it
    assert _present(start + raw + around, len(mapped) - raw - around) == 0
    mapped[raw:raw + 16]  # (the check sees what the mapping reads)
    assert _present(start + raw, 4096) == 1
