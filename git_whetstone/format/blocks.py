"""The block format (SPEC §3): read, write and validate the markdown that is the store's truth.

A scope file is a run of blocks:

    ## L1 · Title
    - recurrence: 2
    - first_seen: 2026-07-23
    - last_seen: 2026-07-24
    - scope: currency formatting
    - provenance: "2026-07-24 — 'make the revenue column US dollars'"

    Body paragraph(s).

Either kind may also carry `- applies: always` after its scope, and `- differs_from: L3, I2` after
that (the entries said to hold beside it: `with_always`, `with_differs`).

`parse` is the fast line reader used on every read (a file of blocks shaped as whetstone writes them
takes one regular expression match a block, `_parse_clean`); `markdown.validate` adds a second opinion from
mistune (what a markdown renderer would actually see) for the hook and `git whetstone validate`. The
line reader refuses every body markdown would read as more than a body (a heading, a list that joins
the metadata, a fence left open), so the two agree; tests/format/test_blocks.py holds them to it. Each block
keeps its exact source text, so unchanged blocks are written back byte for byte.

The heading's shape lives here (the parser's `_HEADING`) and, for readers that only want the ids a
text claims (the index, the journal, the history scanner, the merge), in `ids` beside it.
"""
from __future__ import annotations

import datetime as dt
import json
import re
import string
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate, islice

from .body import ATX, CONFLICT_MARKER, check_body

DOT = "\u00b7"
PREFIX = {"learnings": "L", "issues": "I"}
FOLDER = {"L": "learnings", "I": "issues"}
FIELDS = {
    "L": ("recurrence", "first_seen", "last_seen", "scope", "applies", "differs_from", "provenance"),
    "I": ("scope", "applies", "differs_from", "provenance"),
}
ALWAYS = "always"  # the one value of `applies`: a rule for every task of the skill
IDS_SEPARATOR = ", "  # between the ids of `differs_from`
REQUIRED = {"L": ("recurrence", "first_seen", "last_seen", "scope"), "I": ("scope",)}
REPEATABLE = {"provenance"}
TITLE_LIMIT = 72

_HEADING = re.compile(r"^## (\S+) \u00b7 (.*)$")
_ID = re.compile(r"^([A-Za-z]+)(\d+)$")
FIELD = re.compile(r"^- ([A-Za-z_][A-Za-z0-9_-]*):(?: (.*))?$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_POSITIVE = re.compile(r"[1-9]\d*")
# `differs_from`'s value: entry ids, comma and space between them ("L3, L10, I2")
_ID_LIST = "[LI][1-9][0-9]*(?:, [LI][1-9][0-9]*)*"
_DIFFERS = re.compile(_ID_LIST)
_MARKER_STARTS = ("<", "=", ">", "|")
_MARKER_RUNS = ("<" * 7, "=" * 7, ">" * 7, "|" * 7)
_LINK_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:")
# What markdown would take as more of the metadata list: a '-' item, or text indented enough to
# continue the last metadata item.
_LIST_CONTINUATION = re.compile(r"^(?: {0,3}-(?:[ \t]|$)| {2,}\S|[ ]*\t)")
# A '.' after these is an abbreviation, not the end of a sentence ("U.S. dollars", "e.g. Arial").
_ABBREVIATION = re.compile(r"(?:^|[\s(])(?:(?:[A-Za-z]\.)+[A-Za-z]|vs|cf|approx|incl|resp|Mr|Mrs|Ms|Dr|St)$")
# . ! or ? then a space and the next sentence's first character (or the end); or a CJK full stop.
_SENTENCE_END = re.compile(r"[.!?](?=\s+(\S)|$)|[\u3002\uff01\uff1f]")
_HEAD_STARTS = frozenset(("## ", "##"))  # a heading line's first three characters, or "##" alone
_LETTERS = frozenset(string.ascii_letters)
_OPENERS = "\"'([\u201c\u2018\u00ab\u00bf\u00a1"  # quotes, brackets, ¿ ¡ may open a sentence


@dataclass(frozen=True)
class FormatError:
    """One validation finding, printed as `path:line: message`."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass(frozen=True)
class Block:
    """One parsed block. `raw` is its exact source, trailing blank lines included."""

    id: str
    title: str
    fields: tuple[tuple[str, str], ...]
    body: str
    line: int
    start: int
    end: int
    raw: str

    @property
    def prefix(self) -> str:
        return self.id[0]

    @property
    def kind(self) -> str:
        return "learning" if self.prefix == "L" else "issue"

    @property
    def number(self) -> int:
        return int(self.id[1:])

    def get(self, key: str) -> str | None:
        for name, value in self.fields:
            if name == key:
                return value
        return None

    @property
    def scope(self) -> str:
        return " ".join((self.get("scope") or "").split())

    @property
    def recurrence(self) -> int:
        return int(self.get("recurrence") or 1)

    @property
    def provenance(self) -> list[str]:
        return [decode_value(v) for k, v in self.fields if k == "provenance"]

    @property
    def always(self) -> bool:
        """Whether the block carries `- applies: always`: it holds for every task of the skill."""
        return self.get("applies") == ALWAYS

    @property
    def differs(self) -> tuple[str, ...]:
        """The ids of `- differs_from:`: entries the caller said hold beside this one (not a conflict,
        not the same rule), as written."""
        return ids_of(self.get("differs_from"))


@dataclass(frozen=True)
class Parsed:
    blocks: list[Block]
    errors: list[FormatError]


# --- lines ----------------------------------------------------------------------------------------

def is_heading(line: str) -> bool:
    """Whether markdown reads `line` as an ATX heading."""
    return bool(ATX.match(line))


# --- values ---------------------------------------------------------------------------------------

def encode_value(text: str) -> str:
    """A provenance value as written: a double-quoted, single-line string (JSON escaping)."""
    return json.dumps(text, ensure_ascii=False)


def _plain_quoted(raw: str) -> bool:
    """A quoted value JSON reads as the text between its quotes: no escape, no inner quote, no
    control character (the usual provenance line, read without the JSON decoder)."""
    return (len(raw) > 1 and raw[0] == '"' and raw[-1] == '"' and "\\" not in raw and '"' not in raw[1:-1]
            and raw.isprintable())


def ids_of(value: str | None) -> tuple[str, ...]:
    """The ids a valid `differs_from` value names, in its order (none for no value)."""
    return tuple(value.split(IDS_SEPARATOR)) if value else ()


def id_order(entry_id: str) -> tuple[bool, int]:
    """Learnings before issues, each by number: L3, L10, I2."""
    return entry_id[0] != "L", int(entry_id[1:])


def decode_value(raw: str) -> str:
    if raw.startswith('"'):
        if _plain_quoted(raw):
            return raw[1:-1]
        try:
            value = json.loads(raw)
            if isinstance(value, str):
                return value
        except ValueError:
            pass
    return raw


def derive_title(body: str, limit: int = TITLE_LIMIT) -> str:
    """The first sentence of the body, cut at a word boundary to at most `limit` characters
    (the closing '…' included)."""
    first = " ".join(re.split(r"\n[ \t]*\n", body.strip(), maxsplit=1)[0].split())
    # A sentence ends at . ! or ? followed by a space and a capital (in any script), or at a CJK full
    # stop; a '.' that closes an abbreviation ("U.S. Dollars", "e.g. Arial") does not end it.
    sentence = first
    for match in _SENTENCE_END.finditer(first):
        after = match.group(1)
        if after and not (after.isupper() or after in _OPENERS):
            continue
        if match.group() == "." and _ABBREVIATION.search(first[: match.start()]):
            continue
        sentence = first[: match.end()]
        break
    sentence = sentence.rstrip(".\u3002").strip() or first
    if len(sentence) <= limit:
        return sentence
    room = limit - 1  # one character for the ellipsis
    cut = sentence[: room + 1]
    space = cut.rfind(" ")
    # Cut at the last space that fits; only one very long token (a URL, text without spaces such
    # as CJK) is cut inside.
    cut = cut[:space] if space >= room // 3 else sentence[:room]
    return (cut.rstrip(" ,;:-—–(") or sentence[:room]) + "…"


# --- reading --------------------------------------------------------------------------------------

def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()  # the empty string after the final newline is not a line
    return lines


def parse(text: str, path: str = "<text>", folder: str | None = None) -> Parsed:
    """Read a scope file into blocks and every format error found, with 1-based line numbers.

    `folder` ("learnings" or "issues") fixes which id prefix is allowed; None allows both.
    Blocks with errors are left out of `blocks`, so callers never see half-valid entries.
    """
    clean = _parse_clean(text, PREFIX.get(folder) if folder else None)
    return Parsed(clean, []) if clean is not None else parse_lines(text, path, folder)


def parse_lines(text: str, path: str = "<text>", folder: str | None = None) -> Parsed:
    """`parse` a line at a time, whatever the file looks like: for a caller that has already
    found the file is not made only of blocks as whetstone writes them (`clean_blocks`)."""
    want = PREFIX.get(folder) if folder else None
    errors: list[FormatError] = []
    lines = _lines(text)

    def err(line: int, message: str) -> None:
        errors.append(FormatError(path, line, message))

    in_conflict: set[int] = set()  # lines between a merge's <<<<<<< and >>>>>>> markers
    opened = None
    marked = any(run in text for run in _MARKER_RUNS)  # else no line can hold a marker
    for number, line in enumerate(lines if marked else (), 1):
        if line.startswith(_MARKER_STARTS) and CONFLICT_MARKER.match(line.rstrip("\r")):
            err(number, "unresolved merge conflict marker")
            if line.startswith("<"):
                opened = number
            elif line.startswith(">") and opened is not None:
                in_conflict.update(range(opened, number + 1))
                opened = None
    heads = [i for i, line in enumerate(lines) if line[:1] == "#" and line[:3] in _HEAD_STARTS]
    for i, line in enumerate(lines[: heads[0] if heads else len(lines)]):
        if i == 0 and line.startswith("\ufeff"):
            err(1, "the file starts with a byte-order mark (U+FEFF): save it as UTF-8 without one")
            break
        if marked and CONFLICT_MARKER.match(line.rstrip("\r")):
            continue  # reported above
        if line.strip():
            err(i + 1, "text before the first block (a block starts with '## L<n> · title')")
            break

    blocks: list[Block] = []
    seen: dict[str, int] = {}
    # where line i starts: the lengths of the lines before it, and their newlines
    offsets = list(accumulate(map(len, lines), initial=0)) if heads else []
    texts = [line.rstrip("\r") for line in lines] if "\r" in text else lines
    for h, head in enumerate(heads):
        stop = heads[h + 1] if h + 1 < len(heads) else len(lines)
        start_off = offsets[head] + head
        end_off = offsets[stop] + stop if stop < len(lines) else len(text)
        before = len(errors)
        block = _parse_block(texts[head:stop], head + 1, want, err)
        if block is None or len(errors) > before:
            continue
        bid, title, fields, body = block
        if bid in seen:
            if not (head + 1 in in_conflict and seen[bid] in in_conflict):  # two versions of one block
                err(head + 1, f"duplicate id {bid} (also at line {seen[bid]})")
            continue
        seen[bid] = head + 1
        blocks.append(_block(bid, title, fields, body, head + 1, start_off, end_off, text[start_off:end_off]))
    return Parsed(blocks, errors)


# A block as whetstone writes it, whole: its heading, its fields, one or more empty lines, and a body
# whose every line is empty or starts with a letter (no markdown can start there: nothing to check).
# Each field's value has no space at either end: what `parse` would strip it to.
_CLEAN_BLOCK = re.compile(r"## ([LI])([1-9][0-9]*) \u00b7 ([^\n]*)\n((?:- [A-Za-z_][A-Za-z0-9_-]*: \S(?:[^\n]*\S)?\n)+)"
                          r"\n+([A-Za-z][^\n]*\n(?:[A-Za-z][^\n]*\n|\n)*)")
_CLEAN_FIELD = re.compile(r"- ([A-Za-z_][A-Za-z0-9_-]*): ([^\n]*)\n")
_ALLOWED = {prefix: frozenset(keys) for prefix, keys in FIELDS.items()}


def _parse_clean(text: str, want: str | None) -> list[Block] | None:
    """The blocks of a file made only of such blocks, one regular expression match each instead of
    a pass per line (a build parses 100,000 of them), when their ids and fields hold no error;
    None for any other file, which `parse` then reads line by line (and finds the same blocks)."""
    found = _clean_matches(text, want)
    return None if found is None else [_block(bid, title, tuple(fields), body, line, at, stop, text[at:stop])
                                       for bid, title, fields, body, line, at, stop, _ in found]


def clean_blocks(text: str, folder: str | None = None) -> list[tuple] | None:
    """For a file `parse` reads one match a block (blocks as whetstone writes them, without an
    error), each block's (id, title, body, line, fields, provenance): each field's value by key (one
    each; provenance's, its last line) and the provenance lines decoded, as `Block.get` and `Block.provenance`
    give them; None for any other file. What a build needs of the file, without making its `Block`s."""
    found = _clean_matches(text, PREFIX.get(folder) if folder else None)
    return None if found is None else [
        (bid, title, body, line, values, tuple([decode_value(value) for key, value in fields if key == "provenance"]))
        for bid, title, fields, body, line, _, _, values in found]


def _clean_matches(text: str, want: str | None) -> list[tuple] | None:
    """(id, title, fields, body, line, start, end, field values) of each block, for `_parse_clean`
    and `clean_blocks`: one `_CLEAN_BLOCK` match a block, its fields checked in one pass
    (`_clean_fields`); None for a file that holds anything else."""
    if not text.endswith("\n") or "\r" in text or any(run in text for run in _MARKER_RUNS):
        return None
    found: list[tuple] = []
    seen: set[str] = set()
    at, line, end = 0, 1, len(text)
    match = _CLEAN_BLOCK.match
    while at < end:
        m = match(text, at)
        if m is None:
            return None
        prefix, digits, title, fields_text, body = m.groups()
        bid, title = prefix + digits, title.strip()
        if not title or (want and prefix != want) or bid in seen:
            return None
        seen.add(bid)
        fields = _CLEAN_FIELD.findall(fields_text)
        values = _clean_fields(prefix, fields)
        if values is None:
            return None
        stop = m.end()
        found.append((bid, title, fields, body.rstrip("\n"), line, at, stop, values))
        line += text.count("\n", at, stop)
        at = stop
    return found


def _clean_fields(prefix: str, fields: list[tuple[str, str]]) -> dict[str, str] | None:
    """The fields by key (each but provenance there once, so its one value) when `_check_fields`
    finds nothing wrong with them, in a few set and dict operations; else None."""
    values = dict(fields)
    if not _ALLOWED[prefix].issuperset(values):
        return None  # an unknown field
    provenance = [value for key, value in fields if key == "provenance"]
    if len(values) + max(len(provenance) - 1, 0) != len(fields):
        return None  # a field other than provenance twice
    if not all(key in values for key in REQUIRED[prefix]) or not values["scope"]:
        return None
    if values.get("applies", ALWAYS) != ALWAYS:
        return None
    if "differs_from" in values and not _DIFFERS.fullmatch(values["differs_from"]):
        return None
    if prefix == "L":
        first_seen, last_seen = values["first_seen"], values["last_seen"]
        if not (_POSITIVE.fullmatch(values["recurrence"]) and _is_date(first_seen) and _is_date(last_seen)
                and last_seen >= first_seen):
            return None
    return values if all(_is_json_string(value) for value in provenance if value.startswith('"')) else None


_new = object.__new__


def _block(bid: str, title: str, fields: tuple, body: str, line: int, start: int, end: int, raw: str) -> Block:
    """`Block(...)`, its fields set at once: a frozen dataclass sets each through
    object.__setattr__ (3.7 µs a block, a tenth of parsing a 100,000-entry store); the same block."""
    block = _new(Block)
    block.__dict__.update(id=bid, title=title, fields=fields, body=body, line=line, start=start, end=end, raw=raw)
    return block


def _parse_block(texts: list[str], first: int, want: str | None, err) -> tuple | None:
    """One block's lines (without their carriage returns) into (id, title, fields, body)."""
    match = _HEADING.match(texts[0])
    if not match:
        err(first, "malformed heading: expected '## L<n> · title' (with the middle dot ·)")
        return None
    bid, title = match.group(1), match.group(2).strip()
    id_match = _ID.match(bid)
    if not id_match or id_match.group(1) not in ("L", "I"):
        err(first, f"unknown id '{bid}': expected L<n> for a learning or I<n> for an issue")
        return None
    prefix, digits = id_match.groups()
    if digits.startswith("0"):
        err(first, f"malformed id '{bid}': the number must be a positive integer without leading zeros")
        return None
    if want and prefix != want:
        folder = FOLDER[want]
        err(first, f"unknown id prefix '{prefix}' in {folder}/: ids there are {want}<n>")
        return None
    if not title:
        err(first, f"{bid} has an empty title")

    fields = _fields(islice(texts, 1, None))
    i = 1 + len(fields)
    if i < len(texts) and texts[i].strip():
        line = first + i
        if CONFLICT_MARKER.match(texts[i]):
            return None  # a merge conflict in the metadata: the marker itself is the error reported
        if texts[i].startswith("-") or texts[i].startswith("*"):
            err(line, "malformed field: expected '- key: value'")
        elif not fields:
            err(line, f"{bid} has no metadata lines ('- key: value') after its heading")
        else:
            err(line, "no blank line before the body (markdown would fold the body into the metadata)")
        return None
    while i < len(texts) and not texts[i].strip():
        i += 1
    body_start = first + i
    body_lines = texts[i:]
    while body_lines and not body_lines[-1].strip():
        body_lines.pop()
    if body_lines and fields and _LIST_CONTINUATION.match(body_lines[0]):
        err(body_start, "the body starts like more metadata (a '-' item or indented text), so markdown "
                        "would fold it into the metadata list; start it with plain text")
    check_body(body_lines, body_start, err)
    if not body_lines:
        err(first, f"{bid} has an empty body")
    elif body_lines[0][:1] not in _LETTERS and all(_LINK_DEFINITION.match(line) or not line.strip()
                                                   for line in body_lines):  # (text is no link definition)
        err(body_start, f"{bid} has an empty body (link definitions alone show nothing)")

    _check_fields(prefix, bid, fields, first, err)
    return bid, title, tuple(fields), "\n".join(body_lines)


def _fields(lines: Iterable[str]) -> list[tuple[str, str]]:
    """The `- key: value` lines from the first, up to the first line that is not one."""
    fields = []
    for line in lines:
        match = FIELD.match(line)
        if match is None:
            break
        key, value = match.groups()
        fields.append((key, value.strip() if value else ""))
    return fields


def _check_fields(prefix: str, bid: str, fields: list[tuple[str, str]], first: int, err) -> None:
    allowed, seen = FIELDS[prefix], set()
    for offset, (key, value) in enumerate(fields, 1):
        line = first + offset
        if key not in allowed:
            kind = "a learning" if prefix == "L" else "an issue"
            err(line, f"unknown field '{key}' for {kind} (allowed: {', '.join(allowed)})")
            continue
        if key in seen and key not in REPEATABLE:
            err(line, f"field '{key}' appears twice")
            continue
        seen.add(key)
        if key == "recurrence" and not _POSITIVE.fullmatch(value):
            err(line, f"recurrence must be a positive integer, got '{value}'")
        elif key in ("first_seen", "last_seen") and not _is_date(value):
            err(line, f"{key} must be a date (YYYY-MM-DD), got '{value}'")
        elif key == "scope" and not value:
            err(line, "scope is empty")
        elif key == "applies" and value != ALWAYS:
            err(line, f"applies takes only '{ALWAYS}' (a rule for every task), got '{value}'")
        elif key == "differs_from" and not _DIFFERS.fullmatch(value):
            err(line, f"differs_from takes entry ids separated by ', ' (e.g. 'L3, I2'), got '{value}'")
        elif key == "provenance" and value.startswith('"') and not _is_json_string(value):
            err(line, "provenance has an unterminated or malformed quoted string")
    for key in REQUIRED[prefix]:
        if key not in seen:
            err(first, f"{bid} is missing the field '{key}'")
    values = dict(fields)
    first_seen, last_seen = values.get("first_seen"), values.get("last_seen")
    if first_seen and last_seen and _is_date(first_seen) and _is_date(last_seen) and last_seen < first_seen:
        err(first, f"{bid}: last_seen {last_seen} is before first_seen {first_seen}")


@lru_cache(maxsize=4096)  # a store's dates repeat: a few hundred days
def _is_date(value: str) -> bool:
    if not _DATE.match(value):
        return False
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def _is_json_string(value: str) -> bool:
    if _plain_quoted(value):
        return True
    try:
        return isinstance(json.loads(value), str)
    except ValueError:
        return False
