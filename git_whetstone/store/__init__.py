"""The store layer: one skill's git repository on disk. Opening and naming it, its write lock,
minting ids, journaled atomic writes committed one change per commit, events.jsonl, and how much
a learning weighs today."""
