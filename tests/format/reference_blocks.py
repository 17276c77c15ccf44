"""The block reader as it was before it was made faster (kept verbatim, for tests/format/test_blocks.py to
hold the fast reader to): every line as an (offset, text) pair, each block's carriage returns
stripped on its own, every body line through every pattern, every date parsed again."""
from __future__ import annotations

import datetime as dt
import re

from git_whetstone.format.blocks import (_DATE, FIELD, _HEADING, _ID, _LINK_DEFINITION, _LIST_CONTINUATION,
                                         _MARKER_RUNS, _MARKER_STARTS, _POSITIVE, ALWAYS, FIELDS, FOLDER, PREFIX,
                                         REPEATABLE, REQUIRED, Block, FormatError, Parsed, _is_json_string)
from git_whetstone.format.body import ATX as _ATX, CONFLICT_MARKER as _CONFLICT_MARKER, CONTAINER as _CONTAINER
from git_whetstone.format.body import FENCE as _FENCE, INDENTED as _INDENTED, SETEXT as _SETEXT
from git_whetstone.format.body import closes as _closes, raw_html as _raw_html


def _lines_with_offsets(text: str) -> list[tuple[int, str]]:
    out, pos = [], 0
    for line in text.split("\n"):
        out.append((pos, line))
        pos += len(line) + 1
    if text.endswith("\n"):
        out.pop()  # the empty string after the final newline is not a line
    return out


def parse(text: str, path: str = "<text>", folder: str | None = None) -> Parsed:
    errors: list[FormatError] = []
    lines = _lines_with_offsets(text)
    want = PREFIX.get(folder) if folder else None

    def err(line: int, message: str) -> None:
        errors.append(FormatError(path, line, message))

    in_conflict: set[int] = set()
    opened = None
    marked = any(run in text for run in _MARKER_RUNS)
    for number, (_, line) in enumerate(lines if marked else (), 1):
        if line.startswith(_MARKER_STARTS) and _CONFLICT_MARKER.match(line.rstrip("\r")):
            err(number, "unresolved merge conflict marker")
            if line.startswith("<"):
                opened = number
            elif line.startswith(">") and opened is not None:
                in_conflict.update(range(opened, number + 1))
                opened = None
    heads = [i for i, (_, line) in enumerate(lines) if line.startswith("## ") or line == "##"]
    for i, (_, line) in enumerate(lines[: heads[0] if heads else len(lines)]):
        if i == 0 and line.startswith("\ufeff"):
            err(1, "the file starts with a byte-order mark (U+FEFF): save it as UTF-8 without one")
            break
        if marked and _CONFLICT_MARKER.match(line.rstrip("\r")):
            continue
        if line.strip():
            err(i + 1, "text before the first block (a block starts with '## L<n> · title')")
            break

    blocks: list[Block] = []
    seen: dict[str, int] = {}
    for h, head in enumerate(heads):
        stop = heads[h + 1] if h + 1 < len(heads) else len(lines)
        start_off = lines[head][0]
        end_off = lines[stop][0] if stop < len(lines) else len(text)
        before = len(errors)
        block = _parse_block(lines[head:stop], head + 1, want, err)
        if block is None or len(errors) > before:
            continue
        bid, title, fields, body = block
        if bid in seen:
            if not (head + 1 in in_conflict and seen[bid] in in_conflict):
                err(head + 1, f"duplicate id {bid} (also at line {seen[bid]})")
            continue
        seen[bid] = head + 1
        blocks.append(Block(bid, title, fields, body, head + 1, start_off, end_off, text[start_off:end_off]))
    return Parsed(blocks, errors)


def _parse_block(lines: list[tuple[int, str]], first: int, want: str | None, err) -> tuple | None:
    texts = [line.rstrip("\r") for _, line in lines]
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

    fields: list[tuple[str, str]] = []
    i = 1
    while i < len(texts):
        match = FIELD.match(texts[i])
        if not match:
            break
        fields.append((match.group(1), (match.group(2) or "").strip()))
        i += 1
    if i < len(texts) and texts[i].strip():
        line = first + i
        if _CONFLICT_MARKER.match(texts[i]):
            return None
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
    _check_body(body_lines, body_start, err)
    if not body_lines:
        err(first, f"{bid} has an empty body")
    elif all(_LINK_DEFINITION.match(line) or not line.strip() for line in body_lines):
        err(body_start, f"{bid} has an empty body (link definitions alone show nothing)")

    _check_fields(prefix, bid, fields, first, err)
    return bid, title, tuple(fields), "\n".join(body_lines)


def _check_body(lines: list[str], start: int, err) -> None:
    paragraph = container = False
    region: tuple[str, str, int] | None = None
    for j, line in enumerate(lines):
        if region:
            if _closes(region[1], line):
                region = None
            continue
        if _ATX.match(line):
            err(start + j, "a heading inside a body (start a new block with '## L<n> · title')")
        elif paragraph and _SETEXT.match(line) and not _CONFLICT_MARKER.match(line):
            err(start + j, "a heading inside a body (a line of '=' or '-' right under text makes "
                           "that text a heading; leave a blank line before it)")
        fence, html = _FENCE.match(line), _raw_html(line)
        if fence:
            region, paragraph = ("a code fence", fence.group(1), start + j), False
        elif html and html[1] not in line[html[0]:].lower():
            region, paragraph = ("raw HTML", html[1], start + j), False
        elif not line.strip():
            paragraph = container = False
        elif not paragraph and not container:
            opener = _CONTAINER.match(line)
            container = bool(opener and line[opener.end():].strip())
            paragraph = not opener and not _INDENTED.match(line)
    if region:
        what, closer, line = region
        err(line, f"{what} that is never closed (markdown would read the rest of the file into it); "
                  f"close it with {closer}")


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
        elif key == "differs_from" and not re.fullmatch(r"[LI][1-9][0-9]*(?:, [LI][1-9][0-9]*)*", value):
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


def _is_date(value: str) -> bool:
    if not _DATE.match(value):
        return False
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True
