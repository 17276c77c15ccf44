"""next_ids.json (SPEC §3): `{"learning": N, "issue": M}`, the next number of each kind to mint.

Read strictly (two positive integers, nothing else counts), written as one line, and merged to
the per-key maximum when two machines both minted.
"""
from __future__ import annotations

import json


def ids_text(counters: dict[str, int]) -> str:
    """next_ids.json (or the local high-water mark) as written: one line of JSON."""
    return json.dumps({"learning": counters["learning"], "issue": counters["issue"]}) + "\n"


def read_counters(text: str | bytes | None) -> dict[str, int] | None:
    """The counters `text` holds, or None when it is not a valid next_ids.json."""
    try:
        data = json.loads(text or "")
    except ValueError:
        return None
    if isinstance(data, dict) and all(isinstance(data.get(k), int) and not isinstance(data.get(k), bool)
                                       and data[k] >= 1 for k in ("learning", "issue")):
        return {"learning": data["learning"], "issue": data["issue"]}
    return None


def merge_ids(base: str, ours: str, theirs: str) -> str | None:
    """next_ids.json three ways: the per-key maximum of the sides that can be read; None when
    neither can."""
    valid = [found for found in (read_counters(ours), read_counters(theirs)) if found]
    if not valid:
        return None
    return ids_text({k: max(f[k] for f in valid) for k in ("learning", "issue")})
