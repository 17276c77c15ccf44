"""Export's fast path against the way a pack was built before (issue 20): every scope file parsed
from its markdown, each block rendered by `blocks.render`, appended with `blocks.append`, and the
archive written by `tarfile`. The same store must give the same bytes, whatever state its files
and its index are in."""
from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import io
import os
import subprocess
import sys
import struct
import tarfile
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from git_whetstone.format import blocks
from git_whetstone.format.layout import KIND_FOLDER, scope_filename, scope_key
from git_whetstone.index import freshness
from git_whetstone.index.reading import read_file
from git_whetstone.ops import packcache, packs
from git_whetstone.ops.capture import capture
from git_whetstone.ops.packcache import export_pack
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
    """build_pack as it was: a block at a time, and tarfile's own archive, compressed by `deflate`
    with nothing cached (`test_deflate_*` hold `deflate` to gzip)."""
    return packs.deflate(reference_tar(reference_members(skill, items, day)))[0]


def reference_members(skill: str, items: list[Item], day: dt.date) -> list[tuple[str, bytes]]:
    """The archive's members as they were built: each block rendered and appended one by one."""
    files: dict[str, list[str]] = {}
    rows = []
    for item in sorted(items, key=id_order):
        text = reference_canonical(item)
        files.setdefault(f"{KIND_FOLDER[item.kind]}/{scope_filename(item.scope)}", []).append(text)
        rows.append((item.id, item.kind, item.scope, hashlib.sha256(text.encode("utf-8")).hexdigest()))
    members = [("pack.toml", render_manifest(skill, rows, day).encode("utf-8"))]
    for rel in sorted(files):
        text = ""
        for block in files[rel]:
            text = blocks.append(text, block)
        members.append((rel, text.encode("utf-8")))
    return members


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


# --- the cache in .git (issue 20: an export reads only what changed since the last one) ---------

DAY = dt.date(2026, 7, 1)


def from_scratch(config, skill: str) -> tuple[bytes, list[str], int, int, int]:
    """The pack and its report as the store's markdown gives them, nothing cached or indexed."""
    store = Workspace.of(config).store(skill)
    items, warnings = reference_items(store)
    scopes = len({scope_key(i.scope) for i in items})
    learnings = sum(i.kind == "learning" for i in items)
    return reference_pack(skill, items, DAY), warnings, learnings, len(items) - learnings, scopes


def cached(config, skill: str, fresh: int | None = None) -> None:
    """An export through the cache (a new process's: nothing in memory) is the pack from scratch,
    and read `fresh` scope files again."""
    freshness.LIVE.clear()
    store = Workspace.of(config).store(skill)
    got = export_pack(store, skill, DAY)
    data, warnings, learnings, issues, scopes = from_scratch(config, skill)
    assert got.data == data
    assert (got.warnings, got.learnings, got.issues, got.scopes) == (warnings, learnings, issues, scopes)
    if fresh is not None:
        assert got.fresh == fresh


def test_the_cache_gives_the_pack_from_scratch_after_every_kind_of_change(monkeypatch, tmp_path: Path) -> None:
    _, config, built = bench_store(monkeypatch, "kept", 1_500, 6)
    path = built.path
    learnings = sorted((path / "learnings").glob("*.md"))
    recall("kept", "format the invoice exports", config=config)  # index.sqlite, as a store has one
    cached(config, "kept", fresh=len(learnings) + len(list((path / "issues").glob("*.md"))))
    cached(config, "kept", fresh=0)
    # a capture (committed) into an existing scope
    scope = blocks.parse(learnings[5].read_text(encoding="utf-8"), "x", "learnings").blocks[0].scope
    done = capture("kept", "learning", "Spell out every acronym on first use in the footnotes.", scope,
                   "a review", confirm="new", config=config)
    assert done["status"] == "committed", done
    cached(config, "kept", fresh=1)
    # a hand edit, then undone: the file's old content is found again
    edited = learnings[9]
    before = edited.read_bytes()
    edited.write_text(edited.read_text(encoding="utf-8").replace("- recurrence: ", "- recurrence: 1", 1),
                      encoding="utf-8")
    cached(config, "kept", fresh=1)
    git(path, "checkout", "--", str(edited))
    assert edited.read_bytes() == before
    cached(config, "kept", fresh=0)
    # a file deleted, a scope file renamed, files that are not scope files: nothing to read again
    learnings[20].unlink()
    cached(config, "kept", fresh=0)
    for name in (".hidden.md", "notes.txt", "notes.MD"):
        (path / "learnings" / name).write_bytes(learnings[22].read_bytes())
    cached(config, "kept", fresh=0)
    for name in (".hidden.md", "notes.txt", "notes.MD"):
        (path / "learnings" / name).unlink()
    git(path, "mv", str(learnings[21].relative_to(path)), "learnings/zz-renamed.md")
    cached(config, "kept", fresh=0)
    # CRLF (not as whetstone writes it: parsed from its bytes, then kept), then a file that fails
    # validation (served from its last commit with a warning: read every time, never kept)
    crlf = learnings[30]
    crlf.write_bytes(crlf.read_bytes().replace(b"\n", b"\r\n"))
    cached(config, "kept", fresh=1)
    cached(config, "kept", fresh=0)
    broken = learnings[31]
    broken.write_text(broken.read_text(encoding="utf-8").replace("- scope:", "- scope is:", 1), encoding="utf-8")
    cached(config, "kept", fresh=1)
    cached(config, "kept", fresh=1)
    # an id claimed twice, in a file whose name sorts first
    twin_id = blocks.parse(learnings[40].read_text(encoding="utf-8"), "x", "learnings").blocks[0].id
    (path / "learnings" / "aaa-twin.md").write_text(
        f"## {twin_id} · Twin.\n- recurrence: 1\n- first_seen: 2026-01-02\n- last_seen: 2026-01-02\n"
        "- scope: twin\n\nTwin.\n", encoding="utf-8")
    cached(config, "kept", fresh=2)
    (path / "learnings" / "aaa-twin.md").unlink()
    git(path, "checkout", "--", str(broken))
    git(path, "add", "-A")
    git(path, "commit", "-qm", "hand edits")
    cached(config, "kept")
    # a branch with other content, and back; then a reset
    git(path, "checkout", "-q", "-b", "other")
    for f in learnings[50:52]:
        f.write_text(f.read_text(encoding="utf-8").replace("\n\n", "\n\nReworded. ", 1), encoding="utf-8")
    git(path, "commit", "-qam", "reworded")
    cached(config, "kept", fresh=2)
    git(path, "checkout", "-q", "main")
    cached(config, "kept", fresh=0)
    git(path, "reset", "-q", "--hard", "HEAD~1")
    cached(config, "kept")
    cached(config, "kept", fresh=0)


def test_a_corrupt_foreign_or_unwritable_cache_is_never_a_wrong_pack(monkeypatch, tmp_path: Path) -> None:
    _, config, built = bench_store(monkeypatch, "torn", 600, 8)
    cache_file = built.path / ".git" / packcache.FILE
    files = len(list(built.path.glob("*/*.md")))
    cached(config, "torn", fresh=files)
    good = cache_file.read_bytes()
    head, _, body = good.partition(b"\n")
    magic, code, digest = head.rsplit(b" ", 2)
    # a body that still checks out, written by other code: a foreign cache
    foreign = head.replace(code, b"0" * len(code)) + b"\n" + body
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x55
    for bad in (bytes(flipped), good[:len(good) // 2], b"", b"\x00" * 1000, b"not a cache\n", foreign,
                magic + b" " + code + b" " + hashlib.sha256(b"x").hexdigest().encode() + b"\nx"):
        cache_file.write_bytes(bad)
        cached(config, "torn", fresh=files)  # ignored: every file read again
        assert cache_file.read_bytes() == good  # and written again
        cached(config, "torn", fresh=0)
    # a cache that cannot be written (a directory in its place; a read-only .git for a user that is
    # not root): every export reads everything, and gives the same pack
    cache_file.unlink()
    cache_file.mkdir()
    (built.path / ".git").chmod(0o555)
    try:
        cached(config, "torn", fresh=files)
        cached(config, "torn", fresh=files)
        out = tmp_path / "torn.tar.gz"
        result = export("torn", str(out), config=config)
        assert out.read_bytes() == from_scratch(config, "torn")[0] and not result["warnings"]
    finally:
        (built.path / ".git").chmod(0o755)
    assert not list((built.path / ".git").glob(".whetstone-export*"))  # no temporary left behind
    # what an export killed while writing left is swept by the next one; a running writer's file stays
    cache_file.rmdir()
    dead, alive = (built.path / ".git" / f".{packcache.FILE}.{pid}.tmp" for pid in (_dead_pid(), os.getppid()))
    dead.write_bytes(good[:100])
    alive.write_bytes(good[:100])
    cached(config, "torn", fresh=files)
    assert not dead.exists() and alive.exists() and cache_file.read_bytes() == good


def _dead_pid() -> int:
    """A pid no process has: a child's, once reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_report_of_a_cached_export_is_the_uncached_one(monkeypatch, tmp_path: Path) -> None:
    _, config, built = bench_store(monkeypatch, "json", 400, 9)
    first, again = tmp_path / "a.tar.gz", tmp_path / "b.tar.gz"
    cold = export("json", str(first), config=config)
    warm = export("json", str(again), config=config)
    assert first.read_bytes() == again.read_bytes()
    assert {**cold, "path": None} == {**warm, "path": None}
    assert list(cold) == list(warm)


def test_a_pack_of_whole_files_is_the_pack_row_by_row(monkeypatch, tmp_path: Path) -> None:
    """A store as whetstone keeps it is packed a file at a time (`_whole_files`); a file that is
    not one pack file as it stands (two files of one scope, ids out of order, two scopes) sends
    the export row by row. Both give the pack from scratch."""
    _, config, built = bench_store(monkeypatch, "whole", 800, 10)
    path = built.path
    learnings = sorted((path / "learnings").glob("*.md"))
    whole, real = [], packcache._whole_files
    monkeypatch.setattr(packcache, "_whole_files", lambda *a: whole.append(real(*a)) or whole[-1])
    cached(config, "whole")
    assert whole[-1] is not None  # the bench's store: a file at a time
    ids = sorted(int(b.id[1:]) for f in learnings for b in blocks.parse(f.read_text(encoding="utf-8"), "x", "learnings").blocks)
    first = blocks.parse(learnings[0].read_text(encoding="utf-8"), "x", "learnings").blocks[0]

    def block(entry_id: str, scope: str, body: str = "Hand made.") -> str:
        return (f"## {entry_id} · {body}\n- recurrence: 1\n- first_seen: 2026-01-02\n- last_seen: 2026-01-02\n"
                f"- scope: {scope}\n\n{body}\n")

    cases = {  # each a hand-made file beside the store's; its id a new one, below the file's own
        "a second file of a scope": block(f"L{ids[-1] + 5}", first.scope),
        "ids out of order": block(f"L{ids[-1] + 9}", "order") + "\n" + block(f"L{ids[-1] + 7}", "order"),
        "two scopes in a file": block(f"L{ids[-1] + 11}", "one of two") + "\n" + block(f"L{ids[-1] + 12}", "two of two"),
    }
    for case, text in cases.items():
        extra = path / "learnings" / "aaa-hand.md"
        extra.write_text(text, encoding="utf-8")
        cached(config, "whole")
        assert whole[-1] is None, case
        extra.unlink()
    # the same hand-made files, each alone in its pack file and in id order: a file at a time again
    (path / "learnings" / "aaa-hand.md").write_text(block(f"L{ids[-1] + 7}", "order") + "\n"
                                                     + block(f"L{ids[-1] + 9}", "order"), encoding="utf-8")
    cached(config, "whole")
    assert whole[-1] is not None


anchored = st.lists(st.sampled_from([b"\n## L100 \xc2\xb7 x\n", b"\nL3000 = \"h\"\n", b"\n## I7700 \xc2\xb7 y",
                                     b"plain words ", b"\x00" * 512, bytes(range(256))]), max_size=60)


@settings(max_examples=60, deadline=None)
@given(anchored, anchored, st.integers(0, 4))
def test_deflate_is_gzip_and_a_warm_cache_changes_no_byte(head: list[bytes], tail: list[bytes], repeat: int) -> None:
    raw = b"".join(head) * repeat + b"".join(tail) * 150  # long enough for many chunks and full windows
    data, used = packs.deflate(raw)
    assert gzip.decompress(data) == raw
    assert packs.deflate(raw, used) == (data, used)
    edited = b"".join(head) + b"edit" + raw[len(b"".join(head)):]
    want = packs.deflate(edited)
    assert packs.deflate(edited, used) == want  # the chunks of an older text, reused where they fit
    assert gzip.decompress(want[0]) == edited


def test_deflate_reuses_chunks_across_an_edit_and_reads_as_gzip(tmp_path: Path) -> None:
    raw = b"".join(b"\n## L%d \xc2\xb7 rule %d\n- scope: s\n\nSome words about rule %d.\n" % (i, i, i * 7919)
                   for i in range(1, 30_000))
    data, used = packs.deflate(raw)
    assert len(used) > 100 and gzip.decompress(data) == raw
    edited = raw.replace(b"rule 15000\n", b"rule 15000, edited\n")
    again, reused = packs.deflate(edited, used)
    assert again == packs.deflate(edited)[0] and gzip.decompress(again) == edited
    # the chunk edited and those whose 32 KiB window holds the edit (chunks here are ~5 KB: 100 blocks)
    assert 1 <= len(set(reused) - set(used)) <= 2 + 32768 // 4000 < len(used) // 10
    with gzip.open(io.BytesIO(again)) as handle:  # gzip's own reader, as import's zlib reads it
        assert handle.read() == edited


def reference_deflate(raw: bytes) -> bytes:
    """`deflate` as it was: every chunk compressed in turn, in this thread."""
    out, start = [packs._GZIP_HEADER], 0
    for end in packs._cuts(raw):
        window = raw[max(0, start - packs._WINDOW):start]
        squeezer = (zlib.compressobj(packs.COMPRESS_LEVEL, zlib.DEFLATED, -15, 8, zlib.Z_DEFAULT_STRATEGY, window)
                    if start else zlib.compressobj(packs.COMPRESS_LEVEL, zlib.DEFLATED, -15))
        out.append(squeezer.compress(raw[start:end]) + squeezer.flush(zlib.Z_SYNC_FLUSH))
        start = end
    return b"".join(out) + b"\x03\x00" + struct.pack("<II", zlib.crc32(raw), len(raw) & 0xFFFFFFFF)


def test_deflate_on_every_core_is_deflate_in_turn(monkeypatch) -> None:
    raw = b"".join(b"\n## L%d \xc2\xb7 rule %d\n- scope: s%d\n\nSome words about rule %d.\n" % (i, i, i % 7, i * 7919)
                   for i in range(1, 40_000))
    data, used = packs.deflate(raw)
    assert len(used) > 4 * packs._PARALLEL_FROM  # threads, many batches
    assert data == reference_deflate(raw)
    edited = raw.replace(b"rule 20000\n", b"rule 20000, edited\n")
    partial = dict(list(used.items())[::3])  # some chunks known, the rest compressed by the threads
    assert packs.deflate(edited, partial)[0] == reference_deflate(edited)
    monkeypatch.setattr(packs.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    assert packs.deflate(raw)[0] == data  # one core: in turn


def test_a_file_is_read_whole_whatever_its_size_says(monkeypatch, tmp_path: Path) -> None:
    path = tmp_path / "f.md"
    for data in (b"", b"x", b"\n" * 70_000, bytes(range(256)) * 1000):
        path.write_bytes(data)
        assert packcache._read(str(path)) == data
    real = os.fstat  # a size that no longer holds: grown or shrunk since it was taken
    for wrong in (0, 5, 10**6):
        monkeypatch.setattr(packcache.os, "fstat", lambda fd: os.stat_result((0,) * 6 + (wrong,) + (0,) * 3))
        assert packcache._read(str(path)) == path.read_bytes()
    monkeypatch.setattr(packcache.os, "fstat", real)
    with pytest.raises(FileNotFoundError):
        packcache._read(str(tmp_path / "gone.md"))
