"""compact on a big store (the benchmark's kind): copies of rules merged, scopes spelled two ways
merged (the files left empty deleted), decayed learnings retired, in one commit that validates and
that a second compact finds nothing to add to; the index after it is the one a build from scratch
makes; a journal that lets a killed compact be completed or undone; a commit a hook refuses puts
every file back; a big compact says how long it will take and counts its progress.
"""
from __future__ import annotations

import json
import sqlite3

import pytest

from git_whetstone.format import blocks, edits
from git_whetstone.index import freshness
from git_whetstone.ops.upkeep import compact as compact_op
from git_whetstone.ops.workspace import Workspace
from tests.helpers import bench_store, git, respell, run_cli


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
        copy = edits.render(f"L9{n:04d}", block.title, fields, block.body)
        file.write_text(edits.append(text, copy) if n % 2 else copy + "\n" + text)
    git(path, "commit", "-qam", "hand: copies")


def scope_bytes(path) -> dict:
    return {p: p.read_bytes() for folder in ("learnings", "issues") for p in (path / folder).glob("*.md")}


def files_table(path) -> dict[str, tuple]:
    db = sqlite3.connect(path / "index.sqlite")
    try:
        return {row[0]: row[:5] for row in db.execute("SELECT * FROM files")}  # (vectors may differ in last bits)
    finally:
        db.close()


def test_a_compact_merges_copies_and_spellings_retires_and_deletes_emptied_files(store_root, monkeypatch):
    _, config, built = bench_store(monkeypatch, "big", 3_000, 6)
    path = built.path
    with_copies(path)
    respell(path, 40)
    files_before = set(scope_bytes(path))
    out = compact_op.compact("big", config=config)
    assert out["committed"]
    merged = [c for c in out["changes"] if c.startswith("merge L9")]
    spellings = [c for c in out["changes"] if c.startswith("merge scope")]
    retired = [c for c in out["changes"] if c.startswith("retire")]
    assert len(merged) >= 20 and len(spellings) == 40 and len(retired) > 100
    assert git(path, "log", "-1", "--format=%s").stdout.strip() == f"compact: {len(out['changes'])} changes"
    assert run_cli("validate", "big").returncode == 0
    gone = files_before - set(scope_bytes(path))
    assert len(gone) >= 40  # the files of the second spellings, emptied
    text = "".join(p.read_text() for p in (path / "learnings").glob("*.md"))
    assert "## L90000 " not in text and "compact merged L90000" in text
    again = compact_op.compact("big", config=config)
    assert not again["committed"] and again["changes"] == []
    # the index the compact left is the one a build from scratch makes
    after = files_table(path)
    freshness.forget(Workspace.of(config).store("big"))
    Workspace.of(config).snapshot(Workspace.of(config).store("big"))
    assert files_table(path) == after


@pytest.mark.parametrize("git_refuses", [True, False])
def test_a_compacts_journal_names_head_blobs_and_recovery_restores_or_completes_from_them(
        store_root, monkeypatch, git_refuses):
    """A compact's journal holds the scope files it rewrites as HEAD holds them by their blob's id
    (not their text): a writer killed after its files and before its commit is still completed, or
    undone to exactly the bytes that were there when git refuses the commit."""
    from git_whetstone.base.errors import WhetstoneError
    from git_whetstone.store import journal

    _, config, built = bench_store(monkeypatch, "journal", 1_000, 6)
    path = built.path
    respell(path, 20)
    scope_files = scope_bytes(path)
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


def test_a_compact_whose_commit_a_hook_refuses_puts_its_files_back(store_root, monkeypatch):
    """A commit refused (a pre-commit hook says no): the compact fails with one line, every file
    is put back, HEAD and git's index are as before, and the next read's snapshot names HEAD."""
    from git_whetstone.base.errors import WhetstoneError

    _, config, built = bench_store(monkeypatch, "refused", 1_000, 31)
    with_copies(built.path)
    path = built.path
    hook = path / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\necho 'not today' >&2\nexit 1\n")
    hook.chmod(0o755)
    files, head = scope_bytes(path), git(path, "rev-parse", "HEAD").stdout
    with pytest.raises(WhetstoneError, match="not today"):
        compact_op.compact("refused", config=config)
    assert scope_bytes(path) == files and git(path, "rev-parse", "HEAD").stdout == head
    assert git(path, "status", "--porcelain", "--untracked-files=no").stdout == ""
    assert not (path / ".git" / "whetstone-journal.json").exists()
    ws = Workspace.of(config)
    assert ws.snapshot(ws.store("refused")).stamps["@HEAD"] == head.strip()


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
