"""Compact vectors and the kernel that scans them: recall's first pass over a big store.

Every row of the snapshot also has an 8-bit copy, scaled per vector (`codes`, `scales`): a quarter
of the bytes of float32, so a pass over 100,000 rows reads 25 MB instead of 100. `numkong` (a
maintained SIMD library, the successor of simsimd) multiplies them with the intent's clauses, also
in 8 bits, with integer accumulation. The result is approximate, but with a bound that holds for
every row: |v·q − approx| ≤ `delta`, from the row's quantisation residual and the query's own.
Recall uses the bound to keep only the rows that could matter and scores those again
exactly, in float32 (`ops.recall`), so its answers are the same as scoring every row exactly.

A big snapshot also keeps each row's head: its first HEAD_DIMS coordinates along the directions
that hold most of the rows' length (`principal`, learned once from the rows), in 8 bits, and the
length of what they miss (its tail). A head product, within its own bound (`HeadQueries`), reads
64 bytes a row where the full pass reads 256, and tells most rows that cannot matter before the
full pass reads them: the scan waits on memory, not on arithmetic.

Without numkong, or for a small store, the plain path runs: every row scored in float32 by numpy's
matrix product, exactly as before (`kernel` says which runs; `doctor` reports it).
"""
from __future__ import annotations

import numpy as np

INT8_FROM = 20_000      # rows: below this the float32 product is as fast as the scan and a rescoring
EPS = 1e-4              # float32 rounding in the exact products, which differ in the last bits by shape
HEAD_DIMS = 64          # the rows' principal directions a row's head holds (`heads`)
HEAD_SAMPLE = 20_000    # rows the principal directions are learned from, at most (`principal`)
UNIT = 1.001            # a unit vector's norm after float32 rounding, and then some
TAIL_FLOOR = 1e-5       # added to a squared tail before its root: a basis rounded to float32 is not quite orthonormal

_NUMKONG: object | None = None
_TRIED = False


def numkong():
    """The numkong module, or None when it is not installed (imported once, on first use)."""
    global _NUMKONG, _TRIED
    if not _TRIED:
        _TRIED = True
        try:
            import numkong as nk
            _NUMKONG = nk
        except ImportError:
            _NUMKONG = None
    return _NUMKONG


def kernel(rows: int, choice: str = "auto") -> str:
    """Which path scans `rows` rows: "int8" (numkong on the compact vectors) or "numpy" (float32).
    `choice` is the configured `vector_scan`: auto (int8 from INT8_FROM rows, when numkong is
    installed), int8 (at every size, when installed) or numpy."""
    if choice == "numpy" or numkong() is None:
        return "numpy"
    if choice == "int8" or rows >= INT8_FROM:
        return "int8"
    return "numpy"


def describe(choice: str = "auto") -> str:
    """One line for `doctor`: which path recall's scan takes here, and why."""
    nk = numkong()
    if choice == "numpy":
        return "numpy float32 (vector_scan = numpy)"
    if nk is None:
        return "numpy float32 (numkong is not installed: pip install numkong for the 8-bit scan)"
    version = getattr(nk, "__version__", "?")
    if choice == "int8":
        return f"numkong {version} int8 scan with exact float32 rescoring, at every size"
    return (f"numkong {version} int8 scan with exact float32 rescoring from {INT8_FROM:,} entries "
            f"(numpy float32 below)")


def quantise(vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row as int8 codes times one float32 scale (its largest component maps to ±127), and the
    L2 norm of each row's residual (v − scale·codes): the rows' part of the error bound."""
    if not len(vectors):
        return np.zeros(vectors.shape, np.int8), np.zeros(0, np.float32), np.zeros(0, np.float32)
    peak = np.abs(vectors).max(axis=1)
    scales = np.where(peak > 0, peak / 127, 1).astype(np.float32)
    codes = np.rint(vectors / scales[:, None]).astype(np.int8)
    residual = vectors - codes.astype(np.float32) * scales[:, None]
    return codes, scales, np.sqrt(np.einsum("ij,ij->i", residual, residual)).astype(np.float32)


def halve(vectors: np.ndarray) -> tuple[np.ndarray, float]:
    """The rows in bfloat16 (float32's top half, rounded to nearest even; held as uint16, which
    numpy has no bfloat16 for), and the largest L2 norm of a row's rounding error. numkong
    multiplies bfloat16 twice as fast as float16 here (AVX-512 BF16 and AMX): its error, eight
    bits of mantissa against eleven, only widens the bound a little."""
    bits = np.ascontiguousarray(vectors, np.float32).view(np.uint32)
    half = ((bits + (0x7FFF + ((bits >> 16) & 1))) >> 16).astype(np.uint16)
    return half, _largest_norm(vectors - widen(half)) if len(vectors) else 0.0


def widen(half: np.ndarray) -> np.ndarray:
    """bfloat16 rows (as `halve` gives them) in float32, exactly."""
    return (half.astype(np.uint32) << 16).view(np.float32)


def _bfloat16(half: np.ndarray):
    """`halve`'s rows as a numkong tensor of bfloat16 (no copy of C-contiguous rows)."""
    half = np.ascontiguousarray(half)
    return numkong().from_pointer(half.__array_interface__["data"][0], half.shape, "bf16", owner=half)


def principal(vectors: np.ndarray, k: int = HEAD_DIMS) -> np.ndarray:
    """dim × k, orthonormal: the k directions that hold most of the rows' squared length (the
    leading eigenvectors of their second moments), learned from at most HEAD_SAMPLE rows spread
    over all of them. Sentence vectors share a few dominant directions, so a row's first k
    coordinates in this basis (its head) hold most of it, and what they miss (its tail) is short."""
    step = max(1, -(-len(vectors) // HEAD_SAMPLE))
    sample = np.asarray(vectors[::step], np.float64)
    _, basis = np.linalg.eigh(sample.T @ sample)  # ascending eigenvalues
    return np.ascontiguousarray(basis[:, ::-1][:, :k], np.float32)


def heads(vectors: np.ndarray, basis: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each row's head (its coordinates along `basis`) as int8 codes, their scale and residual (as
    `quantise` gives them), and the length of its tail (what the head misses), from above: with q's
    head and tail taken the same way, |v·q − head(v)·head(q)| ≤ tail(v)·tail(q)."""
    head = vectors @ basis
    codes, scales, residuals = quantise(head)
    return codes, scales, residuals, tails(vectors, head)


def tails(rows: np.ndarray, head: np.ndarray) -> np.ndarray:
    """The length of each row's tail, from its squared length less its head's, summed in float64:
    TAIL_FLOOR, added before the root, is more than float32 rounding and a basis not quite
    orthonormal can take off, so a tail never reads shorter than it is."""
    square = np.einsum("ij,ij->i", rows, rows, dtype=np.float64) - np.einsum("ij,ij->i", head, head, dtype=np.float64)
    return np.sqrt(np.maximum(square, 0) + TAIL_FLOOR).astype(np.float32)


def _largest_norm(rows: np.ndarray) -> float:
    return float(np.sqrt(np.einsum("ij,ij->i", rows, rows).max()))


class Queries:
    """An intent's clause vectors packed once for numkong, to scan several matrices: in 8 bits
    twice over (the codes of each clause, then of what they missed, so the query's own error is
    about 1/127 of one 8-bit code's), and in bfloat16 twice over too (the clause rounded, then
    what the rounding missed: the query's own error about 1/256 of one rounding's, so the bound
    of a scope's score is mostly the scope's rounding, half of what one rounding of each gives)."""

    def __init__(self, queries: np.ndarray) -> None:
        nk = numkong()
        first, self.first, _ = quantise(queries)
        second, self.second, residuals = quantise(queries - first.astype(np.float32) * self.first[:, None])
        self.residual = float(residuals.max()) if len(residuals) else 0.0
        self.packed = nk.dots_pack(np.concatenate([first, second]))
        high, _ = halve(queries)
        low, self.half_residual = halve(queries - widen(high))
        self.packed_half = nk.dots_pack(_bfloat16(np.concatenate([high, low]))) if len(queries) else None
        self.norm = float(np.linalg.norm(queries, axis=1).max()) if len(queries) else 0.0

    def dots_half(self, half: np.ndarray) -> np.ndarray:
        """Approximately `queries @ vectors.T` (clauses × rows) from the rows in bfloat16 (`halve`):
        the products of the rounded operands (each clause's two parts), accumulated in float32."""
        c = len(self.first)
        if not len(half) or self.packed_half is None:  # no scopes, or no clauses
            return np.zeros((c, len(half)), np.float32)
        raw = np.asarray(numkong().dots_packed(_bfloat16(half), self.packed_half)).T
        return np.add(raw[:c], raw[c:], out=np.empty((c, len(half)), np.float32))  # rows × 2c read across: C order out

    def delta(self, residual, half: bool = False):
        """A bound on the error of an int8 product (as `Columns.approximate` computes it), or of
        `dots_half`, for rows whose residual is `residual`
        (a number, or an array of them). For unit rows v and queries q, v̂ and q̂ what the kernel
        reads: |v·q − v̂·q̂| ≤ |v − v̂|·|q| + |v̂|·|q − q̂|, where |v̂| ≤ |v| + |v − v̂|."""
        return residual * self.norm + (1 + residual) * (self.half_residual if half else self.residual) + EPS


class HeadQueries:
    """The clauses' heads (`heads`) in 8 bits, packed for numkong, and what bounds a head product's
    error: |v·q − approx| ≤ residual(v)·(|head(q)| + ε) + |v|·ε + tail(v)·tail(q) + EPS, where ε
    is the clause head's own quantisation residual (the largest of the clauses'), and tail(q)
    the longest clause tail."""

    def __init__(self, queries: np.ndarray, basis: np.ndarray) -> None:
        head = queries @ basis
        self.codes, self.scales, residuals = quantise(head)
        self.packed = numkong().dots_pack(self.codes)
        self.residual = float(residuals.max()) if len(residuals) else 0.0
        self.norm = float(np.linalg.norm(head, axis=1).max() * UNIT) if len(head) else 0.0
        self.tail = float(tails(queries, head).max()) if len(head) else 0.0

    def delta(self, residual: np.ndarray, tail: np.ndarray) -> np.ndarray:
        """The bound on a head product's error, for rows whose head residual and tail are these."""
        bound = residual * np.float32(self.norm + self.residual)
        bound += tail * np.float32(self.tail)
        bound += np.float32(UNIT * self.residual + EPS)
        return bound
