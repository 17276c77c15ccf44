"""The index layer: index.sqlite, the snapshot, and how it stays fresh."""
