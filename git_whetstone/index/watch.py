"""Which scope files changed since the last look, without a stat of every file (Linux inotify).

A long-lived process (the MCP server) checks a store's freshness before every call. Stat-ing every
scope file costs ~4 µs a file, 40 ms for a store of 100,000 entries in 10,000 files, more than the
recall itself. The kernel already knows what changed: an inotify watch on `learnings/` and
`issues/` queues one event per change (an editor saving in place, a rename, git checking a file
out, a delete), synchronously with the change, so a read right after a write always sees it.

`Watch.changes()` returns the names that changed since the last call, or None when it cannot say
(the queue overflowed, a folder was deleted, moved or replaced): the caller then scans everything
and starts a new watch. Elsewhere than Linux `Watch.start` returns None and callers scan as before.
Loaded only by a process that checks the same store a second time: a CLI call never imports ctypes.
"""
from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys
from pathlib import Path

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF, IN_UNMOUNT, IN_Q_OVERFLOW, IN_IGNORED = 0x400, 0x800, 0x2000, 0x4000, 0x8000
IN_ONLYDIR, IN_NONBLOCK, IN_CLOEXEC = 0x01000000, 0o4000, 0o2000000
_CHANGE = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
_LOST = IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_Q_OVERFLOW | IN_IGNORED
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len

_libc = None


def _inotify():
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        for name in ("inotify_init1", "inotify_add_watch"):
            if not hasattr(libc, name):
                raise OSError(errno.ENOSYS, f"{name} is not available")
        libc.inotify_add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        _libc = libc
    return _libc


class Watch:
    """An inotify watch on some folders of one store; `changes()` drains what happened since."""

    def __init__(self, fd: int, folders: dict[int, str]) -> None:
        self.fd = fd
        self.folders = folders  # watch descriptor -> folder name relative to the store

    @classmethod
    def start(cls, root: Path, folders: tuple[str, ...]) -> "Watch | None":
        """Watch `folders` (names under `root`); None when any is missing or inotify is unavailable
        (not Linux, out of watches or descriptors)."""
        if not sys.platform.startswith("linux"):
            return None
        try:
            libc = _inotify()
        except OSError:
            return None
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            return None
        watched: dict[int, str] = {}
        for folder in folders:
            wd = libc.inotify_add_watch(fd, os.fsencode(root / folder), _CHANGE | _LOST | IN_ONLYDIR)
            if wd < 0:
                os.close(fd)
                return None
            watched[wd] = folder
        return cls(fd, watched)

    def changes(self) -> set[str] | None:
        """`folder/name` of every entry that changed since the last call (empty: nothing did), or
        None when the watch lost track and everything must be scanned."""
        if self.fd < 0:
            return None
        names: set[str] = set()
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return names
            except OSError:
                self.close()
                return None
            at = 0
            while at < len(data):
                wd, mask, _, size = _HEADER.unpack_from(data, at)
                name = data[at + _HEADER.size: at + _HEADER.size + size].rstrip(b"\0")
                at += _HEADER.size + size
                if mask & _LOST or wd not in self.folders:
                    self.close()
                    return None
                if name:
                    names.add(f"{self.folders[wd]}/{os.fsdecode(name)}")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
