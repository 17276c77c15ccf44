"""Building the index from scratch: a build tells a progress callback how it goes, and the CLI draws
that on a terminal only; each vector is stored once, and kept when its text goes; a duplicate id and
a broken file are left out, each with a warning; a new process loads what the build saved (vectors
and words alike).

The store is the benchmark's kind (6,000 entries in 600 scope files, by git fast-import), with a
file broken by hand (served from its last committed version, with a warning) and an id written twice.
"""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from git_whetstone.index import cache, freshness, rows
from git_whetstone.ops import recall as recall_op
from git_whetstone.ops.sync.hooks import reindex
from git_whetstone.semantics import embed
from git_whetstone.semantics.lexical import postings, query_terms
from tests.helpers import REPO, bench_store, bm25_scores, git

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
    return config, path


def _answers(config) -> list[dict]:
    return [{k: v for k, v in recall_op.recall("big", intent, config=config).items() if k != "run_id"}
            for intent in INTENTS]


def test_a_new_process_loads_what_the_build_saved(big, monkeypatch):
    config, path = big
    reindex("big", config=config)
    built = _answers(config)
    assert any("duplicate id" in w for w in built[0]["warnings"])
    assert any("serving the last committed version" in w for w in built[0]["warnings"])
    words = query_terms("currency alignment, totals row and a title")
    scores = bm25_scores(next(iter(freshness.LIVE.values())).lexicon(), words)
    for snap in list(freshness.LIVE.values()):  # as a new process: nothing in memory, the index on disk
        freshness.close(snap)
    freshness.LIVE.clear()

    read = []  # files whose rules' words are read from the markdown, not loaded from index.sqlite
    monkeypatch.setattr(rows, "postings", lambda texts: read.append(texts) or postings(texts))
    assert _answers(config) == built
    snap = next(iter(freshness.LIVE.values()))
    np.testing.assert_allclose(bm25_scores(snap.lexicon(), words), scores, rtol=1e-6)
    assert len(read) == 1  # the broken file alone, served again from the last commit
    assert snap.count == 6_000 and snap.vectors.dtype == np.float32 and snap.vectors.shape[0] == snap.size


def test_a_build_reports_its_progress(big):
    config, _ = big
    calls = []
    reindex("big", config=config, progress=lambda done, total: calls.append((done, total)))
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
    code = ("import sys; from git_whetstone.cli import main, render; render.INDEX_PROGRESS_MIN = 100; "
            "sys.argv = ['git-whetstone', *sys.argv[1:]]; main.main()")
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
    real = embed.StaticEmbedder.embed
    monkeypatch.setattr(embed.StaticEmbedder, "embed", lambda self, texts: embedded.append(list(texts)) or real(self, texts))
    for snap in list(freshness.LIVE.values()):  # a new process: the old text's vector comes from index.sqlite
        freshness.close(snap)
    freshness.LIVE.clear()
    recall_op.recall("big", INTENTS[0], config=config)
    assert [t for texts in embedded for t in texts if "Reworded" in t or t == first] == [first + " Reworded by hand."]
    assert db.execute("SELECT count(*) FROM vectors").fetchone() == (1,)  # the old body's vector, kept
    git(path, "-c", "core.hooksPath=/dev/null", "revert", "--no-edit", "HEAD")
    embedded.clear()
    recall_op.recall("big", INTENTS[0], config=config)  # the long-lived snapshot, back to the old text
    assert [t for texts in embedded for t in texts if t == first] == []  # its vector was kept
    db.close()
