"""Writing the block format: a block's canonical text, and a scope file's text with one block added,
swapped or taken out, or one block's metadata changed in place. Everything not changed (other
blocks, the body, spacing, a file's "\r\n" line endings) stays byte for byte.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from .blocks import ALWAYS, DOT, FIELD, IDS_SEPARATOR, Block, encode_value, id_order


def render(bid: str, title: str, fields: list[tuple[str, str]] | tuple, body: str) -> str:
    """The canonical text of one block, ending with a single newline."""
    lines = [f"## {bid} {DOT} {title}"]
    lines += [f"- {key}: {value}" for key, value in fields]
    return "\n".join(lines) + "\n\n" + body + "\n"


# Files are written with "\n"; a hand-edited file that uses "\r\n" (an editor or git's autocrlf
# on Windows) keeps it: the blocks a tool write adds or changes take the file's line ending.

def newline_of(text: str) -> str:
    """The line ending `text` uses, judged by its first line: "\r\n" or "\n"."""
    end = text.find("\n")
    return "\r\n" if end > 0 and text[end - 1] == "\r" else "\n"


def _in_style(block_text: str, newline: str) -> str:
    text = block_text.replace("\r\n", "\n")
    return text if newline == "\n" else text.replace("\n", newline)


def append(text: str, block_text: str) -> str:
    """`text` with a new block added at the end, one blank line after what was there."""
    if not text.strip():
        return block_text
    newline = newline_of(text)
    base = text if text.endswith("\n") else text + newline
    if not base[:-1].rstrip(" \t\r").endswith("\n"):  # it ends in a blank line already (no regex: a long file)
        base += newline
    return base + _in_style(block_text, newline)


def append_all(text: str, block_texts: Iterable[str]) -> str:
    """`append` of each block in turn, the text copied once: appending one at a time copies the
    growing text (and strips a copy of it) on each append, quadratic for a file that gains
    thousands of blocks. Once the text's first line is complete its line ending is fixed, and
    whether a blank line goes before the next block depends only on the last block added (it
    holds more than blank space); anything else takes the one-block `append` on the whole text."""
    parts = [text]
    newline = None  # the text's line ending, once its first line is complete
    for block_text in block_texts:
        tail = parts[-1]
        if newline is None or not tail.strip():
            parts = [append("".join(parts), block_text)]
            newline = newline_of(parts[0]) if "\n" in parts[0] else None
            continue
        base = tail if tail.endswith("\n") else tail + newline
        gap = "" if base[:-1].rstrip(" \t\r").endswith("\n") else newline  # (the tail ends the text)
        parts.append(base[len(tail):] + gap + _in_style(block_text, newline))
    return parts[0] if len(parts) == 1 else "".join(parts)


def replace(text: str, block: Block, block_text: str) -> str:
    """`text` with one block's source swapped; the separator after it is kept as it was."""
    newline = newline_of(block.raw)
    trailing = block.raw[len(block.raw.rstrip("\r\n")):] or newline
    new = _in_style(block_text, newline).rstrip("\r\n")
    return text[: block.start] + new + trailing + text[block.end:]


def remove(text: str, block: Block) -> str:
    """`text` without one block. A file left with no block becomes empty."""
    out = text[: block.start] + text[block.end:]
    if not out.strip():
        return ""
    if block.end < len(text):
        return out
    # The last block went: the blank lines that separated it go too, the final newline stays.
    return re.sub(r"(?:\r?\n[ \t]*)+\Z", "", out) + newline_of(text)


def with_always(block: Block, always: bool, text: str | None = None) -> str:
    """The block's source (or `text`, that source after `update_fields`) with `- applies: always`
    added after its scope line, or taken out; every other line stays as written, and a block
    already marked as asked comes back as it is (a hand-spaced applies line too)."""
    if always == block.always:
        return block.raw if text is None else text
    return _with_field(block, "applies", ALWAYS if always else "", ("scope",), text)


def with_differs(block: Block, ids: Iterable[str], text: str | None = None) -> str:
    """The block's source (or `text`, that source after `update_fields` or `with_always`) with its
    `- differs_from:` line naming exactly `ids`, each once, learnings before issues, each by number
    (`L3, L10, I2`); the line goes after `applies` (else after `scope`) when new, and out when `ids`
    is empty. Every other line stays as written."""
    value = IDS_SEPARATOR.join(sorted(set(ids), key=id_order))
    return _with_field(block, "differs_from", value, ("scope", "applies"), text)


def _with_field(block: Block, key: str, value: str, after: tuple[str, ...], text: str | None) -> str:
    """The block's source (or `text`) with its one `key` line set to `value`, or taken out when
    `value` is empty; a new line goes after the last of the keys `after` (else after the last
    metadata line). The metadata lines are read off the text itself, since `update_fields` may
    have added some; the line written takes the heading's line ending (a CRLF file keeps it)."""
    lines = (block.raw if text is None else text).split("\n")
    fields = 1  # the metadata lines run from after the heading to the first line that is not one
    while fields < len(lines) and FIELD.match(lines[fields].rstrip("\r")):
        fields += 1
    keys = [FIELD.match(line.rstrip("\r")).group(1) for line in lines[1:fields]]
    cr = "\r" if lines[0].endswith("\r") else ""
    if key in keys:
        at = keys.index(key) + 1
        if value:
            lines[at] = f"- {key}: {value}{cr}"
        else:
            del lines[at]
    elif value:
        at = max((o for o, k in enumerate(keys, 1) if k in after), default=len(keys))
        lines.insert(at + 1, f"- {key}: {value}{cr}")
    return "\n".join(lines)


def update_fields(block: Block, changes: dict[str, str], add_provenance: str | list[str] | None = None) -> str:
    """The block's source with some metadata values changed in place and maybe provenance lines
    added after the last one; everything else, body and spacing included, stays as written."""
    lines = block.raw.split("\n")

    def cr(line: str) -> str:  # a CRLF file keeps its line ending on the lines written here
        return "\r" if line.endswith("\r") else ""

    for offset, (key, _) in enumerate(block.fields, 1):
        if key in changes:
            lines[offset] = f"- {key}: {changes[key]}{cr(lines[offset])}"
    if add_provenance is not None:
        last = max((o for o, (k, _) in enumerate(block.fields, 1) if k == "provenance"),
                   default=len(block.fields))
        added = [add_provenance] if isinstance(add_provenance, str) else add_provenance
        lines[last + 1:last + 1] = [f"- provenance: {encode_value(p)}{cr(lines[last])}" for p in added]
    return "\n".join(lines)
