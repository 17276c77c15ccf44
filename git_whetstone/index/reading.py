"""Reading a scope file into entries, as recall sees it (SPEC §4: "a file that fails validation is
served from its last committed version, with a warning").
"""
from __future__ import annotations

from ..format.layout import KIND_FOLDER
from ..git.tree import committed_text
from ..store.store import Store
from .records import Entry, clean_entries, entries_of


def read_file(store: Store, rel: str) -> tuple[list[Entry], str | None]:
    """Parse one scope file; if it fails validation, serve its last committed version instead."""
    from ..format.blocks import clean_blocks, parse, parse_lines  # here: a recall from a fresh index parses nothing and need not load it

    folder = rel.split("/", 1)[0]
    try:
        text = (store.path / rel).read_bytes().decode("utf-8")
        found = clean_blocks(text, folder)  # a file as whetstone writes it: its entries without its Blocks
        if found is not None:
            return clean_entries(found, rel), None
        parsed = parse_lines(text, rel, folder)  # (not clean: parse would try that again)
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
    """Every valid entry of a store in file order, read from the markdown (no index, no
    embedding), and the warnings met on the way."""
    found, warnings = [], []
    for kind in KIND_FOLDER:
        for path in store.scope_files(kind):
            rows, warning = read_file(store, store.rel(path))
            found += rows
            if warning:
                warnings.append(warning)
    return found, warnings
