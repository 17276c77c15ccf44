"""Building the index from scratch (index/build.py): the forked workers build the index one process
builds, bit for bit; a build tells a progress callback how it goes, and the CLI draws that on a
terminal only; each vector is stored once.

The store is the benchmark's kind (6,000 entries in 600 scope files, by git fast-import), with the
pool's threshold lowered under its 600 files, and a file broken by hand (served from its last
committed version, with a warning) and an id written twice, so the workers meet both.
"""
from __future__ import annotations

import gc
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from git_whetstone.index import build, cache, freshness, image
from git_whetstone.ops import recall as recall_op
from git_whetstone.ops.hooks import reindex
from tests.helpers import REPO, bench_store, git

INTENTS = ["Build a quarterly revenue table: currency formatting, alignment and a totals row",
           "Chart churn by region for executives; pick colors, title and axis scale", "tide charts"]


@pytest.fixture
def big(store_root, monkeypatch):
    _, config, built = bench_store(monkeypatch, "big", 6_000, 5)
    path = built.path
    files = sorted((path / "learnings").iterdir())
    copied = files[6].read_text(encoding="utf-8").split("\n\n## ")[0]  # an id written twice
    with open(files[7], "a", encoding="utf-8") as out:
        out.write("\n" + copied.rstrip("\n") + "\n")
    git(path, "commit", "-qa", "--no-verify", "-m", "a duplicate id")
    with open(files[8], "a", encoding="utf-8") as out:  # a broken edit, not committed
        out.write("\n## L999999 · no metadata\n\nbody\n")
    monkeypatch.setattr(build, "POOL_FROM", 100)
    return config, path


def _built(config, path, monkeypatch, pool: bool, progress=None):
    """A build from scratch (`reindex`), with the workers or without; what it left on disk, the
    snapshot, and recall's answers."""
    used = []
    real = build._pooled

    def pooled(*args):
        used.append(True)
        yield from real(*args)

    monkeypatch.setattr(build, "_pooled", pooled)
    monkeypatch.setattr(build, "POOL_FROM", 100 if pool else 10**9)
    reindex("big", config=config, progress=progress)
    assert bool(used) == pool
    snap = next(s for k, s in freshness.LIVE.items() if k[0] == str(path))
    db = sqlite3.connect(path / "index.sqlite")
    tables = {name: db.execute(f"SELECT * FROM {name} ORDER BY 1, 2, 3").fetchall()
              for name in ("files", "vectors")}
    db.close()
    answers = []
    for intent in INTENTS:
        result = recall_op.recall("big", intent, config=config)
        answers.append({k: v for k, v in result.items() if k != "run_id"})
    return tables, (path / image.NAME).read_bytes(), snap, answers


def test_the_workers_build_what_one_process_builds(big, monkeypatch):
    config, path = big
    serial = _built(config, path, monkeypatch, pool=False)
    pooled = _built(config, path, monkeypatch, pool=True)
    assert gc.isenabled() and gc.get_freeze_count() == 0  # the pause for the build is over
    assert len(serial[0]["files"]) == 600 and serial[0]["vectors"] == []
    assert any(row[2] for row in serial[0]["files"])  # the broken file's warning
    assert serial[0] == pooled[0]  # index.sqlite, row by row, byte for byte
    assert serial[1] == pooled[1]  # the image
    a, b = serial[2], pooled[2]
    assert a.size == b.size and a.dead == b.dead and a.warnings == b.warnings and a.top == b.top
    for name in (*a.ROW_ARRAYS, *a.SCOPE_ARRAYS):
        assert np.array_equal(getattr(a, f"_{name}")[:a.size if name in a.ROW_ARRAYS else len(a.scopes)],
                              getattr(b, f"_{name}")[:b.size if name in b.ROW_ARRAYS else len(b.scopes)]), name
    assert [a.entries[i] for i in range(a.size)] == [b.entries[i] for i in range(b.size)]
    assert serial[3] == pooled[3]
    assert any("duplicate id" in w for w in serial[3][0]["warnings"])
    assert any("last committed version" in w for w in serial[3][0]["warnings"])


def test_a_build_saves_batch_by_batch_and_after_a_skipped_save_all_the_rest_at_the_end(big, monkeypatch):
    """The workers' batches are saved as they come (the first build's rows coded meanwhile); when
    another process holds the index for writing, that save is skipped and the later batches wait
    for the one save at the end: the same index.sqlite and image as a one-process build's."""
    config, path = big
    serial = _built(config, path, monkeypatch, pool=False)
    real, saves = cache.save, []

    def save(db, embedder, removed, records, kept=None):
        saves.append(len(records))
        if len(saves) != 2:
            return real(db, embedder, removed, records, kept)
        other = sqlite3.connect(path / "index.sqlite", isolation_level=None)  # another writer, meanwhile
        other.execute("BEGIN IMMEDIATE")
        try:
            return real(db, embedder, removed, records)
        finally:
            other.execute("ROLLBACK")
            other.close()

    monkeypatch.setattr(cache, "save", save)
    pooled = _built(config, path, monkeypatch, pool=True)
    assert saves == [100, 100, 500]  # saved, skipped, and that one's records with the rest at the end
    assert serial[0] == pooled[0] and serial[1] == pooled[1] and serial[3] == pooled[3]


def test_the_workers_hand_their_batches_over_in_a_spool_that_goes_with_the_build(big, monkeypatch):
    """Each batch's records pass through a file in a folder of the build's own, which is gone when
    the build ends, and when a worker fails: its error reaches the caller; a spool that cannot be
    written to changes nothing but the way."""
    config, path = big
    made = []
    real_mkdtemp = tempfile.mkdtemp
    monkeypatch.setattr(tempfile, "mkdtemp", lambda **kw: made.append(real_mkdtemp(**kw)) or made[-1])
    handed = []
    real_handed = build._handed
    monkeypatch.setattr(build, "_handed", lambda spool, number: handed.append(number) or real_handed(spool, number))
    first = _built(config, path, monkeypatch, pool=True)
    assert len(made) == 1 and not os.path.exists(made[0]) and handed == list(range(6))
    # a spool that takes nothing (a full /dev/shm): the records come through the pool's pipe instead
    monkeypatch.setattr(tempfile, "mkdtemp", lambda **kw: made.append("/dev/null/spool") or made[-1])
    handed.clear()
    again = _built(config, path, monkeypatch, pool=True)
    assert len(handed) == 6 and all(isinstance(answer, list) for answer in handed)
    assert first[0] == again[0] and first[1] == again[1] and first[3] == again[3]
    # no spool at all (no temporary folder can be made): the pipe again, and gc back as it was

    def no_folder(**kw):
        raise PermissionError("no temporary folder")

    monkeypatch.setattr(tempfile, "mkdtemp", no_folder)
    handed.clear()
    assert gc.isenabled()
    without = _built(config, path, monkeypatch, pool=True)
    assert len(handed) == 6 and all(isinstance(answer, list) for answer in handed) and gc.isenabled()
    assert first[0] == without[0] and first[1] == without[1] and first[3] == without[3]
    monkeypatch.setattr(tempfile, "mkdtemp", lambda **kw: made.append(real_mkdtemp(**kw)) or made[-1])
    real_records = build._records
    last = f"learnings/{sorted((path / 'learnings').iterdir())[-1].name}"

    def failing(store, embedder, stamps, paths, *rest):  # in a worker (forked with this patch)
        if last in paths:
            raise ValueError("a worker failed")
        return real_records(store, embedder, stamps, paths, *rest)

    monkeypatch.setattr(build, "_records", failing)
    cache.discard(path)
    freshness.LIVE.clear()
    with pytest.raises(ValueError, match="a worker failed"):
        reindex("big", config=config)
    assert len(made) == 3 and not os.path.exists(made[2])
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_the_spool_holds_a_few_batches_and_a_killed_build_s_spool_is_cleared_by_the_next(big, monkeypatch):
    """The workers run at most SPOOL_AHEAD batches ahead of the parent (the spool stays small
    however slow the parent is), with the same index; a spool whose build died (its process is
    gone) is removed by the next build, one of a live process (or of no whetstone build) is not."""
    config, path = big
    first = _built(config, path, monkeypatch, pool=True)
    monkeypatch.setattr(build, "SPOOL_AHEAD", 2)
    waiting = []
    real_handed = build._handed

    def slow(spool, answer):  # a slow parent: the workers would fill the spool with every batch
        time.sleep(0.3)
        waiting.append(len(os.listdir(spool)))
        return real_handed(spool, answer)

    monkeypatch.setattr(build, "_handed", slow)
    folder = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = os.path.join(folder, f"{build.SPOOL_PREFIX}{int(gone.stdout)}-killed")
    kept = [os.path.join(folder, f"{build.SPOOL_PREFIX}{pid}-alive") for pid in (os.getppid(), os.getpid())]
    kept.append(os.path.join(folder, f"{build.SPOOL_PREFIX}notapid"))
    kept.append(os.path.join(folder, f"{build.SPOOL_PREFIX}{int(gone.stdout)}-elsewhere"))  # written just now
    for name in (dead, *kept):
        os.makedirs(name)
        open(os.path.join(name, "0"), "wb").close()
    old = time.time() - build.SPOOL_STALE - 60
    os.utime(dead, (old, old))
    try:
        slowly = _built(config, path, monkeypatch, pool=True)
        assert not os.path.exists(dead) and all(os.path.exists(name) for name in kept)
    finally:
        for name in (dead, *kept):
            shutil.rmtree(name, ignore_errors=True)
    assert len(waiting) == 6 and max(waiting) <= 2
    assert first[0] == slowly[0] and first[1] == slowly[1] and first[3] == slowly[3]


@pytest.mark.parametrize("pool", [False, True])
def test_a_build_reports_its_progress(big, monkeypatch, pool):
    config, path = big
    calls = []
    _built(config, path, monkeypatch, pool, progress=lambda done, total: calls.append((done, total)))
    assert calls and {total for _, total in calls} == {600}
    counts = [done for done, _ in calls]
    assert counts == sorted(set(counts)) and counts[-1] == 600 and len(counts) > 2
    calls.clear()
    recall_op.recall("big", INTENTS[0], config=config, progress=lambda *a: calls.append(a))
    assert calls == []  # nothing to build: nothing said


def _cli(*args: str, terminal: bool) -> str:
    """The real CLI in a new process, with the bar's threshold under the store's 600 files, its
    stderr a pseudo-terminal or a pipe: what it wrote there."""
    import pty
    code = ("import sys; from git_whetstone import cli; cli.INDEX_PROGRESS_MIN = 100; "
            "sys.argv = ['git-whetstone', *sys.argv[1:]]; cli.main()")
    command = [sys.executable, "-c", code, *args]
    env = dict(os.environ, TERM="dumb", PYTHONPATH=str(REPO))
    if not terminal:
        proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr
    parent, child = pty.openpty()
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=child, env=env,
                            close_fds=True)
    os.close(child)
    said = b""
    while True:
        try:
            chunk = os.read(parent, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        said += chunk
    proc.wait(timeout=300)
    os.close(parent)
    assert proc.returncode == 0, said
    return said.decode("utf-8", "replace")


def test_the_cli_draws_the_bar_on_a_terminal_only(big):
    shown = _cli("reindex", "big", terminal=True)
    assert "indexing scope files" in shown and "100%" in shown, shown[-300:]
    freshness.LIVE.clear()
    cache.discard(big[1])
    shown = _cli("recall", "big", INTENTS[0], terminal=True)  # a first recall builds the index
    assert "indexing scope files" in shown and "100%" in shown, shown[-300:]
    assert "indexing" not in _cli("reindex", "big", terminal=False)
    assert "indexing" not in _cli("recall", "big", INTENTS[1], terminal=True)  # the index is there: no bar


def test_a_vector_is_stored_once_and_kept_when_its_text_goes(big, monkeypatch):
    config, path = big
    reindex("big", config=config)
    db = sqlite3.connect(path / "index.sqlite")
    assert db.execute("SELECT count(*) FROM vectors").fetchone() == (0,)  # all in the files' records
    target = sorted((path / "issues").iterdir())[3]
    before = target.read_text(encoding="utf-8")
    first = before.split("\n\n", 2)[1]  # the first block's body
    target.write_text(before.replace(first, first + " Reworded by hand.", 1), encoding="utf-8")
    git(path, "-c", "core.hooksPath=/dev/null", "commit", "-q", "-m", "reword", "--", str(target))  # no hook:
    # the refresh below is the one to watch
    embedded = []
    real = cache.embed_all
    monkeypatch.setattr(cache, "embed_all", lambda texts, embedder, progress=None:
                        embedded.append(list(texts)) or real(texts, embedder, progress))
    recall_op.recall("big", INTENTS[0], config=config)
    assert embedded == [[first + " Reworded by hand."]]  # the file's other texts came from its record
    assert db.execute("SELECT count(*) FROM vectors").fetchone() == (1,)  # the old body's vector, kept
    git(path, "-c", "core.hooksPath=/dev/null", "revert", "--no-edit", "HEAD")
    embedded.clear()
    recall_op.recall("big", INTENTS[0], config=config)
    assert embedded == []  # back to the old text: its vector was kept
    db.close()


def test_entries_read_in_one_pass_are_what_the_blocks_say(big):
    """`entries_of` reads each block's fields in one pass, and `read_file` takes a file as whetstone
    writes it without its blocks (`clean_blocks`, `clean_entries`); the blocks' own properties are
    the reference, for every file but the broken one (served from its last committed version)."""
    from git_whetstone.format.blocks import parse
    from git_whetstone.index.reading import read_file
    from git_whetstone.index.records import Entry, entries_of
    from git_whetstone.store.store import Store

    config, path = big
    store = Store.open(config, "big")
    checked = 0
    for rel in sorted(str(p.relative_to(path)) for p in (*path.glob("learnings/*.md"), *path.glob("issues/*.md"))):
        parsed = parse((path / rel).read_text(encoding="utf-8"), rel, rel.split("/")[0])
        expected = [Entry(b.id, b.kind, rel, b.line, b.title, b.scope, b.body,
                          b.recurrence if b.kind == "learning" else 0, b.get("first_seen"), b.get("last_seen"),
                          tuple(b.provenance), b.always) for b in parsed.blocks]
        assert entries_of(parsed.blocks, rel) == expected, rel
        if not parsed.errors:
            assert read_file(store, rel) == (expected, None), rel
        checked += len(expected)
    assert checked > 5_000


def test_a_batch_of_records_is_what_each_file_makes_alone(big):
    """The workers make a batch's records at once (`cache.file_records`); one file's rows and record
    (`file_rows`, `file_record`), which one process makes, are the reference, byte for byte. Besides
    the store's files: files whose entries name several scopes, in and out of order, a scope spelled
    two ways, the same scope in two files, one entry alone, and no entries at all."""
    from git_whetstone.format.blocks import parse
    from git_whetstone.index.records import entries_of, file_rows
    from git_whetstone.semantics.embed import get_embedder

    config, path = big
    embedder = get_embedder(config.embedding_backend)
    files = []
    for rel in sorted(str(p.relative_to(path)) for p in (*path.glob("learnings/*.md"), *path.glob("issues/*.md"))):
        parsed = parse((path / rel).read_text(encoding="utf-8"), rel, rel.split("/")[0])
        if not parsed.errors:
            files.append((rel, f"stamp {rel}", entries_of(parsed.blocks, rel)))
    assert len(files) > 500
    mixed = [e for _, _, entries in files[:40] for e in entries]
    names = ["Tables", "charts and  axes", "TABLES", "charts and axes", "tables "]
    mixed = [e._replace(scope=" ".join(names[(i * 7) % 5].split())) for i, e in enumerate(mixed)]
    files += [("learnings/mixed.md", "s1", mixed[:150]), ("learnings/also.md", "s2", mixed[150:390]),
              ("issues/one.md", "s3", mixed[390:391]), ("learnings/none.md", "s4", [])]
    texts = list(dict.fromkeys([e.body for _, _, entries in files for e in entries]
                               + [e.scope for _, _, entries in files for e in entries]))
    matrix = embedder.embed(texts)
    vectors = dict(zip(texts, matrix))
    expected = [cache.file_record(rel, file_rows(stamp, entries, None, vectors, embedder.dim), embedder)
                for rel, stamp, entries in files]
    assert cache.file_records(files, texts, matrix, embedder) == expected
    assert {record[5] for record in expected[-4:]} == {2, 1, 0}  # two scopes a file, one, none
