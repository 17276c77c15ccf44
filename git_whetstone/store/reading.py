"""Reading a store's scope files into entries (SPEC §4: "a file that fails validation is served
from its last committed version, with a warning"). No index, no embedding: the markdown alone.
"""
from __future__ import annotations

from ..format.blocks import clean_blocks, parse, parse_lines
from ..format.entry import Entry, clean_entries, entries_of
from ..format.layout import KIND_FOLDER
from ..git.tree import committed_text
from .store import Store


def read_file(store: Store, rel: str) -> tuple[list[Entry], str | None]:
    """One scope file's entries and the warning met reading it (None: none). A file that fails
    validation is served from its last committed version, if that one is valid."""
    folder = rel.split("/", 1)[0]
    try:
        text = (store.path / rel).read_bytes().decode("utf-8")
        found = clean_blocks(text, folder)  # a file as whetstone writes it: its entries without its Blocks
        if found is not None:
            return clean_entries(found, rel), None
        parsed = parse_lines(text, rel, folder)
        problem = str(parsed.errors[0]) if parsed.errors else None
    except UnicodeDecodeError:
        parsed, problem = None, f"{rel}:1: not valid UTF-8"
    except FileNotFoundError:
        return [], None
    if problem is None and parsed is not None:
        return entries_of(parsed.blocks, rel), None
    committed = committed_text(store.path, rel)
    fallback = parse(committed, rel, folder) if committed is not None else None
    if fallback is not None and not fallback.errors:
        return entries_of(fallback.blocks, rel), f"{problem} (serving the last committed version of {rel})"
    return [], f"{problem} (no valid committed version of {rel}; its entries are left out)"


def store_entries(store: Store) -> tuple[list[Entry], list[str]]:
    """Every valid entry of a store in file order, read from the markdown, and the warnings met."""
    found, warnings = [], []
    for kind in KIND_FOLDER:
        for path in store.scope_files(kind):
            rows, warning = read_file(store, store.rel(path))
            found += rows
            if warning:
                warnings.append(warning)
    return found, warnings
