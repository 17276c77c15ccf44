"""The numpy side of a snapshot: one row per entry, one per scope, grown in place.

Row i of `vectors` belongs to the i-th entry of the snapshot, and row i of `codes` and `scales`
is its compact copy for the first pass of recall (`scan`); `alive` marks rows still in use,
and the integer columns (recurrence, last_seen as a day number, scope number, id key) let recall
score and break ties without touching an entry. Scope rows hold each scope's phrase vector and
centroid. Arrays grow by half again when full, so appending a file's rows is amortised O(rows).
"""
from __future__ import annotations

import math

import numpy as np

from .scan import EPS as scan_eps, HEAD_DIMS, INT8_FROM, UNIT, HeadQueries, Queries, halve, heads, numkong, principal, \
    quantise

SCAN_BLOCK = 8192  # rows the int8 scan multiplies at once (a block's products: 8192 × 2 × clauses int32)
GATHER_BLOCK = 4096  # rows of a subset gathered into one buffer and multiplied at once (1 MB of codes)
SCOPE_PAIR = ("centroids", "phrases")  # a scope's two vectors, in the order `scope_pairs_of` gives them
HEADS_FROM = INT8_FROM  # rows: a snapshot this big learns a basis and keeps every row's head (`Pass.heads_kept`)


class Columns:
    """Growable arrays over entry rows and scope rows; `size` rows and `len(scopes)` scopes are in use."""

    def __init__(self, dim: int, capacity: int = 0, scope_capacity: int = 0) -> None:
        self.dim = dim
        self.size = 0
        self._vectors = np.zeros((max(capacity, 16), dim), np.float32)
        self._codes = np.zeros((len(self._vectors), dim), np.int8)
        self._scales = np.zeros(len(self._vectors), np.float32)
        self._residuals = np.zeros(len(self._vectors), np.float32)  # each row's quantisation error (scan)
        self._heads = np.zeros((len(self._vectors), HEAD_DIMS), np.int8)  # each row's head in 8 bits (scan.heads)
        self._head_scales = np.zeros(len(self._vectors), np.float32)
        self._head_residuals = np.zeros(len(self._vectors), np.float32)
        self._tails = np.zeros(len(self._vectors), np.float32)
        self.head_basis: np.ndarray | None = None        # dim × HEAD_DIMS, from HEADS_FROM rows (scan.principal)
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
        self._phrases16 = np.zeros((len(self._phrases), dim), np.uint16)    # bfloat16 copies (`scan.halve`)
        self._centroids16 = np.zeros((len(self._phrases), dim), np.uint16)
        self.scope_residual = 0.0  # the largest bfloat16 rounding error of a phrase or centroid
        self.scope_likeness = np.zeros(0, np.float32)  # left by approximate(): each scope against its nearest clause
        self._coded = 0                                    # rows [0, _coded) have their compact copy
        self._stale_scopes: list[np.ndarray] = []           # scopes whose bfloat16 copy is out of date
        self._asked = False                                # a scan was asked for before
        self._scratch: dict[str, np.ndarray] = {}         # reused by `approximate`: no page faults per call
        self.readers: dict[str, object] = {}               # an image's readers of vectors and scope pairs (image.Rows)
        self._edited_scopes: set[int] = set()              # scopes changed since the image was mapped
        self.release_codes = None                          # a mapped image's pages of scanned rows given back (image.CodePages)
        self._results: dict[tuple[int, int], object] = {}  # numkong's output tensors, by shape

    # --- views ----------------------------------------------------------------------------------
    @property
    def vectors(self) -> np.ndarray:
        return self._vectors[: self.size]

    @property
    def codes(self) -> np.ndarray:
        return self._codes[: self.size]

    @property
    def scales(self) -> np.ndarray:
        return self._scales[: self.size]

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

    @property
    def phrases16(self) -> np.ndarray:
        return self._phrases16[: len(self.scopes)]

    @property
    def centroids16(self) -> np.ndarray:
        return self._centroids16[: len(self.scopes)]

    def compact_ready(self, now: bool = False) -> bool:
        """Whether the compact copies are up to date for a scan, bringing them up to date when
        that is cheap (a few rows and scopes changed), when `now`, or when a scan was asked for
        before: copying every row costs about as much as one float32 pass over them, so a process
        that recalls once from index.sqlite (the command line) does not pay it, and one that
        recalls again (the server) pays it once, then only for rows that change. A snapshot
        mapped from an image comes with its copies."""
        if self._coded < self.size or self._stale_scopes or self._wants_heads():
            if not (now or self._asked) and self.size - self._coded > max(4096, self.size // 8):
                self._asked = True  # many rows to copy (a snapshot just loaded from index.sqlite)
                return False
            self.code_rows()
            if self._wants_heads():  # big enough now: the basis is learned once, from every row it has
                self.head_basis = principal(self._vectors[:self.size])  # (not a build's first batches)
                self._code_heads(0, self.size)
            if self._stale_scopes:  # rows can change without their scopes' vectors changing
                at = np.concatenate(self._stale_scopes)
                self._stale_scopes = []
                for matrix, half_of in ((self._phrases, self._phrases16), (self._centroids, self._centroids16)):
                    half, residual = halve(matrix[at])
                    half_of[at] = half
                    self.scope_residual = max(self.scope_residual, residual)
        return True

    def scopes_changed(self, at: np.ndarray) -> None:
        """Scopes `at` have new phrases or centroids: their bfloat16 copy is made again before a scan."""
        if len(at):
            self._stale_scopes.append(at)
            if self.readers:
                self._edited_scopes.update(at.tolist())

    def scan(self, queries: np.ndarray, share: float) -> Pass:
        """An intent's pass over the compact copies (`Pass`): the clauses packed and every scope
        scored once, then the rows' scores for every row or for some. `scope_likeness` is left
        with each scope's likeness to its nearest clause (the closer of phrase and centroid):
        good for ordering scopes, not for scoring rows."""
        return Pass(self, queries, share)

    def approximate(self, queries: np.ndarray, share: float) -> tuple[np.ndarray, np.ndarray]:
        """Clauses × rows: `share` × the closer of the row's scope phrase and centroid, plus the
        rest × the row's own vector, each against each clause (recall's relevance), computed from
        the compact copies (`scan`); and a bound on the error of each row's elements. The array is scratch
        space, valid until the next call; so is the bound, one per row. `scope_likeness` is left as
        `scan` leaves it."""
        return self.scan(queries, share).scores()

    def vectors_of(self, rows) -> np.ndarray:
        """`vectors[rows]`, read from the image file when the snapshot maps one (`readers`), so
        scoring a few thousand scattered rows keeps the mapped matrix cold."""
        return self._read("vectors", rows)

    def scope_vectors_of(self, name: str, at) -> np.ndarray:
        """`phrases[at]` or `centroids[at]`, read like `scope_pairs_of` (both are read: the image
        keeps them side by side)."""
        return self.scope_pairs_of(at)[:, SCOPE_PAIR.index(name)]

    def scope_pairs_of(self, at) -> np.ndarray:
        """Scopes × 2 × dim: each of scopes `at`, its centroid and its phrase side by side
        (`SCOPE_PAIR`), read from the image file like `vectors_of` (a few hundred scopes a recall
        would fault most of both matrices in; one read gets both, where the image kept them apart
        it took two), except the scopes changed since the image was written: those only the
        mapping's private pages hold."""
        return self._read("scope_pairs", at, self._edited_scopes)

    def _rows(self, name: str, rows: np.ndarray) -> np.ndarray:
        """The rows `rows` of `name` as the snapshot holds them (`_read`'s, with no file)."""
        if name == "scope_pairs":
            return np.stack([getattr(self, half)[rows] for half in SCOPE_PAIR], axis=1)
        return getattr(self, name)[rows]

    def _read(self, name: str, rows, edited: set[int] | None = None) -> np.ndarray:
        reader = self.readers.get(name)
        rows = np.asarray(rows, np.intp)
        if reader is None:
            return self._rows(name, rows)
        out = np.empty((len(rows), *reader.shape), np.float32)
        order = np.argsort(rows, kind="stable") if len(rows) > 1 and (np.diff(rows) < 0).any() else None
        ordered = rows if order is None else rows[order]
        from_file = ordered < reader.count
        if edited:
            from_file &= ~np.isin(ordered, np.fromiter(edited, np.intp, len(edited)))
        got = out if order is None else np.empty_like(out)
        try:
            if from_file.all():
                reader.read(ordered, got)
            else:
                took = np.empty((int(from_file.sum()), *reader.shape), np.float32)
                reader.read(ordered[from_file], took)
                got[from_file] = took
                got[~from_file] = self._rows(name, ordered[~from_file])
        except OSError:  # the file went away under us: the mapping still holds every row
            self.readers.pop(name, None)
            return self._rows(name, rows)
        if order is not None:
            out[order] = got
        return out

    ROW_ARRAYS = ("vectors", "codes", "scales", "residuals", "heads", "head_scales", "head_residuals", "tails",
                  "alive", "learning", "recurrence", "last_seen", "scope_of", "id_key", "always")
    SCOPE_ARRAYS = ("phrases", "centroids", "phrases16", "centroids16")

    def code_rows(self) -> None:
        """The compact copies of the rows added since the last call (not the scopes', whose
        centroids may still change): a build does it batch by batch while its workers run, so
        the image it writes next waits on no quantising. Each row's copy is its own, so the
        same codes as one call at the end."""
        if self._coded < self.size:
            codes, scales, residuals = quantise(self._vectors[self._coded:self.size])
            self._codes[self._coded:self.size] = codes
            self._scales[self._coded:self.size] = scales
            self._residuals[self._coded:self.size] = residuals
            if self.head_basis is not None:
                self._code_heads(self._coded, self.size)
            self._coded = self.size

    def _wants_heads(self) -> bool:
        return self.head_basis is None and self.size >= HEADS_FROM

    def _code_heads(self, start: int, stop: int) -> None:
        """The heads of rows [start, stop) (`scan.heads`), a few thousand at a time."""
        for a in range(start, stop, SCAN_BLOCK):
            b = min(a + SCAN_BLOCK, stop)
            self._heads[a:b], self._head_scales[a:b], self._head_residuals[a:b], self._tails[a:b] = \
                heads(self._vectors[a:b], self.head_basis)

    def image_arrays(self) -> dict[str, np.ndarray]:
        """The arrays in use, by name, for an image (`image.write`); the compact copies up to date."""
        self.compact_ready(now=True)
        size, scopes = self.size, len(self.scopes)
        basis = {} if self.head_basis is None else {"head_basis": self.head_basis}
        return {**{name: getattr(self, f"_{name}")[:size] for name in self.ROW_ARRAYS},
                **{name: getattr(self, f"_{name}")[:scopes] for name in self.SCOPE_ARRAYS}, **basis}

    def adopt(self, arrays: dict[str, np.ndarray], size: int, scope_residual: float) -> None:
        """Take `arrays` (as `image_arrays` names them, e.g. mapped from an image) as the columns
        of `size` rows. They are used as they are: growing copies them, as it copies any array."""
        for name in (*self.ROW_ARRAYS, *self.SCOPE_ARRAYS):
            setattr(self, f"_{name}", arrays[name])
        self.head_basis = arrays.get("head_basis")
        self.size = self._coded = size
        self.scope_residual = scope_residual

    def _result(self, rows: int, width: int):
        """numkong's output tensor for `rows` × `width` products (kept; a slice of it serves fewer rows)."""
        shape = (rows, width)
        if shape not in self._results:
            if len(self._results) > 4:
                self._results.clear()
            self._results[shape] = numkong().empty(shape, dtype="int32")
        return self._results[shape]

    def _buffer(self, name: str, shape: tuple[int, ...], dtype) -> np.ndarray:
        size = math.prod(shape)
        base = self._scratch.get(name)
        if base is None or len(base) < size:
            base = self._scratch[name] = np.empty(size + size // 8, dtype)  # room for rows a capture adds, not twice over
        return base[:size].reshape(shape)

    # --- growing ---------------------------------------------------------------------------------
    @property
    def capacity(self) -> int:
        """Rows the matrices have room for."""
        return len(self._vectors)

    def grow_rows(self, need: int) -> None:
        if need <= len(self._vectors):
            return
        cap = max(need, len(self._vectors) * 3 // 2)
        for name in ("_" + array for array in self.ROW_ARRAYS):
            old = getattr(self, name)
            new = np.zeros((cap, *old.shape[1:]), old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)

    def grow_scopes(self, need: int) -> None:
        if need <= len(self._phrases):
            return
        cap = max(need, len(self._phrases) * 3 // 2)
        for name in ("_phrases", "_centroids", "_phrases16", "_centroids16"):
            old = getattr(self, name)
            new = np.zeros((cap, *old.shape[1:]), old.dtype)
            new[: len(old)] = old
            setattr(self, name, new)


class Pass:
    """One intent's clauses against a snapshot's compact copies (`Columns.scan`): packed once,
    every scope scored once in bfloat16, then the rows scored for every row or for a subset of
    them. Recall scores the rows of a few likely scopes first, learns from them how close a row
    must come to matter, and then scans only the rows of the scopes that can come that close
    (`scope_bound`): the same numbers, bit for bit, as the pass over every row gives them."""

    def __init__(self, cols: Columns, queries: np.ndarray, share: float) -> None:
        cols.compact_ready(now=True)
        self.cols, self.share = cols, share
        self.q = q = Queries(queries)
        self.scope = np.maximum(q.dots_half(cols.centroids16), q.dots_half(cols.phrases16))  # clauses × scopes
        cols.scope_likeness = self.scope.max(axis=0) if len(cols.scopes) else np.zeros(0, np.float32)
        self._shared = self.scope * share
        self._first, self._second = (q.first * (1 - share))[:, None], (q.second * (1 - share))[:, None]
        self.scope_error = q.delta(cols.scope_residual, half=True)  # of each element of `scope`
        self.norms = np.linalg.norm(queries, axis=1)
        self._queries, self._heads = queries, None

    def scope_bound(self) -> np.ndarray:
        """Clauses × scopes: more than any row of the scope can score on the clause, whatever its
        text. Rows are the embedder's unit vectors (or zero, for an empty text), so a row's own
        part v·q is at most |q| (UNIT allows for float32 rounding in the normalisation); the
        scope's part is its bfloat16 score plus that score's error bound."""
        return (self.share * (self.scope + np.float32(self.scope_error))
                + ((1 - self.share) * UNIT * self.norms).astype(np.float32)[:, None])

    def scores(self, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`Columns.approximate`'s scores and bounds, for `rows` only (ascending; None: every row):
        clauses × len(rows) and one bound per row, scratch space valid until the next call."""
        out = self.cols._buffer("out", (len(self.norms), self.cols.size if rows is None else len(rows)), np.float32)
        for _ in self._blocks(rows, out):
            pass
        return out, self.slack(rows)

    def blocks(self, rows: np.ndarray | None = None):
        """The scores `scores(rows)` gives, a block of rows at a time, for a caller that keeps
        only a few of them: (start, stop, scores) for the rows at [start, stop) of `rows` (every
        row when None), the scores clauses × (stop − start), scratch space valid until the next block."""
        return self._blocks(rows, None)

    def slack(self, rows: np.ndarray | None = None) -> np.ndarray:
        """The bound on the error of each of `rows`' scores (None: every row), scratch space
        valid until the next call: each row's own residual bounds its part."""
        cols, q, share = self.cols, self.q, self.share
        slack = cols._buffer("slack", (cols.size if rows is None else len(rows),), np.float32)
        if rows is None:
            np.multiply(cols._residuals[:cols.size], np.float32((1 - share) * (q.norm + q.residual)), out=slack)
        else:  # gathered straight into the scratch (the rows are valid: no mode changes a value, "wrap" checks none)
            np.take(cols._residuals, rows, out=slack, mode="wrap")
            slack *= np.float32((1 - share) * (q.norm + q.residual))
        slack += np.float32((1 - share) * (q.residual + scan_eps) + share * self.scope_error)
        return slack

    def _blocks(self, rows: np.ndarray | None, out: np.ndarray | None):
        """Score `rows` (None: every row) a block at a time, into `out` (clauses × len(rows)) or,
        when None, into a block's scratch; yields (start, stop, the block's scores)."""
        cols = self.cols
        c, size = len(self.norms), cols.size
        n = size if rows is None else len(rows)

        def target(start: int, stop: int) -> np.ndarray:
            return out[:, start:stop] if out is not None else cols._buffer("block", (c, stop - start), np.float32)

        # a block of rows at a time: numkong's integer products, their float copy and the rows'
        # scope scores stay a few hundred kilobytes (in cache) instead of arrays the size of the
        # store. A subset is gathered from a block of rows at a time too (so no more of a mapped
        # image's 8-bit rows are resident at once than a pass over every row leaves, `release_codes`),
        # and scored a block's worth of gathered rows at a time.
        if rows is None:
            for a in range(0, size, SCAN_BLOCK):
                b = min(a + SCAN_BLOCK, size)
                block = target(a, b)
                self._score(cols._codes[a:b], slice(a, b), block)
                if cols.release_codes is not None:
                    cols.release_codes(cols._codes, a, b)
                yield a, b, block
        else:
            starts = range(0, size, SCAN_BLOCK)
            ends = np.searchsorted(rows, [*starts, size]).tolist()
            most = min(GATHER_BLOCK, SCAN_BLOCK, n)
            gathered = cols._buffer("codes", (most, cols.dim), np.int8)
            done = 0  # rows[done:i] are gathered, not yet scored
            for a, i, j in zip(starts, ends, ends[1:]):  # rows[i:j] lie in [a, a + SCAN_BLOCK)
                while i < j:
                    if i - done == most:  # the buffer is full
                        block = target(done, i)
                        self._score(gathered, rows[done:i], block)
                        yield done, i, block
                        done = i
                    k = min(j, done + most)
                    # mode clip: the rows are valid, and numpy's default copies `out` once more
                    np.take(cols._codes, rows[i:k], axis=0, out=gathered[i - done:k - done], mode="clip")
                    i = k
                if cols.release_codes is not None:
                    cols.release_codes(cols._codes, a, min(a + SCAN_BLOCK, size))
            if n > done:
                block = target(done, n)
                self._score(gathered[:n - done], rows[done:], block)
                yield done, n, block

    def heads_kept(self, rows: np.ndarray | None, lift: np.ndarray) -> np.ndarray | None:
        """Of `rows` (None: every row), the positions of those whose scores (`blocks`) could reach
        `lift` (clauses × 1) on some clause once their bounds are added, found from the rows' heads
        alone (64 bytes a row where the scan reads 256): every row that passes the test on its
        scores is among them, since a row's head product, less its own bound (`HeadQueries`),
        is under its exact score, which is under its score plus its bound. About a fifth of the
        rows is then scanned in full (at 100,000 entries of the benchmark's kind). None when the
        snapshot keeps no heads."""
        cols, share = self.cols, self.share
        if cols.head_basis is None:
            return None
        if self._heads is None:
            self._heads = HeadQueries(self._queries, cols.head_basis)
        h, c, size = self._heads, len(self.norms), cols.size
        n = size if rows is None else len(rows)
        # what the head bound adds to each row, and twice the scores' own bound (a score can lie
        # that far over the exact one, which can lie a head bound over the head product); the
        # scope's part is the same bfloat16 score in both, so its error is counted once, not twice
        extra = self.slack(rows) * np.float32(2)
        if rows is None:
            residual, tail = cols._head_residuals[:size], cols._tails[:size]
        else:
            residual, tail = cols._head_residuals[rows], cols._tails[rows]
        extra += h.delta(residual, tail) * np.float32(1 - share)
        extra += np.float32(scan_eps - share * self.scope_error)
        reach = self._shared - lift  # clauses × scopes: a row's scope part, less the clause's lift
        scale = (h.scales * (1 - share)).astype(np.float32)[:, None]
        gathered = cols._buffer("heads", (min(SCAN_BLOCK, n), cols._heads.shape[1]), np.int8)
        kept = [np.zeros(0, np.intp)]
        for a in range(0, n, SCAN_BLOCK):
            b = min(a + SCAN_BLOCK, n)
            if rows is None:
                codes, at = cols._heads[a:b], slice(a, b)
            else:
                at, codes = rows[a:b], gathered[:b - a]
                np.take(cols._heads, at, axis=0, out=codes, mode="clip")  # (valid rows: see `_blocks`)
            raw = cols._result(SCAN_BLOCK, c)[:b - a]
            numkong().dots_packed(codes, h.packed, out=raw)
            block = cols._buffer("head_block", (c, b - a), np.float32)
            np.copyto(block, np.asarray(raw).T, casting="unsafe")
            block *= scale
            block *= cols._head_scales[at]
            if len(cols.scopes):  # (as in `_score`)
                scope = cols._buffer("head_scope", (c, b - a), np.float32)
                np.take(reach, cols._scope_of[at], axis=1, out=scope, mode="wrap")
                block += scope
            else:
                block -= lift
            best = block.max(axis=0)
            best += extra[a:b]
            kept.append(np.flatnonzero(best >= 0) + a)
        return np.concatenate(kept)

    def _score(self, codes: np.ndarray, at, block: np.ndarray) -> None:
        """Into `block` (clauses × len(codes)): the scores of the rows `at` (a slice or their
        numbers), whose 8-bit codes are `codes`."""
        cols, q, c = self.cols, self.q, len(self.norms)
        raw = cols._result(SCAN_BLOCK, 2 * c)[:len(codes)]
        numkong().dots_packed(codes, q.packed, out=raw)
        both = cols._buffer("both", (2 * c, len(codes)), np.float32)
        np.copyto(both, np.asarray(raw).T, casting="unsafe")
        np.multiply(both[:c], self._first, out=block)
        both[c:] *= self._second
        block += both[c:]
        block *= cols._scales[at]
        if len(cols.scopes):
            # every clause's scope score of each row, in one take along the rows' axis. The scope
            # numbers are valid, so the mode changes no value; numpy's default ("raise") checks each
            # and writes through a buffer: twice the time (59 against 27 us a block of 8,192 rows)
            np.take(self._shared, cols._scope_of[at], axis=1, out=both[:c], mode="wrap")
            block += both[:c]
