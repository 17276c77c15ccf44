"""Writing files so that readers never see half of one, and nothing is lost to a crash."""
from __future__ import annotations

import os
from pathlib import Path


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write through a temporary file and rename, so readers never see half a file (mode 0644).
    The file is flushed to disk before the rename and its directory after it: on filesystems that
    keep a rename in memory a while (ext4 without auto_da_alloc, XFS), a power cut could otherwise
    lose a write that already looked committed."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "wb") as handle:
            handle.write(raw)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:  # a full disk, say: the file keeps its old content, and no temporary is left
        tmp.unlink(missing_ok=True)
        raise
    sync_directory(path.parent)


def write_many_atomic(changes: list[tuple[Path, bytes | None]]) -> None:
    """Put many files in place (None: delete), in the order given, each as `write_atomic` would but
    flushed to disk all at once: every temporary file is written, the filesystem synced once, then
    each renamed in order, and every folder synced at the end (a compact rewrites thousands of
    files, and one fsync each took seconds). If a temporary cannot be written, none is renamed."""
    temps: list[tuple[Path, Path | None]] = []
    try:
        for path, raw in changes:
            if raw is None:
                temps.append((path, None))
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            temps.append((path, tmp))
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), "wb") as handle:
                handle.write(raw)
            os.chmod(tmp, 0o644)
        os.sync()
    except BaseException:
        for _, tmp in temps:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
        raise
    for at, (path, tmp) in enumerate(temps):
        try:
            if tmp is None:
                path.unlink(missing_ok=True)
            else:
                os.replace(tmp, path)
        except BaseException:
            for _, left in temps[at:]:
                if left is not None:
                    left.unlink(missing_ok=True)
            raise
    for folder in dict.fromkeys(path.parent for path, _ in changes):
        sync_directory(folder)


def sync_directory(folder: Path) -> None:
    """Make a rename or a new name in `folder` durable (where the system lets a directory be
    opened and synced; elsewhere it is left to the filesystem)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory: nothing more can be done there
    finally:
        os.close(fd)


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
