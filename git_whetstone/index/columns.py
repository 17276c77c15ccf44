"""The numpy side of a snapshot: one row per entry, one per scope, grown in place.

Row i of `vectors` belongs to the i-th entry of the snapshot; `alive` marks rows still in use,
and the integer columns (recurrence, last_seen as a day number, scope number, id key) let recall
score and break ties without touching an entry. Scope rows hold each scope's phrase vector and
centroid. Arrays grow by half again when full, so appending a file's rows is amortised O(rows).
"""
from __future__ import annotations

import numpy as np


class Columns:
    """Growable arrays over entry rows and scope rows; `size` rows and `len(scopes)` scopes are in use."""

    def __init__(self, dim: int, capacity: int = 0, scope_capacity: int = 0) -> None:
        self.dim = dim
        self.size = 0
        self._vectors = np.zeros((max(capacity, 16), dim), np.float32)
        self._alive = np.zeros(len(self._vectors), bool)
        self._learning = np.zeros(len(self._vectors), bool)
        self._recurrence = np.zeros(len(self._vectors), np.int64)
        self._last_seen = np.zeros(len(self._vectors), np.int64)
        self._scope_of = np.zeros(len(self._vectors), np.int64)
        self._id_key = np.zeros(len(self._vectors), np.int64)
        self._always = np.zeros(len(self._vectors), bool)
        self.scopes: list[tuple[str, str, str]] = []    # (kind, key, display), by scope number
        self._phrases = np.zeros((max(scope_capacity, 16), dim), np.float32)
        self._centroids = np.zeros((len(self._phrases), dim), np.float32)

    # --- views ----------------------------------------------------------------------------------
    @property
    def vectors(self) -> np.ndarray:
        return self._vectors[: self.size]

    @property
    def alive(self) -> np.ndarray:
        return self._alive[: self.size]

    @property
    def is_learning(self) -> np.ndarray:
        return self._learning[: self.size]

    @property
    def recurrence(self) -> np.ndarray:
        return self._recurrence[: self.size]

    @property
    def last_seen(self) -> np.ndarray:
        return self._last_seen[: self.size]

    @property
    def scope_of(self) -> np.ndarray:
        return self._scope_of[: self.size]

    @property
    def id_key(self) -> np.ndarray:
        """A sort key per row that orders by id (L1, I1, L2, …); ties in recall break on it."""
        return self._id_key[: self.size]

    @property
    def always(self) -> np.ndarray:
        """Rows marked `applies: always`: recall returns them for every task."""
        return self._always[: self.size]

    @property
    def phrases(self) -> np.ndarray:
        return self._phrases[: len(self.scopes)]

    @property
    def centroids(self) -> np.ndarray:
        return self._centroids[: len(self.scopes)]

    # --- growing ---------------------------------------------------------------------------------
    def grow_rows(self, need: int) -> None:
        if need <= len(self._vectors):
            return
        cap = max(need, len(self._vectors) * 3 // 2)
        for name in ("_vectors", "_alive", "_learning", "_recurrence", "_last_seen", "_scope_of", "_id_key", "_always"):
            old = getattr(self, name)
            new = np.zeros((cap, *old.shape[1:]), old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def grow_scopes(self, need: int) -> None:
        if need <= len(self._phrases):
            return
        cap = max(need, len(self._phrases) * 3 // 2)
        for name in ("_phrases", "_centroids"):
            old = getattr(self, name)
            new = np.zeros((cap, self.dim), old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)
