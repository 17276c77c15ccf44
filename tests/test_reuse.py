"""A refresh's build takes the vectors the records it replaces or removes held (`build.Reuse`)
instead of embedding those texts again: a compact merges a scope's files into one, and most texts
of the files it rewrites were held by the files it removes. Proved on a real compact of a
benchmark store, its refresh read by the workers as at 100,000 entries: the `files` the index
holds after it are byte for byte those of a build from scratch (every text embedded afresh), and
`vectors` gained exactly the old records' texts that no new record holds (not, as before, also
those a removed file held and another file holds now).
"""
from __future__ import annotations

import json
import sqlite3

from git_whetstone.index import build, freshness
from git_whetstone.index.records import decode, text_hash
from git_whetstone.ops import compact as compact_op
from git_whetstone.ops.workspace import Workspace
from tests.helpers import bench_store, respell


def tables(path) -> tuple[dict[str, tuple], dict[tuple[str, str], bytes]]:
    db = sqlite3.connect(path / "index.sqlite")
    try:
        files = {row[0]: row for row in db.execute("SELECT * FROM files")}
        vectors = {(backend, h): vec for backend, h, vec in db.execute("SELECT * FROM vectors")}
    finally:
        db.close()
    return files, vectors


def texts_and_vectors(record: tuple) -> list[tuple[str, bytes]]:
    """(text, vector bytes) of every body and scope phrase a record holds, from its decoded entries."""
    _, _, _, _, n, s, raw, scope_json, _, blob = record
    width = len(blob) // (n + 2 * s)
    out = [(e.body, blob[i * width:(i + 1) * width]) for i, e in enumerate(decode(raw))]
    out += [(scope[2], blob[(n + s + j) * width:(n + s + j + 1) * width]) for j, scope in enumerate(json.loads(scope_json))]
    return out


def test_a_compacts_refresh_takes_the_old_vectors_and_keeps_only_the_texts_gone(store_root, monkeypatch):
    _, config, built = bench_store(monkeypatch, "reuse", 3_000, 13)
    respell(built.path, 150)  # scopes spelled two ways: compact merges them, emptying files
    compact_op.compact("reuse", dry_run=True, config=config)  # the index built, nothing written
    freshness.LIVE.clear()
    files_before, vectors_before = tables(built.path)

    pool_from = build.POOL_FROM
    monkeypatch.setattr(build, "POOL_FROM", 10)  # the refresh read by forked workers, as at 100,000 entries
    made: list[build.Reuse] = []
    real_init = build.Reuse.__init__

    def recording(self, *args):
        real_init(self, *args)
        made.append(self)

    monkeypatch.setattr(build.Reuse, "__init__", recording)
    assert compact_op.compact("reuse", config=config)["committed"]
    freshness.LIVE.clear()
    files_after, vectors_after = tables(built.path)
    reuse = made[-1]
    taken = int(reuse.taken[:len(reuse.table)].sum())
    assert taken > 1_000 and taken < len(reuse.row)  # most texts taken by the workers, some gone for good

    # `vectors`: what it held, and the texts of the records replaced or removed no new record holds
    replaced = [path for path, record in files_before.items() if files_after.get(path) != record]
    assert len(replaced) > 100 and any(path not in files_after for path in replaced)
    held = {text for path in replaced if path in files_after for text, _ in texts_and_vectors(files_after[path])}
    expected = dict(vectors_before)
    for path in replaced:
        record = files_before[path]
        for text, vec in texts_and_vectors(record):
            if text not in held:
                expected.setdefault((record[3], text_hash(text)), vec)
    assert len(expected) > len(vectors_before) + 100
    assert vectors_after == expected

    # `files`: those of a build from scratch, every text embedded again in one process
    monkeypatch.setattr(build, "POOL_FROM", pool_from)
    ws = Workspace.of(config)
    store = ws.store("reuse")
    freshness.forget(store)
    ws.snapshot(store)
    freshness.LIVE.clear()
    scratch, _ = tables(built.path)
    assert files_after == scratch


def test_a_compacts_reuse_takes_the_texts_compact_decoded_and_holds_what_the_records_give(store_root, monkeypatch):
    """Compact hands the refresh the entries it decoded of the files it rewrote (`Written.read`):
    the records those files had are not decompressed again to take their vectors, and the
    `Reuse` made so holds the very texts, rows and vectors one made from the records alone."""
    from git_whetstone.index import cache

    _, config, _ = bench_store(monkeypatch, "reuse", 3_000, 29)
    compact_op.compact("reuse", dry_run=True, config=config)
    monkeypatch.setattr(build, "POOL_FROM", 10)
    decoded: list[int] = []
    real_texts_of = cache.texts_of

    def counting(raw):
        decoded.append(1)
        return real_texts_of(raw)

    monkeypatch.setattr(cache, "texts_of", counting)
    compared: list[tuple[int, int]] = []
    real_init = build.Reuse.__init__

    def checked(self, db, embedder, paths, known=None):
        decoded.clear()
        real_init(self, db, embedder, paths, known)
        served = len(paths) - len(decoded)  # records whose texts came from `known`
        row, table = cache.held_vectors(db, embedder, paths)  # the reference: every record decoded
        assert self.row == row
        assert self.table.tobytes() == table.tobytes()
        compared.append((served, len(paths)))

    monkeypatch.setattr(build.Reuse, "__init__", checked)
    assert compact_op.compact("reuse", config=config)["committed"]
    served, paths = compared[-1]
    assert paths > 100 and served > paths // 2
