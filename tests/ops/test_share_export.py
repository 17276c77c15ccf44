"""Export against the way a pack is built from scratch: every scope file parsed from its markdown,
each block rendered by `edits.render`, appended with `edits.append`, and the archive written by
`tarfile`. The same store must give the same bytes, whatever state its files and its index are in,
and a pack written another way (the previous exporter's chunked gzip, another tar format, member
order or compression level) must import the same."""
from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import io
import re
import struct
import tarfile
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from git_whetstone.format import blocks, edits
from git_whetstone.format.layout import KIND_FOLDER, scope_filename, scope_key
from git_whetstone.index import freshness
from git_whetstone.store.reading import read_file
from git_whetstone.ops.sharing import packs
from git_whetstone.ops.writing.capture import capture
from git_whetstone.ops.sharing.packs import Item, id_order, read_pack, render_manifest, store_items
from git_whetstone.ops.recall import recall
from git_whetstone.ops.sharing.exchange import export, import_pack
from git_whetstone.ops.workspace import Workspace
from git_whetstone.ops.looking.browse import show
from tests.helpers import bench_store, git, run_cli, tree_state

DAY = dt.date(2026, 7, 1)
GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no flags (no name), time 0, OS unknown


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
    return edits.render(item.id or "", item.title, fields, item.body)


def reference_tar_of(skill: str, items: list[Item], day: dt.date) -> bytes:
    """The archive inside a pack of `items`, built as it was: a block at a time, and `tarfile`."""
    return reference_tar(reference_members(skill, items, day))


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
            text = edits.append(text, block)
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


def test_export_is_the_pack_from_scratch_whatever_state_the_store_is_in(monkeypatch, tmp_path: Path) -> None:
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
    want = reference_tar_of("big", want_items, DAY)
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
        data = out.read_bytes()
        assert data[:10] == GZIP_HEADER and gzip.decompress(data) == want, state
        assert data == packs.build_pack("big", want_items, DAY), state  # the same bytes every time
        assert result["warnings"] == want_warnings and result["learnings"] + result["issues"] == len(want_items)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="a\r\n \t#", min_size=1, max_size=12), min_size=1, max_size=6))
def test_blocks_joined_at_once_as_appended_one_by_one(texts: list[str]) -> None:
    """A pack's scope file is its blocks put together by `edits.append_all`, as appended one by one."""
    texts = [t for t in texts if t.strip()] or ["a\n"]
    want = ""
    for text in texts:
        want = edits.append(want, text)
    assert edits.append_all("", texts) == want


@given(st.text(max_size=40))
def test_provenance_is_encoded_as_blocks_encodes_it(value: str) -> None:
    item = Item("L1", "learning", "s", "Body.", "Body.", 1, "2026-01-01", "2026-01-01", (value,))
    assert packs.canonical(item) == reference_canonical(item)


# --- what export reports, and scope files laid out by hand -----------------------------------------

def from_scratch(config, skill: str) -> tuple[bytes, list[str], int, int, int]:
    """The archive inside the pack, and the report, as the store's markdown gives them, nothing indexed."""
    store = Workspace.of(config).store(skill)
    items, warnings = reference_items(store)
    scopes = len({scope_key(i.scope) for i in items})
    learnings = sum(i.kind == "learning" for i in items)
    return reference_tar_of(skill, items, DAY), warnings, learnings, len(items) - learnings, scopes


def exported(config, skill: str, out: Path) -> None:
    """An export in a new process (nothing in memory), written to `out`, is the pack from scratch,
    and says so."""
    freshness.LIVE.clear()
    got = export(skill, str(out), config=config)  # bench_store pins today to DAY
    data = out.read_bytes()
    tar, warnings, learnings, issues, scopes = from_scratch(config, skill)
    assert data[:10] == GZIP_HEADER and gzip.decompress(data) == tar
    assert (got["warnings"], got["learnings"], got["issues"], got["scopes"]) == (warnings, learnings, issues, scopes)
    assert (got["bytes"], got["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())


def test_two_exports_give_the_same_bytes_and_the_same_report(monkeypatch, tmp_path: Path) -> None:
    _, config, built = bench_store(monkeypatch, "json", 400, 9)
    first, again = tmp_path / "a.tar.gz", tmp_path / "b.tar.gz"
    cold = export("json", str(first), config=config)
    warm = export("json", str(again), config=config)
    assert first.read_bytes() == again.read_bytes()
    assert {**cold, "path": None} == {**warm, "path": None}
    assert list(cold) == list(warm)
    exported(config, "json", tmp_path / "c.tar.gz")


def test_scope_files_laid_out_by_hand_export_in_canonical_form(monkeypatch, tmp_path: Path) -> None:
    """A pack has one file per scope, its blocks in id order: two files of one scope, ids out of
    order in a file, two scopes in a file are sorted out on the way."""
    _, config, built = bench_store(monkeypatch, "whole", 800, 10)
    path = built.path
    learnings = sorted((path / "learnings").glob("*.md"))
    exported(config, "whole", tmp_path / "whole.tar.gz")
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
        exported(config, "whole", tmp_path / "whole.tar.gz")
        extra.unlink()


# --- what older versions left behind, and packs written another way --------------------------------

def test_a_stale_export_cache_left_in_git_is_ignored(monkeypatch, tmp_path: Path) -> None:
    """Older versions kept what the last export used in `.git/whetstone-export.cache` (and, while
    writing it, `.git/.whetstone-export.cache.<pid>.tmp`). Export neither reads nor writes them now:
    whatever they hold, the pack is the store's, and they are left as they are."""
    _, config, built = bench_store(monkeypatch, "stale", 400, 8)
    clean = tmp_path / "clean.tar.gz"
    export("stale", str(clean), config=config)
    git_dir = built.path / ".git"
    stale = {
        git_dir / "whetstone-export.cache": b"whetstone-export-cache 1 0123456789abcdef " + b"0" * 64
        + b"\n28\n{\"files\":{},\"chunks\":[]}xx" + bytes(range(256)),
        git_dir / ".whetstone-export.cache.4242.tmp": b"whetstone-export-cache 1 torn",
    }
    for path, data in stale.items():
        path.write_bytes(data)
    for state in ("beside a stale cache", "after a capture"):
        if state == "after a capture":
            capture("stale", "learning", "Spell out every acronym on first use in the footnotes.", "footnotes",
                    "a review", confirm="new", config=config)
        out = tmp_path / "stale.tar.gz"
        export("stale", str(out), config=config)
        if state == "beside a stale cache":
            assert out.read_bytes() == clean.read_bytes()
        exported(config, "stale", tmp_path / "exported.tar.gz")
        assert {path: path.read_bytes() for path in stale} == stale, state
    (git_dir / "whetstone-export.cache").unlink()
    (git_dir / "whetstone-export.cache").mkdir()  # not even a file
    exported(config, "stale", tmp_path / "exported.tar.gz")


ANCHOR = re.compile(rb"\n(?:## [LI]\d*00 |[LI]\d*000 = )")  # where the previous exporter's chunks ended


def previous_gzip(raw: bytes) -> bytes:
    """A pack's gzip as whetstone wrote it before issue 40: one deflate stream of chunks cut before
    entry anchors (a heading or manifest line whose id ends in 00 or 000; at most 1 MiB apart),
    each compressed at level 6 on its own with the 32 KiB before it as its dictionary and ended by
    a sync flush, then an empty last block."""
    cuts, last = [], 0
    for at in [found.start() + 1 for found in ANCHOR.finditer(raw)] + [len(raw)]:
        while at - last > 1 << 20:
            last += 1 << 20
            cuts.append(last)
        if at > last:
            cuts.append(at)
            last = at
    out, start = [GZIP_HEADER], 0
    for end in cuts:
        squeezer = (zlib.compressobj(6, zlib.DEFLATED, -15, 8, zlib.Z_DEFAULT_STRATEGY, raw[max(0, start - 32768):start])
                    if start else zlib.compressobj(6, zlib.DEFLATED, -15))
        out.append(squeezer.compress(raw[start:end]) + squeezer.flush(zlib.Z_SYNC_FLUSH))
        start = end
    return b"".join(out) + b"\x03\x00" + struct.pack("<II", zlib.crc32(raw), len(raw) & 0xFFFFFFFF)


def retarred(members: list[tuple[tarfile.TarInfo, bytes]], fmt: int, stamped: bool) -> bytes:
    """The members as another tar writes them: in `fmt`, with owners and times when `stamped`."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=fmt) as tar:
        for info, data in members:
            copy = tarfile.TarInfo(info.name)
            copy.size = len(data)
            if stamped:
                copy.mtime, copy.mode, copy.uid, copy.gid, copy.uname, copy.gname = 1_780_000_000, 0o600, 1000, 1000, "ana", "staff"
            tar.addfile(copy, io.BytesIO(data))
    return raw.getvalue()


def test_a_pack_written_another_way_imports_the_same(monkeypatch, tmp_path: Path) -> None:
    """Import reads what the archive holds, not how it was written: the previous exporter's chunked
    gzip, gzip at another level with a name and a time, gnu or pax tar, members in another order,
    owners and times all give the same pack; importing it after the first changes nothing."""
    _, config, built = bench_store(monkeypatch, "src", 400, 4)
    ours = tmp_path / "ours.tar.gz"
    export("src", str(ours), config=config)
    data = ours.read_bytes()
    want = read_pack(data, "ours.tar.gz")
    raw = gzip.decompress(data)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = [(info, tar.extractfile(info).read()) for info in tar.getmembers()]
    named = io.BytesIO()
    with gzip.GzipFile(filename="src.tar", mode="wb", compresslevel=1, fileobj=named, mtime=1_780_000_000) as handle:
        handle.write(raw)
    variants = {
        "previous.tar.gz": previous_gzip(raw),
        "named.tar.gz": named.getvalue(),
        "gnu-reversed.tar.gz": gzip.compress(retarred(members[::-1], tarfile.GNU_FORMAT, False), 9),
        "pax-manifest-last.tar.gz": gzip.compress(retarred(members[1:] + members[:1], tarfile.PAX_FORMAT, True), 3),
    }
    assert len(ANCHOR.findall(raw)) > 2 and zlib.decompress(variants["previous.tar.gz"], 31) == raw  # many chunks
    for name, variant in variants.items():
        assert variant != data, name
        assert read_pack(variant, name) == want, name
    first = tmp_path / "previous.tar.gz"
    first.write_bytes(variants.pop("previous.tar.gz"))
    result = import_pack("copy", str(first), config=config)
    assert result["status"] == "committed" and result["counts"]["committed"] == 400
    copy = Workspace.of(config).store("copy").path
    before = tree_state(copy)
    for name, variant in {"ours.tar.gz": data, **variants}.items():
        (tmp_path / name).write_bytes(variant)
        again = import_pack("copy", str(tmp_path / name), config=config)
        assert again["status"] == "unchanged" and again["counts"]["noop"] == 400, name
        assert tree_state(copy) == before, name


@pytest.mark.parametrize("fmt, name", [("cursor-rule", ".cursor/rules/tables.mdc"), ("agents-md", "AGENTS.md"),
                                       ("claude-md", "docs/CLAUDE.md")])
def test_a_rule_for_every_task_keeps_its_mark_through_a_rule_file(store_root: Path, tmp_path: Path, fmt: str,
                                                                  name: str) -> None:
    """export to AGENTS.md / CLAUDE.md / a Cursor rule and import back: `applies: always` survives,
    and the README's own `-o .cursor/rules/tables.mdc` works where the folder does not exist yet."""
    for args in (["Write PostgreSQL, not MySQL.", "--scope", "dialect", "--issue", "--always"],
                 ["Answer in British English.", "--scope", "spelling", "--always"],
                 ["Never round table corners.", "--scope", "corners", "--issue"],
                 ["Band alternate rows in light grey.", "--scope", "row banding"]):
        assert run_cli("capture", "sql-tables", *args).returncode == 0
    work = tmp_path / "project"
    work.mkdir()
    proc = run_cli("export", "sql-tables", "--format", fmt, "-o", name, cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert (work / name).is_file()
    proc = run_cli("import", "copy", str(work / name), "--from", fmt, "--json")
    assert proc.returncode == 0, proc.stderr
    copied = show("copy")
    marked = {e["rule"]: e["always"] for e in copied["learnings"] + copied["issues"]}
    assert marked == {"Write PostgreSQL, not MySQL.": True, "Answer in British English.": True,
                      "Never round table corners.": False, "Band alternate rows in light grey.": False}
    assert {e["rule"] for e in copied["issues"]} == {"Write PostgreSQL, not MySQL.", "Never round table corners."}
