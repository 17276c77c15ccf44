"""Preference packs (SPEC §4 export/import): a store's entries as one `.tar.gz` file.

Export is deterministic: one file per scope, blocks in id order as `edits.render` writes them, a
ustar archive with fixed metadata in a gzip stream with no name and time 0, so the same store always
gives the same bytes. A pack is untrusted input: read whole into memory within hard limits, never
extracted to disk, and refused as a whole on the first thing that is not a plain, valid entry file.
"""
from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import io
import json
import re
import tarfile
import tomllib
import zlib
from dataclasses import dataclass
from typing import Any, Callable

from ... import __version__
from ...base.errors import WhetstoneError, shown
from ...format import blocks, edits, markdown
from ...format.ids import is_entry_id
from ...format.layout import KIND_FOLDER, scope_filename, scope_key, skill_name
from ...index.freshness import read_files
from ...format.entry import Entry
from ...store.store import Store
from ..writing.inputs import clean_body, clean_scope

PACK_FORMAT = 1
MAX_MEMBER = 1 << 20           # one file in a pack
MAX_EXPANDED = 64 << 20        # a whole pack, uncompressed (and the compressed file too)
COMPRESS_LEVEL = 6             # zlib's default; import reads any level
MAX_RECURRENCE = 1_000_000     # more is no taste, it is an attack on the index's integers

_MEMBER_FILE = re.compile(r"(learnings|issues)/[^./\\\x00-\x1f\x7f][^/\\\x00-\x1f\x7f]*\.md")
_SHA256 = re.compile(r"[0-9a-f]{64}")


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


def duplicate_warning(where: str, entry_id: str, first: str) -> str:
    return f"{where}: duplicate id {entry_id} (also at {first}); this copy is not exported"


def id_order(item: Item) -> tuple[int, int]:
    return (0 if item.kind == "learning" else 1, int(item.id[1:]) if item.id else 0)


def canonical(item: Item) -> str:
    """The block text an entry is exported as, and whose sha256 the manifest holds."""
    fields: list[tuple[str, str]] = []
    if item.kind == "learning":
        fields += [("recurrence", str(item.recurrence)), ("first_seen", item.first_seen or ""),
                   ("last_seen", item.last_seen or "")]
    fields.append(("scope", item.scope))
    if item.always:
        fields.append(("applies", blocks.ALWAYS))
    if item.differs:
        fields.append(("differs_from", blocks.IDS_SEPARATOR.join(item.differs)))
    fields += [("provenance", blocks.encode_value(p)) for p in item.provenance]
    return edits.render(item.id or "", item.title, fields, item.body)


def build_pack(skill: str, items: list[Item], day: dt.date) -> bytes:
    """The pack's bytes: the same items on the same day always give the same bytes. Each entry's
    canonical text goes to its scope's file (blocks in id order) and its sha256 to the manifest."""
    files: dict[str, list[str]] = {}
    names: dict[tuple[str, str], str] = {}
    rows: list[tuple[str, str, str, str]] = []
    for item in sorted(items, key=id_order):
        text = canonical(item)
        name = names.get((item.kind, item.scope))
        if name is None:
            name = names[item.kind, item.scope] = f"{KIND_FOLDER[item.kind]}/{scope_filename(item.scope)}"
        files.setdefault(name, []).append(text)
        rows.append((item.id, item.kind, item.scope, hashlib.sha256(text.encode("utf-8")).hexdigest()))
    members = [("pack.toml", render_manifest(skill, rows, day))]
    members += [(name, edits.append_all("", texts)) for name, texts in sorted(files.items())]
    return archive([(name, text.encode("utf-8")) for name, text in members])


def archive(members: list[tuple[str, bytes]]) -> bytes:
    """A `.tar.gz` of `members`, in the order given, with fixed metadata. `GzipFile`, not
    `gzip.compress`: it writes the same header on every platform (zlib's OS byte varies)."""
    archived = io.BytesIO()
    with tarfile.open(fileobj=archived, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode, info.type = len(data), 0, 0o644, tarfile.REGTYPE
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", compresslevel=COMPRESS_LEVEL, fileobj=out, mtime=0) as zipped:
        zipped.write(archived.getbuffer())
    return out.getvalue()


def render_manifest(skill: str, rows: list[tuple[str, str, str, str]], day: dt.date) -> str:
    """pack.toml, written by hand (tomllib only reads): keys, one array and the [entries] table.
    `rows` are (id, kind, scope, sha256 of the canonical text), in id order."""
    learnings = sum(row[1] == "learning" for row in rows)
    listed = sorted({row[2] for row in rows}, key=lambda s: (scope_key(s), s))
    lines = [
        "# A whetstone preference pack. learnings/ and issues/ hold the entries as markdown blocks;",
        "# [entries] holds the sha256 of each entry's canonical text, checked when the pack is imported.",
        f"format = {PACK_FORMAT}",
        f"skill = {toml_string(skill)}",
        f"whetstone_version = {toml_string(__version__)}",
        f"date = {day.isoformat()}",
        f"learnings = {learnings}",
        f"issues = {len(rows) - learnings}",
    ]
    lines += ["scopes = [", *(f"    {toml_string(s)}," for s in listed), "]"] if listed else ["scopes = []"]
    lines += ["", "[entries]", *(f'{row[0]} = "{row[3]}"' for row in rows)]  # ids and hex digits: nothing to escape
    return "\n".join(lines) + "\n"


def toml_string(text: str) -> str:
    r"""A TOML basic string. JSON's escapes are all TOML escapes too (\" \\ \b \t \n \f \r, and \u00XX
    for the other control characters) and it writes everything else as is, so a JSON string is a TOML
    string but for DEL (U+007F), which TOML wants escaped and JSON does not escape."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


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
    missing = sorted(set(hashes) - set(where), key=blocks.id_order)
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


