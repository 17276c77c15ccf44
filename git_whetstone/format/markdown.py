"""The second opinion on a scope file: how a markdown renderer (mistune) reads it.

The line reader in `blocks` is what every read uses; this is what the pre-commit hook, `git
whetstone validate` and a pack's import add on top, so a block that a renderer would read
differently (a heading it does not see, metadata it folds into a paragraph) is refused even when
the line reader accepts it.
"""
from __future__ import annotations

from .blocks import DOT, FormatError, parse


def markdown_view(text: str) -> list[tuple[str, list[str], bool]]:
    """How mistune reads a scope file: per level-2 heading, its text, the items of the list that
    follows it (as plain text), and whether anything follows the list (a body)."""
    import mistune

    tokens = [t for t in mistune.create_markdown(renderer=None)(text) if t["type"] != "blank_line"]
    view: list[tuple[str, list[str], bool]] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token["type"] != "heading" or token["attrs"]["level"] != 2:
            continue
        items: list[str] = []
        if i < len(tokens) and tokens[i]["type"] == "list":
            items = [_plain(item) for item in tokens[i]["children"]]
            i += 1
        has_body = i < len(tokens) and not (tokens[i]["type"] == "heading" and tokens[i]["attrs"]["level"] == 2)
        view.append((_plain(token), items, has_body))
    return view


def _plain(token: dict) -> str:
    if token["type"] == "softbreak":
        return "\n"
    if "children" in token:
        return "".join(_plain(child) for child in token["children"])
    return token.get("raw", "")


def validate(text: str, path: str = "<text>", folder: str | None = None) -> list[FormatError]:
    """Every format error in a scope file: the line reader's findings, then any block that a
    markdown renderer would read differently from the way whetstone reads it."""
    parsed = parse(text, path, folder)
    if parsed.errors:
        return parsed.errors
    view = markdown_view(text)
    if len(view) != len(parsed.blocks):
        return [FormatError(path, 1, f"markdown sees {len(view)} blocks where whetstone reads {len(parsed.blocks)}")]
    errors = []
    for block, (heading, items, has_body) in zip(parsed.blocks, view):
        expected = [f"{k}: {v}" if v else f"{k}:" for k, v in block.fields]
        if heading.strip() != f"{block.id} {DOT} {block.title}" and not heading.startswith(block.id):
            errors.append(FormatError(path, block.line, f"markdown reads the heading of {block.id} as '{heading}'"))
        elif [i.split(":", 1)[0] for i in items] != [k for k, _ in block.fields] or any(
                "\n" in item for item in items):
            errors.append(FormatError(path, block.line + 1,
                                      f"markdown reads the metadata of {block.id} differently: {items!r} vs {expected!r}"))
        elif not has_body:
            errors.append(FormatError(path, block.line, f"markdown sees no body for {block.id}"))
    return errors
