"""Preference packs and rule files (SPEC §4 export/import): taste shared between stores and tools.

A **pack** is a `.tar.gz` of `learnings/`, `issues/` and a `pack.toml` manifest (skill, version,
date, counts, scopes and the sha256 of every entry's canonical text). Entries are written in a
canonical form (one file per scope, blocks in id order, rendered by `blocks.render`), and the
archive is built with fixed metadata (mtime 0, uid/gid 0, no owner names, mode 0644, sorted
members, gzip without a name or time), so the same store always exports the same bytes. Events,
the index and git history stay behind.

A pack is **untrusted input**. It is read whole into memory with hard limits (64 MiB expanded,
1 MiB per member, checked from the headers and again while reading), never extracted to disk,
and refused as a whole (nothing written) on the first thing that is not a plain, valid entry file:
absolute or `..` paths, links, devices, anything outside `learnings/`, `issues/` and `pack.toml`,
markdown that fails `blocks.validate`, a manifest that does not match the entries.

**Import** (merge) judges each entry against the store as it was before the import, with the
judge capture uses: an entry the store already holds is a noop, a near-duplicate learning is
reinforced once, a near-duplicate issue is a noop, a contradiction is skipped and reported, the
rest are added under freshly minted ids. Every write records its source in a provenance line
ending `(import:<source>:<rule hash>)`, and that marker is how a second import of the same pack
(or of a later version of it) recognises what it already brought in: importing again changes
nothing and makes no commit. Replace swaps every entry in one commit. Rule files (AGENTS.md,
CLAUDE.md, Cursor `.mdc`) are rendered from, and read into, the same entries.
"""
from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import io
import re
import tarfile
import tomllib
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from . import __version__, blocks
from . import index as index_mod
from .capture import MAX_SCOPE, Context, add_block, clean_body, clean_provenance, clean_scope
from .config import Config, load
from .embed import get_embedder
from .errors import RUNTIME, WhetstoneError, shown
from .store import KIND_FOLDER, Store, scope_filename, scope_key, skill_name, today, write_atomic

PACK_FORMAT = 1
FORMATS = ("pack", "agents-md", "claude-md", "cursor-rule")
RULE_FORMATS = FORMATS[1:]
MODES = ("merge", "replace")
MAX_MEMBER = 1 << 20           # one file in a pack
MAX_EXPANDED = 64 << 20        # a whole pack, uncompressed (and the compressed file too)
MAX_RULE_FILE = 1 << 20        # an AGENTS.md / CLAUDE.md / .mdc to import
MAX_RECURRENCE = 1_000_000     # more is no taste, it is an attack on the index's integers
DEFAULT_MIN_WEIGHT = 0.3       # rule files list learnings at least this firm: a fresh one-off (0.5)
#                                is in, one left unused for ~4 months or more is out
PROGRESS_MIN = 300             # the CLI draws a progress bar for imports bigger than this
RULES_SOURCE = "rules"         # the source name in markers of entries read from a rule file
_ALSO = "reinforced once already by this import"  # a noop that still records its source marker

_MARKER = re.compile(r"\(import:([a-z0-9._-]+):([0-9a-f]{16})\)")
_MEMBER_FILE = re.compile(r"(learnings|issues)/[^./\\\x00-\x1f\x7f][^/\\\x00-\x1f\x7f]*\.md")
_ENTRY_KEY = re.compile(r"[LI][1-9]\d*")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TOML_SPECIAL = re.compile(r'[\x00-\x1f\x7f"\\]')
_TOML_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


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


# --- export ---------------------------------------------------------------------------------------

def export(skill: str, output: str | None = None, fmt: str = "pack", *, min_weight: float = DEFAULT_MIN_WEIGHT,
           config: Config | None = None) -> dict[str, Any]:
    """Write `skill`'s entries as a pack (default file `<skill>.whetstone.tar.gz` in the current
    directory) or as a rule file (`agents-md`, `claude-md`, `cursor-rule`: returned as `text`
    unless `output` names a file). Rule files list every issue and the learnings weighing at least
    `min_weight`."""
    config = config or load()
    fmt = _choice(fmt, FORMATS, "format")
    if isinstance(min_weight, bool) or not isinstance(min_weight, (int, float)) or not 0 <= min_weight <= 1:
        raise WhetstoneError(f"min_weight must be a number from 0 to 1, got {shown(min_weight)}")
    store = Store.open(config, skill)
    store.require()
    items, warnings = store_items(store)
    day = today()
    result: dict[str, Any] = {"skill": store.skill, "format": fmt, "path": None,
                              "learnings": sum(i.kind == "learning" for i in items),
                              "issues": sum(i.kind == "issue" for i in items), "warnings": warnings}
    if fmt == "pack":
        if output == "-":
            raise WhetstoneError("a pack is binary: give a file name to write it to")
        data = build_pack(store.skill, items, day)
        target = Path(output) if output else Path.cwd() / f"{store.skill}.whetstone.tar.gz"
        _write_output(target, data)
        result.update(path=str(target), bytes=len(data), sha256=hashlib.sha256(data).hexdigest(),
                      scopes=len({scope_key(i.scope) for i in items}))
        return result
    text, listed = render_rules(store.skill, items, fmt, day, float(min_weight), config)
    result.update(rules=listed["issues"], preferences=listed["learnings"], min_weight=float(min_weight),
                  left_out=result["learnings"] - listed["learnings"])
    if output and output != "-":
        target = Path(output)
        _write_output(target, text)
        result["path"] = str(target)
    else:
        result["text"] = text
    return result


def store_items(store: Store) -> tuple[list[Item], list[str]]:
    """Every entry of a store as an Item, learnings then issues, each in id order. A file that
    fails validation contributes its last committed version (with a warning), as recall does;
    an id claimed twice keeps its first copy."""
    items: list[Item] = []
    warnings: list[str] = []
    seen: dict[str, str] = {}
    files = {kind: [store.rel(path) for path in store.scope_files(kind)] for kind in ("learning", "issue")}
    read = index_mod.read_files(store, files["learning"] + files["issue"])
    for kind in ("learning", "issue"):
        for rel in files[kind]:
            entries, warning = read[rel]
            if warning:
                warnings.append(warning)
            for e in entries:
                where = f"{rel}:{e.line}"
                if e.id in seen:
                    warnings.append(f"{where}: duplicate id {e.id} (also at {seen[e.id]}); this copy is not exported")
                    continue
                seen[e.id] = where
                items.append(Item(e.id, e.kind, e.scope, e.body, e.title, e.recurrence or 1, e.first_seen,
                                  e.last_seen, tuple(e.provenance), where))
    return sorted(items, key=_id_order), warnings


def _id_order(item: Item) -> tuple[int, int]:
    return (0 if item.kind == "learning" else 1, int(item.id[1:]) if item.id else 0)


def canonical(item: Item) -> str:
    """The block text an entry is exported as, and whose sha256 the manifest holds."""
    fields: list[tuple[str, str]] = []
    if item.kind == "learning":
        fields += [("recurrence", str(item.recurrence)), ("first_seen", item.first_seen or ""),
                   ("last_seen", item.last_seen or "")]
    fields.append(("scope", item.scope))
    fields += [("provenance", blocks.encode_value(p)) for p in item.provenance]
    return blocks.render(item.id or "", item.title, fields, item.body)


def build_pack(skill: str, items: list[Item], day: dt.date) -> bytes:
    """The pack's bytes: the same items on the same day always give the same bytes."""
    files: dict[str, list[str]] = {}
    hashes: dict[str, str] = {}
    names: dict[str, str] = {}
    for item in sorted(items, key=_id_order):
        text = canonical(item)
        if item.scope not in names:
            names[item.scope] = scope_filename(item.scope)
        files.setdefault(f"{KIND_FOLDER[item.kind]}/{names[item.scope]}", []).append(text)
        hashes[item.id] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    manifest = render_manifest(skill, items, day, hashes)
    members = [("pack.toml", manifest.encode("utf-8"))]
    for rel in sorted(files):
        text = ""
        for block in files[rel]:
            text = blocks.append(text, block)
        members.append((rel, text.encode("utf-8")))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.type = tarfile.REGTYPE
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=9, mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def render_manifest(skill: str, items: list[Item], day: dt.date, hashes: dict[str, str]) -> str:
    """pack.toml, written by hand (tomllib only reads): keys, one array and the [entries] table."""
    scopes = sorted({i.scope for i in items}, key=lambda s: (scope_key(s), s))
    lines = [
        "# A whetstone preference pack. learnings/ and issues/ hold the entries as markdown blocks;",
        "# [entries] holds the sha256 of each entry's canonical text, checked when the pack is imported.",
        f"format = {PACK_FORMAT}",
        f"skill = {toml_string(skill)}",
        f"whetstone_version = {toml_string(__version__)}",
        f"date = {day.isoformat()}",
        f"learnings = {sum(i.kind == 'learning' for i in items)}",
        f"issues = {sum(i.kind == 'issue' for i in items)}",
    ]
    lines += ["scopes = [", *(f"    {toml_string(s)}," for s in scopes), "]"] if scopes else ["scopes = []"]
    lines += ["", "[entries]"]
    lines += [f"{item.id} = {toml_string(hashes[item.id])}" for item in sorted(items, key=_id_order)]
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


def _write_output(target: Path, data: str | bytes) -> None:
    if target.is_dir():
        raise WhetstoneError(f"{target} is a directory: give a file name to write to")
    if not target.parent.is_dir():
        raise WhetstoneError(f"cannot write {target}: the directory {target.parent} does not exist")
    try:
        write_atomic(target, data)
    except OSError as exc:
        raise WhetstoneError(f"cannot write {target}: {exc.strerror or exc}", exit_code=RUNTIME) from None


# --- rule files (AGENTS.md, CLAUDE.md, Cursor rules) ----------------------------------------------

def render_rules(skill: str, items: list[Item], fmt: str, day: dt.date, min_weight: float,
                 config: Config) -> tuple[str, dict[str, int]]:
    """A rule file: the issues as MUST rules, then the learnings weighing at least `min_weight` as
    SHOULD preferences, each part grouped by scope (preferences: strongest scope and rule first).
    Returns the text and how many of each kind it lists."""
    from .retrieve import weight

    issues: dict[str, list[Item]] = {}
    for item in items:
        if item.kind == "issue":
            issues.setdefault(scope_key(item.scope), []).append(item)
    prefs: dict[str, list[tuple[float, Item]]] = {}
    for item in items:
        if item.kind == "learning":
            w = weight(item.recurrence, item.last_seen, day, config)
            if w >= min_weight:
                prefs.setdefault(scope_key(item.scope), []).append((w, item))
    for rows in prefs.values():
        rows.sort(key=lambda row: (-row[0], _id_order(row[1])))
    n_issues, n_prefs = sum(map(len, issues.values())), sum(map(len, prefs.values()))

    lines: list[str] = []
    if fmt == "cursor-rule":
        lines += ["---", f"description: Taste and rules for {skill}, kept by whetstone", "globs:",
                  "alwaysApply: true", "---", ""]
    lines += [f"# Taste and rules for {skill}", "",
              (f"<!-- Exported by whetstone {__version__} from the skill {skill} on {day.isoformat()}: "
               f"{n_issues} rules and {n_prefs} preferences (weight at least {min_weight:.2f}). Capture "
               f"corrections with whetstone and export again rather than editing this file. -->"), ""]
    if issues:
        lines += ["## Rules (MUST)", "", "Follow every rule here, whatever else the task suggests.", ""]
        for key in sorted(issues):
            group = issues[key]
            lines += [f"### {group[0].scope}", ""]
            lines += [f"- MUST: {_one_line(item.body)}" for item in group]
            lines.append("")
    if prefs:
        lines += ["## Preferences (strongest first)", "",
                  "Apply these by default; the weight (0 to 1) says how firmly.", ""]
        for key in sorted(prefs, key=lambda k: (-prefs[k][0][0], k)):
            group = prefs[key]
            lines += [f"### {group[0][1].scope}", ""]
            lines += [f"- SHOULD: {_one_line(item.body)} (weight {w:.2f})" for w, item in group]
            lines.append("")
    if not issues and not prefs:
        lines += ["No rules or preferences yet.", ""]
    return "\n".join(lines).rstrip("\n") + "\n", {"issues": n_issues, "learnings": n_prefs}


def _one_line(text: str) -> str:
    return " ".join(text.split())


_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT = re.compile(r"^ {0,3}(?:=+|-+)[ \t]*$")
_BULLET = re.compile(r"^([ \t]*)(?:[-*+]|\d{1,9}[.)])[ \t]+(\S.*)$")
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
_THEMATIC = re.compile(r"^[ \t]*([-*_])(?:[ \t]*\1){2,}[ \t]*$")
_TASK = re.compile(r"^\[[ xX]\][ \t]+")
_LABEL = re.compile(r"^(MUST|SHOULD):[ \t]*")
_WEIGHT = re.compile(r"[ \t]*\(weight [0-9]+(?:\.[0-9]+)?\)$")
_HARD = re.compile(r"\b(?:always|never|must)\b", re.IGNORECASE)


def read_rules(data: bytes, name: str, fmt: str, day: dt.date) -> list[Item]:
    """The bullet rules of an AGENTS.md, CLAUDE.md or Cursor rule, in file order. A bullet is an
    issue when labelled `MUST:` or when it says always, never or must; a learning otherwise (or
    when labelled `SHOULD:`). Its scope is the nearest heading above it (for a Cursor rule
    without one, its `description`; else "general"). Bullets inside code fences and HTML comments
    are not rules; a rule repeated word for word is read once."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise WhetstoneError(f"{name}:1: not valid UTF-8") from None
    lines = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    start, fallback = _frontmatter(lines)
    heading: str | None = None
    found: list[tuple[int, str, str | None]] = []  # (line, bullet text, heading)
    current: list[Any] | None = None  # [line, text parts, heading] of the bullet being read
    fence: str | None = None
    in_comment = False
    previous = ""  # the last plain paragraph line (a setext underline makes it a heading)

    def close() -> None:
        nonlocal current
        if current is not None:
            found.append((current[0], " ".join(current[1]), current[2]))
            current = None

    for number in range(start, len(lines)):
        line = lines[number]
        if fence:
            if line.strip().startswith(fence):
                fence = None
            continue
        if in_comment:
            in_comment = "-->" not in line
            continue
        opened = _FENCE.match(line)
        if opened:
            close()
            fence = opened.group(1)[0] * 3
            continue
        if line.lstrip().startswith("<!--"):
            close()
            in_comment = "-->" not in line
            continue
        if not line.strip():
            close()
            previous = ""
            continue
        heading_match = _HEADING.match(line)
        if heading_match:
            close()
            heading, previous = (heading_match.group(2) or "").strip() or heading, ""
            continue
        if _SETEXT.match(line) and previous and current is None:
            heading, previous = previous, ""
            continue
        if _THEMATIC.match(line):
            close()
            previous = ""
            continue
        bullet = _BULLET.match(line)
        if bullet:
            close()
            current = [number + 1, [bullet.group(2).strip()], heading]
            continue
        if current is not None:  # an indented or lazy continuation of the bullet
            current[1].append(line.strip())
            continue
        previous = line.strip()
    close()

    items: list[Item] = []
    seen: set[str] = set()
    for number, raw, under in found:
        where = f"{name}:{number}"
        body = _TASK.sub("", raw)
        label = _LABEL.match(body)
        body = _WEIGHT.sub("", body[label.end():] if label else body).strip()
        if not body:
            continue
        if label:
            kind = "issue" if label.group(1) == "MUST" else "learning"
        else:
            kind = "issue" if _HARD.search(body) else "learning"
        try:
            body = clean_body(body)
            scope = clean_scope(_cut(under or fallback or "general"))
        except WhetstoneError as exc:
            raise WhetstoneError(f"{where}: {exc.message}") from None
        key = rule_hash(kind, scope, body)
        if key in seen:
            continue
        seen.add(key)
        items.append(Item(None, kind, scope, body, blocks.derive_title(body), 1, day.isoformat(), day.isoformat(),
                          (), where))
    return items


def _frontmatter(lines: list[str]) -> tuple[int, str | None]:
    """Where the markdown starts after a `---` frontmatter block, and its `description`."""
    if not lines or lines[0].strip() != "---":
        return 0, None
    for end in range(1, len(lines)):
        if lines[end].strip() in ("---", "..."):
            description = None
            for line in lines[1:end]:
                key, _, value = line.partition(":")
                if key.strip() == "description" and value.strip():
                    description = value.strip().strip("\"'").strip() or None
            return end + 1, description
    return 0, None  # never closed: not frontmatter


def _cut(scope: str, limit: int = MAX_SCOPE) -> str:
    """A heading used as a scope, cut at a word boundary to what a scope may hold."""
    scope = " ".join(scope.split())
    if len(scope) <= limit:
        return scope
    cut = scope[:limit]
    return cut.rsplit(" ", 1)[0] if " " in cut else cut


# --- reading a pack -------------------------------------------------------------------------------

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
        isinstance(k, str) and _ENTRY_KEY.fullmatch(k) and isinstance(h, str) and _SHA256.fullmatch(h)
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
        errors = blocks.validate(text, path, folder)
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
    return sorted(items, key=_id_order)


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
                tuple(block.provenance), at)


# --- import ---------------------------------------------------------------------------------------

@dataclass
class Step:
    """What the import does with one item: add, reinforce, noop or conflict."""

    item: Item
    action: str
    marker: str
    target: index_mod.Entry | None = None
    reason: str = ""
    bump: bool = False      # a reinforce that raises the recurrence (once per entry per import)
    new_id: str | None = None


def import_pack(skill: str, source: str, mode: str = "merge", dry_run: bool = False, fmt: str | None = None, *,
                progress: Callable[[int, int], None] | None = None, config: Config | None = None) -> dict[str, Any]:
    """Import a pack (or, with `fmt`, a rule file) into `skill`, creating the store if needed.

    `merge` adds what is new, reinforces near-duplicate learnings once, and skips (and reports)
    what the store already holds or what contradicts it; `replace` swaps every entry for the
    pack's. Either way it is one commit, or none when nothing changes; `dry_run` only reports.
    `progress(done, total)` is called as entries are judged."""
    config = config or load()
    mode = _choice(mode, MODES, "mode")
    fmt = "pack" if fmt in (None, "") else _choice(fmt, FORMATS, "format")
    path = Path(source) if isinstance(source, str) and source else None
    if path is None:
        raise WhetstoneError(f"give the pack to import, got {shown(source)}")
    data = _read_source(path, MAX_EXPANDED if fmt == "pack" else MAX_RULE_FILE)
    day = today()
    if fmt == "pack":
        pack = read_pack(data, path.name)
        items, origin, label = pack.items, pack.skill, f"pack {pack.skill}"
        about = {"skill": pack.skill, "whetstone_version": pack.version, "date": pack.date}
    else:
        items, origin, label = read_rules(data, path.name, fmt, day), RULES_SOURCE, path.name
        about = {"file": path.name}

    store = Store.open(config, skill)
    result: dict[str, Any] = {"skill": store.skill, "source": str(path), "format": fmt, "from": about, "mode": mode,
                              "dry_run": bool(dry_run), "status": None, "commit": None, "committed": [],
                              "reinforced": [], "noop": [], "conflicts": [], "removed": [], "warnings": []}
    if not store.exists:
        if dry_run:  # nothing to judge against, and nothing may be written: not even the store
            steps = [Step(item, "add", marker(origin, item)) for item in items]
            return _summarise(result, steps, [], None)
        store.create()
    embedder = get_embedder(config.embedding_backend, config.embedding_model)
    tick = _ticker(progress, len(items) * (1 if dry_run else 2))  # judging, then writing
    with store.lock():
        ctx = Context(config, store, index_mod.snapshot(store, embedder), embedder)
        live = [ctx.snap.entries[row] for row in np.flatnonzero(ctx.snap.alive)]
        if mode == "merge":
            steps, removed = _plan_merge(ctx, live, items, origin, fmt, tick), []
        else:
            steps, removed = _plan_replace(live, items, origin)
            for _ in steps:
                tick()
        result["warnings"] = list(ctx.snap.warnings) + store.warnings
        # (a noop that only records its marker always rides along with a reinforcement)
        if not dry_run and (removed or any(s.action in ("add", "reinforce") for s in steps)):
            _apply(ctx, steps, removed, label, day, mode, tick)
            result["commit"] = store.head()
    return _summarise(result, steps, removed, result["commit"])



def _ticker(progress: Callable[[int, int], None] | None, total: int) -> Callable[[], None]:
    """A step counter that reports `progress(done, total)` after each step."""
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(min(done, total), total)
    return tick


def _read_source(path: Path, limit: int) -> bytes:
    try:
        if not path.is_file():
            raise WhetstoneError(f"{path}: no such file" if not path.exists() else f"{path} is not a regular file")
        with path.open("rb") as handle:
            data = handle.read(limit + 1)  # bounded, whatever stat said a moment ago
        if len(data) > limit:
            raise WhetstoneError(f"{path.name}: refusing it: larger than {limit >> 20} MiB")
        return data
    except OSError as exc:
        raise WhetstoneError(f"cannot read {path}: {exc.strerror or exc}", exit_code=RUNTIME) from None


def _plan_merge(ctx: Context, live: list[index_mod.Entry], items: list[Item], origin: str, fmt: str,
                tick: Callable[[], None]) -> list[Step]:
    """Judge every item against the store as it was before the import (never against each
    other, so a pack's own near-duplicates all arrive, as they were in its store)."""
    markers: dict[str, index_mod.Entry] = {}
    same_rule: dict[str, list[index_mod.Entry]] = {}
    for e in live:
        for line in e.provenance:
            for found in _MARKER.finditer(line):
                markers.setdefault(f"import:{found.group(1)}:{found.group(2)}", e)
        same_rule.setdefault(rule_hash(e.kind, e.scope, e.body), []).append(e)
    steps: list[Step] = []
    bumped: set[str] = set()
    for item in items:
        steps.append(_judge(ctx, item, marker(origin, item), markers, same_rule, fmt, bumped))
        tick()
    return steps


def _judge(ctx: Context, item: Item, mark: str, markers: dict[str, index_mod.Entry],
           same_rule: dict[str, list[index_mod.Entry]], fmt: str, bumped: set[str]) -> Step:
    if mark in markers:
        return Step(item, "noop", mark, markers[mark], "imported before")
    provenance = {clean_provenance(p) for p in item.provenance}
    for e in same_rule.get(rule_hash(item.kind, item.scope, item.body), []):
        # The same rule, and nothing in its history the store does not know: this store is
        # where it came from (or a rule file restates it). A teammate's identical rule with its
        # own history is evidence, and falls through to be reinforced.
        if fmt != "pack" or provenance <= {clean_provenance(p) for p in e.provenance}:
            return Step(item, "noop", mark, e, "already in the store")
    verdicts = ctx.nearest(item.body, item.scope)
    decisive = next(((e, v) for e, v in verdicts if v.relation in ("duplicate", "conflict")), None)
    if decisive is None:
        return Step(item, "add", mark)
    old, verdict = decisive
    if verdict.relation == "conflict":
        return Step(item, "conflict", mark, old, verdict.reason)
    if old.kind == "issue":
        return Step(item, "noop", mark, old, "an issue already says this")
    if item.kind == "issue":  # a hard rule the store holds only as a preference: keep both
        return Step(item, "add", mark, old, f"hardens learning {old.id}")
    if old.id in bumped:
        return Step(item, "noop", mark, old, _ALSO)
    bumped.add(old.id)
    return Step(item, "reinforce", mark, old, "near-duplicate", bump=True)


def _plan_replace(live: list[index_mod.Entry], items: list[Item], origin: str) -> tuple[list[Step], list[str]]:
    """Every entry out, every item in; nothing at all when the store already holds exactly what
    this pack brought in by an earlier replace (or merge into an empty store)."""
    wanted = {marker(origin, item) for item in items}
    held = []
    for e in live:
        found = {f"import:{m.group(1)}:{m.group(2)}" for line in e.provenance for m in _MARKER.finditer(line)}
        held.append(found & wanted)
    if len(live) == len(items) and all(held) and set().union(*held) == wanted:
        return [Step(item, "noop", marker(origin, item), None, "already the store's content") for item in items], []
    steps = [Step(item, "add", marker(origin, item)) for item in items]
    return steps, sorted((e.id for e in live), key=lambda i: (i[0] != "L", int(i[1:])))


def _apply(ctx: Context, steps: list[Step], removed: list[str], label: str, day: dt.date, mode: str,
           tick: Callable[[], None]) -> None:
    """Write the plan as one commit."""
    stamp = day.isoformat()
    pending: dict[str, str | None] = {}

    def named(item: Item) -> str:  # "pack theirs L3", or "AGENTS.md:7" for a rule file
        return f"{label} {item.id}" if item.id else item.where

    def text_of(rel: str) -> str:
        if rel in pending:
            return pending[rel] or ""
        return ctx.read(rel)[0]

    if removed:
        for kind in ("learning", "issue"):
            for path in ctx.store.scope_files(kind):
                pending[ctx.store.rel(path)] = None
    touched: dict[str, list[Step]] = {}
    for step in steps:
        if step.target is not None and (step.action == "reinforce" or step.reason == _ALSO):
            touched.setdefault(step.target.id, []).append(step)
    for entry_id, group in touched.items():
        entry = group[0].target
        text = text_of(entry.path)
        block = next((b for b in blocks.parse(text, entry.path).blocks if b.id == entry_id), None)
        if block is None:
            raise WhetstoneError(f"{entry_id} moved while importing; try again", exit_code=RUNTIME)
        changes = {"recurrence": str(block.recurrence + 1), "last_seen": max(stamp, block.get("last_seen") or "")}
        lines = [f"{stamp} — reinforced by import from {named(s.item)} ({s.marker})" for s in group]
        new = blocks.update_fields(block, changes if any(s.bump for s in group) else {}, lines)
        pending[entry.path] = blocks.replace(text, block, new)
        for s in group:
            s.new_id = entry_id
    for step in steps:
        tick()
        if step.action != "add":
            continue
        item = step.item
        provenance = [clean_provenance(p) for p in item.provenance]
        provenance.append(f"{stamp} — imported from {named(item)} ({step.marker})")
        body, scope = clean_body(item.body), clean_scope(item.scope)
        step.new_id = add_block(ctx, item.kind, body, scope, provenance, pending, recurrence=item.recurrence,
                                first_seen=item.first_seen if item.kind == "learning" else None,
                                last_seen=item.last_seen if item.kind == "learning" else None)
    added = [s for s in steps if s.action == "add"]
    reinforced = [s for s in steps if s.action == "reinforce"]
    if mode == "replace":
        subject = f"import: replace every entry with {label} ({len(added)} in, {len(removed)} out)"
    else:
        subject = f"import: {len(added)} added, {len(reinforced)} reinforced from {label}"
    lines = [f"- remove {i}" for i in removed]
    lines += [f"- add {s.new_id} ({s.item.scope}) from {named(s.item)}" for s in added]
    lines += [f"- reinforce {s.new_id} ({s.target.scope}) from {named(s.item)}" for s in reinforced]
    ctx.commit(subject + "\n\n" + "\n".join(lines) + "\n",
               {rel: (text if text and text.strip() else None) for rel, text in pending.items()})


def _summarise(result: dict[str, Any], steps: list[Step], removed: list[str], commit: str | None) -> dict[str, Any]:
    for step in steps:
        item = step.item
        source = {"from": item.label, "kind": item.kind, "scope": item.scope, "rule": item.body}
        if step.action == "add":
            result["committed"].append({"id": step.new_id, **source})
        elif step.action == "reinforce":
            result["reinforced"].append({"id": step.target.id, "from": item.label, "scope": step.target.scope,
                                         "rule": step.target.body, "recurrence": step.target.recurrence + 1})
        elif step.action == "noop":
            result["noop"].append({"id": step.target.id if step.target else None, "from": item.label,
                                   "reason": step.reason})
        else:
            result["conflicts"].append({**source, "conflicts_with": {
                "id": step.target.id, "rule": step.target.body, "scope": step.target.scope}, "reason": step.reason})
    result["removed"] = removed
    result["counts"] = {key: len(result[key]) for key in ("committed", "reinforced", "noop", "conflicts", "removed")}
    changes = result["counts"]["committed"] + result["counts"]["reinforced"] + len(removed)
    result["status"] = "dry_run" if result["dry_run"] else ("committed" if commit and changes else "unchanged")
    if result["status"] != "committed":
        result["commit"] = None
    return result


def _choice(value: object, allowed: tuple[str, ...], what: str) -> str:
    if isinstance(value, str) and value.strip().lower() in allowed:
        return value.strip().lower()
    raise WhetstoneError(f"unknown {what} {shown(value)}: use one of {', '.join(allowed)}")
