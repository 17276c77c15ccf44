"""Preference packs (SPEC §4 export/import): a store's entries as one `.tar.gz` file.

A **pack** is a `.tar.gz` of `learnings/`, `issues/` and a `pack.toml` manifest (skill, version,
date, counts, scopes and the sha256 of every entry's canonical text). Entries are written in a
canonical form (one file per scope, blocks in id order, rendered by `blocks.render`), and the
archive is built with fixed metadata (mtime 0, uid/gid 0, no owner names, mode 0644, sorted
members, gzip without a name or time, compressed in chunks `packcache` can keep), so the same
store always exports the same bytes. Events, the index and git history stay behind.

A pack is **untrusted input**. It is read whole into memory with hard limits (64 MiB expanded,
1 MiB per member, checked from the headers and again while reading), never extracted to disk,
and refused as a whole (nothing written) on the first thing that is not a plain, valid entry file:
absolute or `..` paths, links, devices, anything outside `learnings/`, `issues/` and `pack.toml`,
markdown that fails validation, a manifest that does not match the entries.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import io
import os
import re
import struct
import tarfile
import tomllib
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .. import __version__
from ..base.errors import WhetstoneError, shown
from ..format import blocks, markdown
from ..format.ids import is_entry_id
from ..format.layout import KIND_FOLDER, scope_filename, scope_key, skill_name
from ..index.freshness import read_files
from ..index.records import Entry
from ..store.store import Store
from .inputs import clean_body, clean_scope

PACK_FORMAT = 1
MAX_MEMBER = 1 << 20           # one file in a pack
MAX_EXPANDED = 64 << 20        # a whole pack, uncompressed (and the compressed file too)
COMPRESS_LEVEL = 6             # import reads any level; see `deflate`
MAX_RECURRENCE = 1_000_000     # more is no taste, it is an attack on the index's integers

_MEMBER_FILE = re.compile(r"(learnings|issues)/[^./\\\x00-\x1f\x7f][^/\\\x00-\x1f\x7f]*\.md")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_JSON_SPECIAL = re.compile(r'["\\\x00-\x1f]')  # what json.dumps escapes (ensure_ascii off)
_TOML_SPECIAL = re.compile(r'[\x00-\x1f\x7f"\\]')
_ANCHOR = re.compile(rb"\n(?:## [LI]\d*00 |[LI]\d*000 = )")  # where `deflate` may end a chunk
_WINDOW = 32768                # deflate's window: a chunk's dictionary
_MAX_CHUNK = 1 << 20
_PARALLEL_FROM = 64            # chunks to compress (~8 KB each) before threads pay
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # no name, time 0, no flags, OS unknown
_TOML_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


Row = tuple[str, str, str, str, bytes, bool]  # id, kind, scope, sha256 of the text, the text, plain


@dataclass(frozen=True)
class Item:
    """One entry as a pack or a rule file carries it. `id` is its id in the source (None for a
    rule file); `where` says where it was read (`learnings/x.md:12`, `AGENTS.md:7`)."""

    id: str | None
    kind: str
    scope: str
    body: str
    title: str
    recurrence: int = 1
    first_seen: str | None = None
    last_seen: str | None = None
    provenance: tuple[str, ...] = ()
    where: str = ""
    always: bool = False  # `- applies: always`: a rule for every task
    differs: tuple[str, ...] = ()  # `- differs_from:`: ids (in the source) of entries that hold beside it

    @property
    def label(self) -> str:
        return self.id or self.where


def rule_hash(kind: str, scope: str, body: str) -> str:
    """What makes two entries the same rule whatever their ids, dates and spacing: kind, scope
    (as scopes compare) and body (white space folded)."""
    text = f"{kind}\x1f{scope_key(scope)}\x1f{' '.join(body.split())}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def marker(source: str, item: Item) -> str:
    return f"import:{source}:{rule_hash(item.kind, item.scope, item.body)}"



def store_items(store: Store) -> tuple[list[Item], list[str]]:
    """Every entry of a store as an Item, learnings then issues, each in id order. A file that
    fails validation contributes its last committed version (with a warning), as recall does;
    an id claimed twice keeps its first copy."""
    items: list[Item] = []
    warnings: list[str] = []
    seen: dict[str, str] = {}
    files = {kind: [f"{KIND_FOLDER[kind]}/{name}" for name in store.scope_names(kind)]
             for kind in ("learning", "issue")}
    read = read_files(store, files["learning"] + files["issue"])
    for kind in ("learning", "issue"):
        for rel in files[kind]:
            entries, warning = read[rel]
            if warning:
                warnings.append(warning)
            for e in entries:
                where = f"{rel}:{e.line}"
                if e.id in seen:
                    warnings.append(duplicate_warning(where, e.id, seen[e.id]))
                    continue
                seen[e.id] = where
                items.append(item_of(e, where))
    return sorted(items, key=id_order), warnings


def item_of(e: Entry, where: str) -> Item:
    """A stored entry as a pack carries it."""
    return Item(e.id, e.kind, e.scope, e.body, e.title, e.recurrence or 1, e.first_seen, e.last_seen,
                tuple(e.provenance), where, e.always, e.differs)


def entry_text(e: Entry) -> str:
    """`canonical(item_of(e, where))`, without making the Item (an export of 100,000 entries)."""
    return block_text(e.id, e.kind, e.title, e.recurrence or 1, e.first_seen, e.last_seen, e.scope, e.always,
                      e.provenance, e.body, e.differs)


def duplicate_warning(where: str, entry_id: str, first: str) -> str:
    return f"{where}: duplicate id {entry_id} (also at {first}); this copy is not exported"


def id_order(item: Item) -> tuple[int, int]:
    return (0 if item.kind == "learning" else 1, int(item.id[1:]) if item.id else 0)


def canonical(item: Item) -> str:
    """The block text an entry is exported as, and whose sha256 the manifest holds: what
    `blocks.render` gives for its fields, written out here since a big export renders 100,000."""
    return block_text(item.id, item.kind, item.title, item.recurrence, item.first_seen, item.last_seen,
                      item.scope, item.always, item.provenance, item.body, item.differs)


def block_text(entry_id: str | None, kind: str, title: str, recurrence: int, first_seen: str | None,
               last_seen: str | None, scope: str, always: bool, provenance: Iterable[str], body: str,
               differs: tuple[str, ...] = ()) -> str:
    """`canonical` from the fields themselves, for a caller that has them without an Item (making
    100,000 Items is a quarter of rendering them)."""
    lines = [f"## {entry_id or ''} {blocks.DOT} {title}"]
    if kind == "learning":
        lines += [f"- recurrence: {recurrence}", f"- first_seen: {first_seen or ''}", f"- last_seen: {last_seen or ''}"]
    lines.append(f"- scope: {scope}")
    if always:
        lines.append(f"- applies: {blocks.ALWAYS}")
    if differs:
        lines.append(f"- differs_from: {blocks.IDS_SEPARATOR.join(differs)}")
    lines += [f"- provenance: {_encoded(p)}" for p in provenance]
    return "\n".join(lines) + "\n\n" + body + "\n"


def _encoded(value: str) -> str:
    """`blocks.encode_value`, without json for the common value that needs no escape."""
    return blocks.encode_value(value) if _JSON_SPECIAL.search(value) else '"' + value + '"'


def build_pack(skill: str, items: list[Item], day: dt.date) -> bytes:
    """The pack's bytes: the same items on the same day always give the same bytes."""
    rows = []
    for item in sorted(items, key=id_order):
        text = canonical(item)
        raw = text.encode("utf-8")
        rows.append((item.id, item.kind, item.scope, hashlib.sha256(raw).hexdigest(), raw, plain(text)))
    return assemble(skill, day, rows)[0]


def assemble(skill: str, day: dt.date, rows: list[Row],
             chunks: dict[bytes, bytes] | None = None) -> tuple[bytes, dict[bytes, bytes]]:
    """The pack of `rows` (in id order): the manifest, one member per scope with its blocks in id
    order, the archive, and its gzip (`deflate`, reusing what `chunks` holds). Also gives the
    compressed chunks it used, for the next export."""
    files: dict[str, list[Row]] = {}
    names: dict[tuple[str, str], str] = {}
    for row in rows:
        rel = names.get((row[1], row[2]))
        if rel is None:
            rel = names[row[1], row[2]] = f"{KIND_FOLDER[row[1]]}/{scope_filename(row[2])}"
        files.setdefault(rel, []).append(row)
    members: dict[str, bytes] = {}
    for rel, group in files.items():
        if all(row[5] for row in group):
            members[rel] = b"\n".join([row[4] for row in group])
        else:
            members[rel] = joined([row[4].decode("utf-8") for row in group]).encode("utf-8")
    return archive(render_manifest(skill, rows, day), members, chunks)


def archive(manifest: str, members: dict[str, bytes],
            chunks: dict[bytes, bytes] | None = None) -> tuple[bytes, dict[bytes, bytes]]:
    """The pack of a manifest and the entry files by their names: the archive (pack.toml, then the
    files in name order) and its gzip (`deflate`, reusing what `chunks` holds)."""
    return deflate(tar_bytes([("pack.toml", manifest.encode("utf-8"))] + sorted(members.items())), chunks)


def plain(text: str) -> bool:
    """A block `joined` can put after another with a bare newline: it ends in one newline, has no
    CR and no blank line at its end."""
    if not text.endswith("\n") or "\r" in text or not text.strip():
        return False
    before = text.rfind("\n", 0, len(text) - 1)  # the line before the last newline: not blank
    return before < 0 or bool(text[before + 1:-1].strip(" \t"))


def deflate(raw: bytes, chunks: dict[bytes, bytes] | None = None) -> tuple[bytes, dict[bytes, bytes]]:
    """`raw` gzipped (level `COMPRESS_LEVEL`, no name, time 0) as one deflate stream made of
    chunks, each compressed on its own with the 32 KiB before it as its dictionary (as pigz does):
    a chunk's bytes depend only on its text and that window, so an export reuses the chunks of the
    last one (`chunks`, by a hash of level, window and text) and compresses only what changed.
    Chunks end at entry anchors (a block heading or manifest line whose id ends in 00 or 000), so
    an edit moves no other chunk's borders. The chunks to compress are compressed on every core
    (`_squeezed`). Gives the gzip and the chunks it used."""
    known = chunks or {}
    view = memoryview(raw)
    spans: list[tuple[bytes, int, int]] = []
    start = 0
    level = bytes([COMPRESS_LEVEL])
    for end in _cuts(raw):
        digest = hashlib.sha1(level)
        digest.update(view[max(0, start - _WINDOW):start])
        digest.update(view[start:end])
        spans.append((digest.digest(), start, end))
        start = end
    missing = {key: (start, end) for key, start, end in spans if key not in known}
    made = dict(zip(missing, _squeezed(view, list(missing.values()))))
    used = {key: known[key] if key in known else made[key] for key, _, _ in spans}
    out = [_GZIP_HEADER, *(used[key] for key, _, _ in spans)]
    out += [b"\x03\x00", struct.pack("<II", zlib.crc32(raw), len(raw) & 0xFFFFFFFF)]  # the last, empty block
    return b"".join(out), used


def _squeezed(view: memoryview, spans: list[tuple[int, int]]) -> list[bytes]:
    """The chunks at `spans` compressed, each with the window before it: on every core when there
    are many (a first export's 8 MB; zlib lets go of the GIL while it compresses)."""
    def squeeze(batch: list[tuple[int, int]]) -> list[bytes]:
        out = []
        for start, end in batch:
            squeezer = (zlib.compressobj(COMPRESS_LEVEL, zlib.DEFLATED, -15, 8, zlib.Z_DEFAULT_STRATEGY,
                                         bytes(view[max(0, start - _WINDOW):start]))
                        if start else zlib.compressobj(COMPRESS_LEVEL, zlib.DEFLATED, -15))
            out.append(squeezer.compress(view[start:end]) + squeezer.flush(zlib.Z_SYNC_FLUSH))
        return out

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if cores < 2 or len(spans) < _PARALLEL_FROM:
        return squeeze(spans)
    from concurrent.futures import ThreadPoolExecutor  # here: a small pack (and `import`) never loads threads
    size = -(-len(spans) // (4 * cores))  # a few batches a core, so that a slow one does not hold the rest
    with ThreadPoolExecutor(cores) as pool:
        return [data for done in pool.map(squeeze, [spans[at:at + size] for at in range(0, len(spans), size)])
                for data in done]


def _cuts(raw: bytes) -> list[int]:
    """Where the chunks of `raw` end: at each anchor, at most `_MAX_CHUNK` apart, and at its end."""
    cuts: list[int] = []
    last = 0
    for found in _ANCHOR.finditer(raw):
        at = found.start() + 1
        while at - last > _MAX_CHUNK:
            last += _MAX_CHUNK
            cuts.append(last)
        if at > last:
            cuts.append(at)
            last = at
    while len(raw) - last > _MAX_CHUNK:
        last += _MAX_CHUNK
        cuts.append(last)
    cuts.append(len(raw))
    return cuts


def joined(texts: list[str]) -> str:
    """The blocks one after another, as `blocks.append` adds them to an empty file: one blank line
    between two blocks. Joined at once when every block is plain (no CR, no blank line at its end),
    block by block otherwise."""
    if all(plain(text) for text in texts):
        return "\n".join(texts)
    out = ""
    for text in texts:
        out = blocks.append(out, text)
    return out


def tar_bytes(members: list[tuple[str, bytes]]) -> bytes:
    """A ustar archive of `members` with fixed metadata (mtime 0, uid/gid 0, no owner names, mode
    0644), byte for byte what `tarfile` writes for them. The header of a short ASCII name is built
    from one `tarfile` made (its name, size and checksum put in), since `tarfile` takes 40 µs a
    member; any other name gets `tarfile`'s own header."""
    template = _header("x", 0)
    middle, mtime, tail = template[100:124], template[124 + 12:148], template[156:]
    # the checksum sums the header's bytes, its own field taken as spaces: the fixed fields' once
    fixed = sum(middle) + sum(mtime) + sum(b"        ") + sum(tail)
    out: list[bytes] = []
    for name, data in members:
        if len(name) <= 100 and name.isascii():
            raw_name = name.encode("ascii")
            field = b"%011o\0" % len(data)
            checksum = b"%06o\0 " % (fixed + sum(raw_name) + sum(field))
            header = b"".join((raw_name, b"\0" * (100 - len(raw_name)), middle, field, mtime, checksum, tail))
        else:
            header = _header(name, len(data))
        out += [header, data]
        if len(data) % tarfile.BLOCKSIZE:
            out.append(b"\0" * (tarfile.BLOCKSIZE - len(data) % tarfile.BLOCKSIZE))
    out.append(b"\0" * (2 * tarfile.BLOCKSIZE))
    size = sum(map(len, out))
    if size % tarfile.RECORDSIZE:
        out.append(b"\0" * (tarfile.RECORDSIZE - size % tarfile.RECORDSIZE))
    return b"".join(out)


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info.tobuf(tarfile.USTAR_FORMAT, tarfile.ENCODING, "surrogateescape")


def render_manifest(skill: str, rows: list[Row], day: dt.date) -> str:
    """pack.toml, written by hand (tomllib only reads): keys, one array and the [entries] table
    (`rows` in id order)."""
    learnings = sum(row[1] == "learning" for row in rows)
    return manifest(skill, day, {row[2] for row in rows}, learnings, len(rows) - learnings,
                    [f'{row[0]} = "{row[3]}"' for row in rows])  # ids and hex digits: nothing to escape


def manifest(skill: str, day: dt.date, scopes: set[str], learnings: int, issues: int, entries: list[str]) -> str:
    """pack.toml from its parts: the scopes, the counts and the [entries] table's lines (in id order)."""
    listed = sorted(scopes, key=lambda s: (scope_key(s), s))
    lines = [
        "# A whetstone preference pack. learnings/ and issues/ hold the entries as markdown blocks;",
        "# [entries] holds the sha256 of each entry's canonical text, checked when the pack is imported.",
        f"format = {PACK_FORMAT}",
        f"skill = {toml_string(skill)}",
        f"whetstone_version = {toml_string(__version__)}",
        f"date = {day.isoformat()}",
        f"learnings = {learnings}",
        f"issues = {issues}",
    ]
    lines += ["scopes = [", *(f"    {toml_string(s)}," for s in listed), "]"] if listed else ["scopes = []"]
    lines += ["", "[entries]", *entries]
    return "\n".join(lines) + "\n"


def toml_string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped, the rest as is."""
    if not _TOML_SPECIAL.search(text):
        return '"' + text + '"'
    out = []
    for ch in text:
        if ch in _TOML_ESCAPES:
            out.append(_TOML_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'



@dataclass(frozen=True)
class Pack:
    """A pack that passed every check: its manifest and its entries in id order."""

    skill: str
    version: str
    date: str
    items: list[Item]


def read_pack(data: bytes, name: str) -> Pack:
    """Check and read a pack held in memory. Anything unexpected is a WhetstoneError naming the
    member (and line); the caller has written nothing yet."""

    def refuse(why: str) -> WhetstoneError:
        return WhetstoneError(f"{name}: refusing the pack: {why}")

    if len(data) > MAX_EXPANDED:
        raise refuse("the file is larger than 64 MiB")
    if data[:2] != b"\x1f\x8b":
        raise refuse("not a gzip file (a pack is a .tar.gz made by git whetstone export; "
                     "for AGENTS.md, CLAUDE.md or a Cursor rule use --from)")
    inflater = zlib.decompressobj(wbits=31)
    try:
        raw = inflater.decompress(data, MAX_EXPANDED + 1)
    except zlib.error as exc:
        raise refuse(f"corrupt gzip data ({exc})") from None
    if len(raw) > MAX_EXPANDED:
        raise refuse("it expands past 64 MiB")
    if not inflater.eof:
        raise refuse("the gzip data is truncated")
    if inflater.unused_data.strip(b"\0"):
        raise refuse("there is data after the end of the gzip stream")

    members: dict[str, bytes] = {}
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
            while True:
                member = tar.next()
                if member is None:
                    break
                path = _check_member(member, refuse)
                if path is None:
                    continue  # learnings/, issues/ or the top directory itself
                if member.size > MAX_MEMBER:
                    raise refuse(f"member {shown(member.name)} is larger than 1 MiB ({member.size} bytes)")
                total += member.size
                if total > MAX_EXPANDED:
                    raise refuse("its members add up to more than 64 MiB")
                if path in members:
                    raise refuse(f"member {shown(member.name)} appears twice")
                handle = tar.extractfile(member)
                content = handle.read(MAX_MEMBER + 1) if handle is not None else b""
                if len(content) > MAX_MEMBER:
                    raise refuse(f"member {shown(member.name)} is larger than 1 MiB")
                members[path] = content
    except WhetstoneError:
        raise
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise refuse(f"not a valid tar archive ({exc})") from None
    if "pack.toml" not in members:
        raise refuse("it has no pack.toml manifest")
    manifest = _manifest(members.pop("pack.toml"), refuse)
    items = _entries(members, manifest, refuse)
    return Pack(manifest["skill"], manifest["whetstone_version"], manifest["date"].isoformat(), items)


def _check_member(member: tarfile.TarInfo, refuse: Callable[[str], WhetstoneError]) -> str | None:
    """The member's path if it is an entry file or pack.toml, None for an allowed directory;
    a refusal for anything else."""
    name = member.name
    what = f"member {shown(name)}"
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        raise refuse(f"{what} has an absolute path")
    parts = re.split(r"[/\\]", name)
    if ".." in parts:
        raise refuse(f"{what} has '..' in its path")
    if member.issym() or member.islnk():
        raise refuse(f"{what} is a {'symbolic' if member.issym() else 'hard'} link")
    if member.ischr() or member.isblk() or member.isfifo():
        raise refuse(f"{what} is a device or a fifo")
    if member.issparse() or not (member.isreg() or member.isdir()):
        raise refuse(f"{what} is not a regular file or directory")
    path = "/".join(p for i, p in enumerate(parts) if p and not (p == "." and i == 0))
    if member.isdir():
        if path in ("", "learnings", "issues"):
            return None
        raise refuse(f"{what} is outside learnings/, issues/ and pack.toml")
    if path != "pack.toml" and not _MEMBER_FILE.fullmatch(path):
        raise refuse(f"{what} is outside learnings/*.md, issues/*.md and pack.toml")
    return path


def _manifest(data: bytes, refuse: Callable[[str], WhetstoneError]) -> dict[str, Any]:
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise refuse("pack.toml is not valid UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise refuse(f"pack.toml is not valid TOML ({exc})") from None

    def need(key: str, check: Callable[[Any], bool], what: str) -> Any:
        if key not in doc:
            raise refuse(f"pack.toml has no '{key}'")
        if not check(doc[key]):
            raise refuse(f"pack.toml: '{key}' must be {what}, got {shown(doc[key])}")
        return doc[key]

    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    version = need("format", count, "a format number")
    if version != PACK_FORMAT:
        raise refuse(f"pack.toml: format {version} is not one this whetstone reads ({PACK_FORMAT})")
    try:
        doc["skill"] = skill_name(need("skill", lambda v: isinstance(v, str), "a skill name"))
    except WhetstoneError as exc:
        raise refuse(f"pack.toml: {exc.message}") from None
    need("whetstone_version", lambda v: isinstance(v, str) and len(v) < 64, "a version string")
    need("date", lambda v: type(v) is dt.date, "a date (YYYY-MM-DD)")
    need("learnings", count, "a count")
    need("issues", count, "a count")
    need("scopes", lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v), "a list of scopes")
    need("entries", lambda v: isinstance(v, dict) and all(
        isinstance(k, str) and is_entry_id(k) and isinstance(h, str) and _SHA256.fullmatch(h)
        for k, h in v.items()), "a table of entry ids to sha256 hashes")
    return doc


def _entries(members: dict[str, bytes], manifest: dict[str, Any],
             refuse: Callable[[str], WhetstoneError]) -> list[Item]:
    """The entries of the pack's markdown, each checked against the manifest."""
    items: list[Item] = []
    where: dict[str, str] = {}
    hashes: dict[str, str] = manifest["entries"]
    for path in sorted(members):
        folder = path.split("/", 1)[0]
        try:
            text = members[path].decode("utf-8")
        except UnicodeDecodeError:
            raise refuse(f"{path}:1: not valid UTF-8") from None
        errors = markdown.validate(text, path, folder)
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            raise refuse(f"{errors[0]}{more}")
        for block in blocks.parse(text, path, folder).blocks:
            at = f"{path}:{block.line}"
            if block.id in where:
                raise refuse(f"{at}: duplicate id {block.id} (also at {where[block.id]})")
            where[block.id] = at
            item = _item(block, at, refuse)
            digest = hashlib.sha256(canonical(item).encode("utf-8")).hexdigest()
            if block.id not in hashes:
                raise refuse(f"{at}: {block.id} is not listed in pack.toml")
            if hashes[block.id] != digest:
                raise refuse(f"{at}: {block.id} does not match its hash in pack.toml (the pack was altered)")
            items.append(item)
    missing = sorted(set(hashes) - set(where), key=lambda k: (k[0] != "L", int(k[1:])))
    if missing:
        raise refuse(f"pack.toml lists {', '.join(missing[:5])}{' …' if len(missing) > 5 else ''}, "
                     f"which the pack does not hold")
    counts = {"learnings": sum(i.kind == "learning" for i in items), "issues": sum(i.kind == "issue" for i in items)}
    for key, n in counts.items():
        if manifest[key] != n:
            raise refuse(f"pack.toml counts {manifest[key]} {key} but the pack holds {n}")
    scopes = sorted({i.scope for i in items}, key=lambda s: (scope_key(s), s))
    if manifest["scopes"] != scopes:
        raise refuse("pack.toml's scopes do not match the scopes of its entries")
    return sorted(items, key=id_order)


def _item(block: blocks.Block, at: str, refuse: Callable[[str], WhetstoneError]) -> Item:
    """A pack block as an Item, refusing what capture would never write (control characters,
    an oversized scope or body) and recurrences too large for the index."""
    if block.kind == "learning" and block.recurrence > MAX_RECURRENCE:
        raise refuse(f"{at}: recurrence {block.recurrence} of {block.id} is implausibly large")
    try:
        clean_body(block.body)
        clean_scope(block.scope)
    except WhetstoneError as exc:
        raise refuse(f"{at}: {exc.message}") from None
    learning = block.kind == "learning"
    return Item(block.id, block.kind, block.scope, block.body, block.title,
                block.recurrence if learning else 1, block.get("first_seen"), block.get("last_seen"),
                tuple(block.provenance), at, block.always, block.differs)


