"""Retiring the records a save replaces (index/cache.py `_retire`): the vectors of the texts a
record held and its new version no longer holds move to the `vectors` table. The fast path reads
only the records' texts; this proves it leaves index.sqlite exactly as the earlier path did (kept
here as the reference: every old record decoded into `Entry`s, each text hashed on its own),
on the saves of a real compact of a benchmark store, which removes files (every text retired),
rewrites others (only the texts gone retired) and leaves some unchanged (nothing retired).
"""
from __future__ import annotations

import json
import shutil
import sqlite3

from git_whetstone.index import cache, freshness
from git_whetstone.index.records import decode, text_hash
from git_whetstone.ops import compact as compact_op
from git_whetstone.semantics.embed import get_embedder
from tests.helpers import bench_store, respell


def reference_retire(db: sqlite3.Connection, identity: str, replaced: dict[str, bytes | None],
                     seen: dict[str, int]) -> None:
    """`_retire` as it was before it read texts only (counting in `seen` what each case met)."""
    if not replaced or db.execute("SELECT 1 FROM files LIMIT 1").fetchone() is None:
        return
    paths = list(replaced)
    kept: list[tuple[str, str, bytes]] = []
    for i in range(0, len(paths), 500):
        chunk = paths[i:i + 500]
        for path, backend, raw, scope_json, n, blob in db.execute(
                f"SELECT path, backend, entries, scopes, n, vectors FROM files WHERE path IN ({','.join('?' * len(chunk))})",
                chunk):
            new = replaced[path]
            if backend == identity and new == raw:
                seen["unchanged"] += 1
                continue
            still = set() if backend != identity or new is None else \
                {text for e in decode(new) for text in (e.body, e.scope)}
            entries, scopes = decode(raw), json.loads(scope_json)
            width = len(blob) // (n + 2 * len(scopes)) if n + len(scopes) else 0
            old = [(e.body, blob[i * width:(i + 1) * width]) for i, e in enumerate(entries)]
            old += [(scope[2], blob[(n + len(scopes) + j) * width:(n + len(scopes) + j + 1) * width])
                    for j, scope in enumerate(scopes)]
            here = [(backend, text_hash(text), vec) for text, vec in old if text not in still]
            seen["removed" if new is None else "partly kept" if len(here) < len(old) else "all gone"] += 1
            kept += here
    db.executemany("INSERT OR IGNORE INTO vectors VALUES(?,?,?)", kept)


def dump(path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return list(db.iterdump())
    finally:
        db.close()


def test_retiring_texts_only_leaves_the_index_the_reference_leaves(store_root, monkeypatch, tmp_path) -> None:
    _, config, built = bench_store(monkeypatch, "retire", 3_000, 11)
    respell(built.path, 150)  # scopes spelled two ways: compact merges them, emptying files
    compact_op.compact("retire", dry_run=True, config=config)  # the index built, nothing written
    before = tmp_path / "before"
    before.mkdir()
    freshness.LIVE.clear()  # the connection closed: index.sqlite is whole, its WAL checkpointed
    for part in built.path.glob("index.sqlite*"):
        if part.name != "index.sqlite-snapshot":
            shutil.copy2(part, before / part.name)
    saves: list[tuple[list[str], list[tuple]]] = []
    real_save = cache.save

    def recording(db, embedder, removed, records, kept=None):
        saves.append((list(removed), list(records)))
        return real_save(db, embedder, removed, records, kept)

    monkeypatch.setattr(cache, "save", recording)
    applied = compact_op.compact("retire", config=config)
    assert applied["committed"] and saves
    freshness.LIVE.clear()
    # the compact's refresh retires what its build did not take itself (test_reuse.py): here its
    # saves are made again, every record retired by `_retire`, on a copy of the index before it
    again = tmp_path / "again"
    shutil.copytree(before, again)
    db = cache.connect(again)
    for removed, records in saves:
        assert real_save(db, get_embedder(config.embedding_backend), removed, records)
    db.close()
    # and the cases a compact does not meet: a record saved again unchanged, one whose every text
    # is gone, and one of another backend replaced
    db = sqlite3.connect(built.path / "index.sqlite")
    rows = db.execute("SELECT * FROM files ORDER BY path").fetchall()
    db.close()
    saves.append(([], [rows[0], (rows[1][0], *rows[2][1:]), (*rows[3][:3], "other:backend", *rows[3][4:])]))
    saves.append(([], [rows[3]]))
    db = cache.connect(again)
    for removed, records in saves[-2:]:
        assert real_save(db, get_embedder(config.embedding_backend), removed, records)
    db.close()
    fast = dump(again / "index.sqlite")

    # the same saves on the same index, retired the reference's way
    monkeypatch.setattr(cache, "save", real_save)
    seen = {"unchanged": 0, "removed": 0, "partly kept": 0, "all gone": 0}
    monkeypatch.setattr(cache, "_retire", lambda db, identity, replaced, own=True: reference_retire(db, identity, replaced, seen))
    db = cache.connect(before)
    embedder = get_embedder(config.embedding_backend)
    for removed, records in saves:
        assert cache.save(db, embedder, removed, records)
    db.close()
    assert all(seen.values()), seen  # every case met, on a store big enough to meet them often
    reference = dump(before / "index.sqlite")
    retired = [line for line in reference if line.startswith('INSERT INTO "vectors"')]
    assert len(retired) > 300
    assert fast == reference
