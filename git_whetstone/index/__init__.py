"""The index layer: index.sqlite and the in-memory snapshot recall and capture read. Records per
entry and per file, the snapshot's arrays, the sqlite cache, reading scope files, and freshness
(finding what changed on every read, watching the folders in a long-lived process)."""
