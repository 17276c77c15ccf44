"""Writing files so that readers never see half of one, and nothing is lost to a crash."""
from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write through a temporary file and rename, so readers never see half a file (mode 0644)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "wb") as handle:
        handle.write(raw)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def read_or_none(path: Path) -> bytes | None:
    """A file's bytes, or None when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def remove_tree(path: Path) -> None:
    """Remove a directory and everything in it, quietly (a private working directory)."""
    import shutil  # here: only creation and cloning need it, not every read
    shutil.rmtree(path, ignore_errors=True)
