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

Every `Watch` of a process shares one inotify instance: Linux allows a user ~128 instances
(`max_user_instances`) but tens of thousands of watches, and a server with a hundred skills, each
recall checking its store and the global layer, would run out of instances by itself (then every
check falls back to stat-ing every file). Each `Watch` keeps its own watch descriptors; whichever
`Watch` drains the instance hands each event to the watches owning its descriptor, which keep it
until they are asked. An overflow of the shared queue makes every watch say None once; a lost
folder only the watches of that folder. A forked child starts without the parent's instance.
"""
from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys
import threading
from pathlib import Path

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF, IN_UNMOUNT, IN_Q_OVERFLOW, IN_IGNORED = 0x400, 0x800, 0x2000, 0x4000, 0x8000
IN_ONLYDIR, IN_NONBLOCK, IN_CLOEXEC = 0x01000000, 0o4000, 0o2000000
_CHANGE = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
_LOST = IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT | IN_Q_OVERFLOW | IN_IGNORED
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len
MOST_HELD = 65536  # names a watch keeps for a later call before it gives up and says None (a rescan)

_libc = None


def _inotify():
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        for name in ("inotify_init1", "inotify_add_watch", "inotify_rm_watch"):
            if not hasattr(libc, name):
                raise OSError(errno.ENOSYS, f"{name} is not available")
        libc.inotify_add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        libc.inotify_rm_watch.argtypes = (ctypes.c_int, ctypes.c_int)
        _libc = libc
    return _libc


class _Inbox:
    """What one `Watch` has been handed and not yet asked for. The process's table holds these, not
    the watches, so a watch nobody holds any more is still collected (and its descriptors freed)."""

    __slots__ = ("folders", "names", "lost", "closed", "instance")

    def __init__(self, folders: dict[int, str], instance: int) -> None:
        self.folders = folders  # watch descriptor -> folder name relative to the store
        self.names: set[str] = set()
        self.lost = False
        self.closed = False
        self.instance = instance  # which of the process's instances its descriptors belong to


# The process's one inotify instance and who owns its watch descriptors; all under _lock.
_lock = threading.Lock()
_fd = -1
_instance = 0  # counts the instances this process opened (a watch of an earlier one is over)
_owners: dict[int, list[_Inbox]] = {}  # watch descriptor -> the inboxes of the watches on it
_dropped: list[_Inbox] = []  # watches collected without close(): released at the next call


class Watch:
    """An inotify watch on some folders of one store; `changes()` drains what happened since."""

    def __init__(self, inbox: _Inbox) -> None:
        self._inbox = inbox

    @property
    def folders(self) -> dict[int, str]:
        return self._inbox.folders

    @property
    def closed(self) -> bool:
        return self._inbox.closed

    @classmethod
    def start(cls, root: Path, folders: tuple[str, ...]) -> "Watch | None":
        """Watch `folders` (names under `root`); None when any is missing or inotify is unavailable
        (not Linux, out of instances, watches or descriptors)."""
        if not sys.platform.startswith("linux"):
            return None
        try:
            libc = _inotify()
        except OSError:
            return None
        global _fd, _instance
        with _lock:
            _release_dropped()
            if _fd >= 0:
                _drain()  # what is queued happened before this watch: it goes to the others
            if _fd < 0:  # the first watch, or the instance failed: a new one
                fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
                if fd < 0:
                    return None
                _fd, _instance = fd, _instance + 1
            inbox = _Inbox({}, _instance)
            for folder in folders:
                wd = libc.inotify_add_watch(_fd, os.fsencode(root / folder), _CHANGE | _LOST | IN_ONLYDIR)
                if wd < 0:
                    _release(inbox)
                    return None
                inbox.folders[wd] = folder
                _owners.setdefault(wd, []).append(inbox)
            return cls(inbox)

    def changes(self) -> set[str] | None:
        """`folder/name` of every entry that changed since the last call (empty: nothing did), or
        None when the watch lost track and everything must be scanned (it is then closed)."""
        inbox = self._inbox
        with _lock:
            if inbox.closed:
                return None
            if inbox.instance == _instance and not inbox.lost:
                _release_dropped()
                _drain()
            if inbox.lost or inbox.instance != _instance:
                _release(inbox)
                return None
            names, inbox.names = inbox.names, set()
            return names

    def close(self) -> None:
        """Stop watching: this watch's descriptors are removed, the process's instance stays."""
        with _lock:
            _release_dropped()
            _release(self._inbox)

    def __del__(self) -> None:
        inbox = getattr(self, "_inbox", None)
        dropped = _dropped  # (None while the interpreter tears this module down: nothing left to release)
        if inbox is not None and not inbox.closed and dropped is not None:
            dropped.append(inbox)  # not here: a collection may run while this module holds the lock


def _drain() -> None:
    """Read every queued event and hand it to its owners; the instance failing (closed under us)
    makes every watch lose track, and the next start opens a new one."""
    global _fd
    while True:
        try:
            data = os.read(_fd, 65536)
        except BlockingIOError:
            return
        except OSError as exc:
            if exc.errno != errno.EBADF:
                os.close(_fd)
            _fd = -1
            _lose_all()
            return
        _dispatch(data)


def _dispatch(data: bytes) -> None:
    """Hand the events in `data` (as read from the instance) to the watches owning their
    descriptors; events of a descriptor no watch owns (removed, late) are dropped."""
    at = 0
    while at < len(data):
        wd, mask, _, size = _HEADER.unpack_from(data, at)
        name = data[at + _HEADER.size: at + _HEADER.size + size].rstrip(b"\0")
        at += _HEADER.size + size
        if mask & IN_Q_OVERFLOW:
            for inboxes in _owners.values():
                for inbox in inboxes:
                    inbox.lost = True
            continue
        inboxes = _owners.get(wd)
        if not inboxes:
            continue
        if mask & _LOST:
            for inbox in inboxes:
                inbox.lost = True
        elif name:
            text = os.fsdecode(name)
            for inbox in inboxes:
                if not inbox.lost:
                    inbox.names.add(f"{inbox.folders[wd]}/{text}")
                    if len(inbox.names) > MOST_HELD:
                        inbox.lost, inbox.names = True, set()


def _release(inbox: _Inbox) -> None:
    """Close `inbox`'s watch: a descriptor no other watch owns is removed from the instance."""
    if inbox.closed:
        return
    inbox.closed, inbox.names = True, set()
    if inbox.instance != _instance or _fd < 0:
        return  # its instance is gone (a forked child, a failed one): nothing to remove
    for wd in inbox.folders:
        inboxes = _owners.get(wd)
        if inboxes is None or inbox not in inboxes:
            continue
        inboxes.remove(inbox)
        if not inboxes:
            del _owners[wd]
            _libc.inotify_rm_watch(_fd, wd)  # (fails harmlessly when the kernel removed it already)


def _release_dropped() -> None:
    while _dropped:
        _release(_dropped.pop())


def _lose_all() -> None:
    for inboxes in _owners.values():
        for inbox in inboxes:
            inbox.lost = True
    _owners.clear()


def _forked() -> None:
    """In a forked child (build's workers): the parent's instance is the parent's. Its watches here
    lose track; a watch started here opens the child's own instance."""
    global _lock, _fd, _instance
    _lock = threading.Lock()
    if _fd >= 0:
        try:
            os.close(_fd)
        except OSError:
            pass
    _fd, _instance = -1, _instance + 1
    _lose_all()
    _dropped.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)
