"""Export's fast path against the way a pack was built before (issue 20): every scope file parsed
from its markdown, each block rendered by `blocks.render`, appended with `blocks.append`, and the
archive written by `tarfile`. The same store must give the same bytes, whatever state its files
and its index are in."""
from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import io
import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from git_whetstone.format import blocks
from git_whetstone.format.layout import KIND_FOLDER, scope_filename
from git_whetstone.index import freshness
from git_whetstone.index.reading import read_file
from git_whetstone.ops import packs
from git_whetstone.ops.capture import capture
from git_whetstone.ops.packs import Item, id_order, joined, render_manifest, store_items, tar_bytes
from git_whetstone.ops.recall import recall
from git_whetstone.ops.share import export
from git_whetstone.ops.workspace import Workspace
from tests.helpers import bench_store, git


def reference_items(store) -> tuple[list[Item], list[str]]:
    """`store_items` from scratch: every scope file parsed from its markdown (its last committed
    version when it fails validation), no index consulted."""
    items, warnings, seen = [], [], {}
    for kind in ("learning", "issue"):
        for path in store.scope_files(kind):
            rel = store.rel(path)
            entries, warning = read_file(store, rel)
            if warning:
                warnings.append(warning)
            for e in entries:
                where = f"{rel}:{e.line}"
                if e.id in seen:
                    warnings.append(f"{where}: duplicate id {e.id} (also at {seen[e.id]}); this copy is not exported")
                    continue
                seen[e.id] = where
                items.append(Item(e.id, e.kind, e.scope, e.body, e.title, e.recurrence or 1, e.first_seen,
                                  e.last_seen, tuple(e.provenance), where, e.always))
    return sorted(items, key=id_order), warnings


def reference_canonical(item: Item) -> str:
    fields: list[tuple[str, str]] = []
    if item.kind == "learning":
        fields += [("recurrence", str(item.recurrence)), ("first_seen", item.first_seen or ""),
                   ("last_seen", item.last_seen or "")]
    fields.append(("scope", item.scope))
    if item.always:
        fields.append(("applies", blocks.ALWAYS))
    fields += [("provenance", blocks.encode_value(p)) for p in item.provenance]
    return blocks.render(item.id or "", item.title, fields, item.body)


def reference_pack(skill: str, items: list[Item], day: dt.date) -> bytes:
    """build_pack as it was: a block at a time, and tarfile's own archive."""
    files: dict[str, list[str]] = {}
    hashes: dict[str, str] = {}
    for item in sorted(items, key=id_order):
        text = reference_canonical(item)
        files.setdefault(f"{KIND_FOLDER[item.kind]}/{scope_filename(item.scope)}", []).append(text)
        hashes[item.id] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    manifest = render_manifest(skill, sorted(items, key=id_order), day, hashes)
    members = [("pack.toml", manifest.encode("utf-8"))]
    for rel in sorted(files):
        text = ""
        for block in files[rel]:
            text = blocks.append(text, block)
        members.append((rel, text.encode("utf-8")))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=packs.COMPRESS_LEVEL, mtime=0) as gz:
        gz.write(reference_tar(members))
    return out.getvalue()


def reference_tar(members: list[tuple[str, bytes]]) -> bytes:
    """tarfile's own ustar archive of `members` (ValueError for a name ustar cannot hold)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.type = tarfile.REGTYPE
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


def test_export_gives_the_bytes_the_old_path_gave(monkeypatch, tmp_path: Path) -> None:
    _, config, built = bench_store(monkeypatch, "big", 3_000, 5)
    path = built.path
    capture("big", "issue", 'Always quote the source "as given" in C:\\reports\\ footers.', "table footers",
            provenance='said "so" on\ta call', always=True, config=config)
    recall("big", "format the invoice exports", config=config)  # the index and this process's snapshot
    learnings = sorted((path / "learnings").glob("*.md"))
    issues = sorted((path / "issues").glob("*.md"))
    # edited by hand since the index read it (not committed): a block added, with a field escaped
    edited = learnings[3]
    edited.write_text(edited.read_text(encoding="utf-8") + "\n## L900001 · Hand written.\n- recurrence: 2\n"
                      "- first_seen: 2026-01-02\n- last_seen: 2026-02-03\n- scope: hand made\n"
                      '- provenance: "2026-01-02 — a \\"quoted\\" note"\n\nHand written, with a tab\there.\n',
                      encoding="utf-8")
    # CRLF line endings, committed
    crlf = learnings[7]
    crlf.write_bytes(crlf.read_bytes().replace(b"\n", b"\r\n"))
    git(path, "commit", "-qam", "crlf")
    # a parse warning: the file now fails validation, its committed version is exported
    broken = issues[2]
    broken.write_text(broken.read_text(encoding="utf-8").replace("- scope:", "- scope is:", 1), encoding="utf-8")
    # a rule for every task written by hand, and an id claimed twice
    marked = learnings[11]
    text = marked.read_text(encoding="utf-8")
    marked.write_text(text.replace("\n- scope:", "\n- applies: always\n- scope:", 1), encoding="utf-8")
    twin = learnings[12]
    first_id = blocks.parse(learnings[13].read_text(encoding="utf-8"), "x", "learnings").blocks[0].id
    twin.write_text(twin.read_text(encoding="utf-8") + f"\n## {first_id} · Twin.\n- recurrence: 1\n"
                    "- first_seen: 2026-01-02\n- last_seen: 2026-01-02\n- scope: twin\n\nTwin.\n", encoding="utf-8")
    store = Workspace.of(config).store("big")
    want_items, want_warnings = reference_items(store)
    day = dt.date(2026, 7, 1)
    want = reference_pack("big", want_items, day)
    assert any(i.always for i in want_items) and any(i.kind == "issue" for i in want_items)
    assert any("serving the last committed version" in w for w in want_warnings)
    assert any("duplicate id" in w for w in want_warnings)
    assert any(i.id == "L900001" for i in want_items)

    for state in ("snapshot in memory", "index.sqlite only", "the same process again", "no index"):
        if state == "index.sqlite only":
            freshness.LIVE.clear()
        if state == "no index":
            freshness.LIVE.clear()
            for p in path.glob("index.sqlite*"):
                p.unlink()
        items, warnings = store_items(store)
        assert (items, warnings) == (want_items, want_warnings), state
        out = tmp_path / "big.tar.gz"
        result = export("big", str(out), config=config)
        assert out.read_bytes() == want, state
        assert result["warnings"] == want_warnings and result["learnings"] + result["issues"] == len(want_items)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="a\r\n \t#", min_size=1, max_size=12), min_size=1, max_size=6))
def test_blocks_joined_at_once_as_appended_one_by_one(texts: list[str]) -> None:
    texts = [t for t in texts if t.strip()] or ["a\n"]
    want = ""
    for text in texts:
        want = blocks.append(want, text)
    assert joined(texts) == want


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(alphabet="ab/._-é", min_size=1, max_size=130), st.binary(max_size=1100)),
                max_size=5))
def test_tar_bytes_are_what_tarfile_writes(members: list[tuple[str, bytes]]) -> None:
    try:
        want = reference_tar(members)
    except ValueError:  # a name ustar cannot hold: tarfile refuses it, and so must we
        with pytest.raises(ValueError):
            tar_bytes(members)
        return
    assert tar_bytes(members) == want


@given(st.text(max_size=40))
def test_provenance_is_encoded_as_blocks_encodes_it(value: str) -> None:
    item = Item("L1", "learning", "s", "Body.", "Body.", 1, "2026-01-01", "2026-01-01", (value,))
    assert packs.canonical(item) == reference_canonical(item)
