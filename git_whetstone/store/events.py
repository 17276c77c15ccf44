"""events.jsonl: one JSON object per recall, capture and revise, the telemetry `metrics` reads.

Git-ignored and append-only. Each event is written with a single O_APPEND write, so concurrent
writers interleave whole lines; a torn last line (a crash mid-write) is skipped when reading.
"""
from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any, Iterator

FILE = "events.jsonl"


def new_run_id(day: dt.date) -> str:
    """A run id ties a recall to the captures and revisions that follow it."""
    return f"r-{day.isoformat()}-{os.urandom(4).hex()}"


def append(store_path: Path, event: str, **fields: Any) -> bool:
    """Add one event. Telemetry never fails the call it records: False when it could not be
    written (a read-only store, a full disk)."""
    if not (store_path / ".git").exists():
        return False
    record = {"ts": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "event": event, **fields}
    line = (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8", "replace")
    try:
        fd = os.open(store_path / FILE, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        return False
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line  # a line torn by a killed writer must not swallow this one
        os.write(fd, line)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def read(store_path: Path) -> Iterator[dict[str, Any]]:
    try:
        handle = open(store_path / FILE, "rb")
    except FileNotFoundError:
        return
    with handle:
        for raw in handle:
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record
