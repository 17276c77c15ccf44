"""The static backend: all-MiniLM-L6-v2 distilled into a table of token vectors, read with numpy.

The table is checked for size and consistency, its similarities against the real model and the
hashing backend (and against a table of random vectors, which must fail the same checks), and the
backend end to end: capture, recall, the index, the hooks and a CLI that never imports torch for
it. Its tokenizer has its own tests (test_wordpiece.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from git_whetstone.base import config as config_mod
from git_whetstone.index import freshness
from git_whetstone.semantics import embed
from git_whetstone.ops.writing.capture import capture
from git_whetstone.base.errors import WhetstoneError
from git_whetstone.ops.recall import recall
from tests.helpers import LEARNINGS, PARAPHRASE, REPO, model_dir, run_cli, table_builder

STATIC = embed.get_embedder("static")
BUILDER = table_builder()
SKILL = "great-tables"

PARAPHRASES = [
    ("Format currency as USD with no decimals", "Show money columns in USD without cents"),
    ("Band alternate rows in light grey.", "Shade every other row with a pale gray background."),
    ("Show negative numbers in parentheses.", "Write negatives like (42) instead of -42."),
    ("Use four spaces for indentation, never tabs.", "Indent code with spaces (4), not tab characters."),
    ("Keep slides to three bullet points at most.", "No more than three bullets on any slide."),
    ("Label both axes of every chart.", "Charts need titles on the x and y axes."),
    ("Avoid passive voice in reports.", "Write report sentences in the active voice."),
    ("Thousands separators in large numbers.", "Group digits with commas, like 1,000,000."),
    ("Freeze the header row when the table scrolls.", "Keep column headers visible while scrolling."),
    ("No emoji in professional documents.", "Leave emojis out of formal writing."),
]
UNRELATED = [
    ("Never round table corners", "Show money columns in USD"),
    ("Band alternate rows in light grey.", "Write commit messages in the imperative mood."),
    ("Use a serif font for body text.", "Tests must not use mocks for the database."),
    ("Keep slides to three bullet points at most.", "Show negative numbers in parentheses."),
    ("Label both axes of every chart.", "Use British spelling."),
    ("Dates should be written as ISO 8601.", "Use dark mode colors for the dashboard."),
    ("Cite sources with footnotes.", "Right-align numeric columns."),
    ("Keep emails short and friendly.", "Use four spaces for indentation."),
    ("Heat-map msrp with a warm palette.", "Summaries go at the top of the document."),
    ("Freeze the header row when the table scrolls.", "Avoid passive voice in reports."),
]


# --- the table ---------------------------------------------------------------------------------------

def test_table_is_small_consistent_and_names_itself() -> None:
    path = embed.STATIC_TABLE
    assert path.stat().st_size <= 8_400_000  # uncompressed, to be mapped: 7.6 MB of codes
    meta, tokens, codes, scales = BUILDER.read_table(path)
    digest = hashlib.sha256()
    without = {k: v for k, v in meta.items() if k != "digest"}
    for part in ("\n".join(tokens).encode(), codes, scales, json.dumps(without, sort_keys=True).encode()):
        digest.update(np.ascontiguousarray(part).tobytes())
    assert meta["digest"] == digest.hexdigest(), "the table changed but its digest did not: run the build script"
    model_vocab = (model_dir() / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert tokens == [t for t in model_vocab if not re.fullmatch(r"\[.*\]", t)]
    assert codes.dtype == np.int8 and codes.shape == (len(tokens), meta["dim"]) == (len(tokens), STATIC.dim)
    assert STATIC.identity == f"static:minilm-l6:{meta['dim']}:{meta['digest'][:12]}"
    assert re.fullmatch(r"static:minilm-l6:256:[0-9a-f]{12}", STATIC.identity)


def test_vectors_are_normalised_float32_rows() -> None:
    texts = ["Show prices as US dollars.", "", "!!!", "🔥", "表格的圆角不要", "Right-align X"]
    vectors = STATIC.embed(texts)
    assert vectors.dtype == np.float32 and vectors.shape == (len(texts), 256)
    norms = np.linalg.norm(vectors, axis=1)
    assert np.allclose(norms[[0, 2, 3, 4, 5]], 1.0, atol=1e-5) and norms[1] == 0.0
    assert STATIC.embed([]).shape == (0, 256)
    assert embed.get_embedder("static") is STATIC
    # batches do not leak into each other, and a text embeds the same alone or in a crowd
    crowd = STATIC.embed(texts * 700)
    assert np.allclose(crowd[: len(texts)], vectors, atol=1e-6) and np.allclose(crowd[-len(texts):], vectors, atol=1e-6)


def test_unknown_words_and_negations() -> None:
    def cos(a: str, b: str) -> float:
        u, v = STATIC.embed([a, b])
        return float(u @ v)
    assert cos("🔥", "🔥") == pytest.approx(1.0)
    assert abs(cos("🔥", "🎉")) < 0.3  # two unknown words: two unrelated directions, not one [UNK]
    assert 0.5 < cos("Use 🔥 for hot items", "Use 🎉 for hot items") < 0.99
    # negation words are left to the judge, as with the hashing backend
    assert cos("Right-align currency columns", "Never right-align currency columns") == pytest.approx(1.0)
    assert cos("Bold the totals", "Don't bold the totals") == pytest.approx(1.0)
    assert cos("Use the logo", "You can\u2019t use the logo") == pytest.approx(cos("Use the logo", "You use the logo"))


def separation(embedder) -> dict[str, float]:
    """How well `embedder` tells PARAPHRASES from UNRELATED pairs (and from each other's halves)."""
    def cosines(pairs):
        a = embedder.embed([x for x, _ in pairs])
        b = embedder.embed([y for _, y in pairs])
        return (a * b).sum(axis=1), a, b
    para, a, b = cosines(PARAPHRASES)
    unrel, _, _ = cosines(UNRELATED)
    crossed = (a @ b.T)[~np.eye(len(PARAPHRASES), dtype=bool)]  # a rule against another rule's paraphrase
    negatives = np.concatenate([unrel, crossed])
    return {"paraphrase": float(para.mean()), "unrelated": float(unrel.mean()),
            "auc": float((para[:, None] > negatives[None, :]).mean()), "usd": float(para[0]), "corners": float(unrel[0])}


def random_table(path: Path) -> embed.StaticEmbedder:
    """The shipped table with its vectors replaced by random ones: what a broken build would give."""
    meta, tokens, codes, scales = BUILDER.read_table(embed.STATIC_TABLE)
    rng = np.random.default_rng(7)
    BUILDER.write_table(path, meta, tokens, rng.integers(-127, 128, size=codes.shape, dtype=np.int8), scales)
    return embed.StaticEmbedder(path)


def test_paraphrases_score_well_above_unrelated_pairs(tmp_path) -> None:
    good = separation(STATIC)
    assert good["usd"] > good["corners"] + 0.4, good
    assert good["paraphrase"] > good["unrelated"] + 0.35 and good["auc"] >= 0.95, good
    # better than matching words, which misses paraphrases that share none
    hashing = separation(embed.get_embedder("hashing"))
    assert good["auc"] > hashing["auc"] and good["usd"] > hashing["usd"] + 0.3, (good, hashing)
    broken = separation(random_table(tmp_path / "random.table"))
    assert not (broken["paraphrase"] > broken["unrelated"] + 0.35 and broken["auc"] >= 0.95), broken


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1])


def test_similarities_follow_the_model_it_was_distilled_from(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    model = embed.get_embedder("sentence-transformers", str(model_dir()))
    texts = sorted({t for pair in PARAPHRASES + UNRELATED for t in pair})
    upper = np.triu_indices(len(texts), 1)

    def pairwise(embedder) -> np.ndarray:
        vectors = embedder.embed(texts)
        return (vectors @ vectors.T)[upper]
    teacher = pairwise(model)
    assert spearman(pairwise(STATIC), teacher) > 0.55
    assert spearman(pairwise(STATIC), teacher) > spearman(pairwise(embed.get_embedder("hashing")), teacher) + 0.1
    assert spearman(pairwise(random_table(tmp_path / "random.table")), teacher) < 0.3


def save_npz(path: Path, meta: dict, tokens: list[str], codes: np.ndarray, scales: np.ndarray) -> None:
    """A table in the earlier .npz form, as the build wrote it (meta and vocab as UTF-8 bytes)."""
    as_bytes = lambda text: np.frombuffer(text.encode("utf-8"), np.uint8)  # noqa: E731
    np.savez(path, meta=as_bytes(json.dumps(meta, sort_keys=True)), vocab=as_bytes("\n".join(tokens)),
             codes=codes, scales=scales)


def test_the_converter_keeps_the_npz_tables_arrays_and_identity(tmp_path, monkeypatch) -> None:
    """`build_static_model.py --from-npz`: the table it writes loads to the arrays, vocabulary,
    meta and identity of the .npz it came from, embeds their floats, and is the same bytes each time;
    the shipped table is what it makes from the shipped arrays. An .npz whose digest does not
    match its arrays is refused."""
    meta, tokens, codes, scales = BUILDER.read_table(embed.STATIC_TABLE)
    npz = tmp_path / "whole.npz"
    save_npz(npz, meta, tokens, codes, scales)
    assert BUILDER.convert(npz, tmp_path / "whole.table") == meta
    assert (tmp_path / "whole.table").read_bytes() == embed.STATIC_TABLE.read_bytes()

    rng = np.random.default_rng(5)  # a small table of other rows: the loader reads what it is given
    keep = np.sort(rng.choice(len(tokens), 3000, replace=False))
    small = {**meta, "rows": len(keep)}
    small_tokens, small_codes, small_scales = [tokens[i] for i in keep], codes[keep][:, ::-1].copy(), scales[keep] * 1.5
    small["digest"] = BUILDER.digest_of(small_tokens, small_codes, small_scales, small)
    save_npz(tmp_path / "small.npz", small, small_tokens, small_codes, small_scales)
    for out in ("a.table", "b.table"):
        monkeypatch.setattr(sys, "argv", ["build_static_model.py", "--from-npz", str(tmp_path / "small.npz"),
                                          "--out", str(tmp_path / out)])
        assert BUILDER.main() == 0
    assert (tmp_path / "a.table").read_bytes() == (tmp_path / "b.table").read_bytes()
    loaded = embed.StaticEmbedder(tmp_path / "a.table")
    assert loaded.identity == f"static:minilm-l6:256:{small['digest'][:12]}" != STATIC.identity
    texts = [t for pair in PARAPHRASES + UNRELATED for t in pair] + ODD_TEXTS
    vectors = loaded.embed(texts)
    with np.load(tmp_path / "small.npz", allow_pickle=False) as table:  # every array as the .npz holds it
        assert json.loads(table["meta"].tobytes()) == loaded.meta == small
        assert same_floats(np.asarray(loaded._codes), table["codes"]) and same_floats(loaded._scales, table["scales"])
        assert dict(loaded._wordpiece.vocab.items()) == dict(zip(table["vocab"].tobytes().decode().split("\n"), range(len(keep))))
    assert not loaded._codes.flags.writeable  # mapped, read-only
    assert same_floats(vectors, reference_vectors(loaded, texts))
    small["digest"] = "0" * 64
    save_npz(tmp_path / "lying.npz", small, small_tokens, small_codes, small_scales)
    with pytest.raises(ValueError, match="digest"):
        BUILDER.convert(tmp_path / "lying.npz", tmp_path / "lying.table")
    assert not (tmp_path / "lying.table").exists()


def test_a_damaged_table_is_a_one_line_error(tmp_path) -> None:
    """A missing, damaged, truncated or other-version table: a one-line error saying to reinstall,
    on `identity` already or at the first embed, and nothing written."""
    folder = tmp_path / "tables"
    folder.mkdir()
    good = embed.STATIC_TABLE.read_bytes()
    header = good[:embed.HEADER]
    assert b'"version": 3}' in header and b'"count": 29523,' in header and b'"codes": 4096,' in header
    pieces = json.loads(header[len(embed.TABLE_MAGIC) + 8:].rstrip(b"\0"))["pieces"]
    outside = bytearray(good)
    outside[pieces["starts"]:pieces["starts"] + 4] = (len(good) + 10).to_bytes(4, "little")
    cases = {"missing": None, "empty": b"", "text": b"not a table at all\n", "truncated": good[:4096],
             "half": good[:len(good) // 2], "short by one": good[:-1], "npz": b"PK\x03\x04" + good[4:],
             "other version": header.replace(b'"version": 3}', b'"version": 4}', 1) + good[embed.HEADER:],
             "fewer pieces": header.replace(b'"count": 29523,', b'"count": 29522,', 1) + good[embed.HEADER:],
             "bad json": header.replace(b'"meta":', b'"meta"', 1) + good[embed.HEADER:],
             "float place": header.replace(b'"codes": 4096,', b'"codes": 4e+3,', 1) + good[embed.HEADER:],
             "outside": bytes(outside)}
    for name, content in cases.items():
        path = folder / name
        if content is not None:
            path.write_bytes(content)
        with pytest.raises(WhetstoneError) as err:
            embedder = embed.StaticEmbedder(path)
            embedder.embed(["x"])
        message = err.value.message
        assert "static embedding table" in message and "reinstall whetstone" in message and "\n" not in message, name
        assert err.value.exit_code == embed.RUNTIME
        assert content is None or path.read_bytes() == content, name
    assert sorted(p.name for p in folder.iterdir()) == sorted(n for n, c in cases.items() if c is not None)
    for name in ("truncated", "other version", "text"):  # the header is checked when only the identity is read
        with pytest.raises(WhetstoneError, match="cannot be read"):
            embed.StaticEmbedder(folder / name).identity


# --- the backend, end to end -------------------------------------------------------------------------

@pytest.fixture
def static_env(monkeypatch) -> dict[str, str]:
    monkeypatch.setenv("WHETSTONE_EMBEDDING_BACKEND", "static")
    return {"WHETSTONE_EMBEDDING_BACKEND": "static"}


def with_backend(backend: str) -> config_mod.Config:
    return config_mod.Config(**{**config_mod.load().__dict__, "embedding_backend": backend})


def test_config_accepts_the_backend_and_its_thresholds(tmp_path, monkeypatch) -> None:
    cfg = tmp_path / "config.toml"
    cfg.write_text('embedding_backend = "static"\n[static]\ndedup = 0.93\ngrey = 0.4\n')  # grey: retired, accepted
    monkeypatch.setenv("WHETSTONE_CONFIG", str(cfg))
    monkeypatch.delenv("WHETSTONE_EMBEDDING_BACKEND")  # the suite pins hashing; this test reads the file
    monkeypatch.setenv("WHETSTONE_STATIC_ASK", "0.7")
    c = config_mod.load()
    assert c.embedding_backend == "static"
    assert (c.threshold("dedup"), c.threshold("ask")) == (0.93, 0.7)
    assert c.threshold("mention") == config_mod.DEFAULT_THRESHOLDS["static"]["mention"]
    assert set(config_mod.DEFAULT_THRESHOLDS["static"]) == set(config_mod.THRESHOLD_NAMES)


def test_recall_finds_a_paraphrase_hashing_misses(static_env) -> None:
    ids = {scope: capture(SKILL, "learning", body, scope, "said so")["entry_id"] for body, scope in LEARNINGS}
    intent = PARAPHRASE
    missed = recall(SKILL, intent, config=with_backend("hashing"))
    assert missed["fallback"]
    found = recall(SKILL, intent)
    assert not found["fallback"]
    shown = [e["id"] for e in found["learnings"]]
    # the currency rule leads; the clause "money columns" also meets "row banding" (0.40) and "corner
    # radius" (0.32) in this table, so those may follow it, but never ahead of it
    assert shown[0] == ids["currency formatting"]
    whole = recall(SKILL, "styling a gtcars table: currency formatting, color encoding, corner radius, row banding")
    assert {ids[s] for s in ("currency formatting", "color encoding", "corner radius", "row banding")} <= \
        {e["id"] for e in whole["learnings"]}


def test_capture_reinforces_a_paraphrase_and_flags_a_conflict(static_env) -> None:
    first = capture(SKILL, "learning", "Show prices as US dollars, no decimal places.", "currency formatting", "x")
    again = capture(SKILL, "learning", "Display the price column in US dollars without decimals.",
                    "currency formatting", "y")
    if again["status"] == "needs_confirmation":  # in the grey band: balanced supervision asks first
        assert again["similar_to"]["id"] == first["entry_id"], again
        again = capture(SKILL, "learning", "Display the price column in US dollars without decimals.",
                        "currency formatting", "y", confirm="reinforce")
    assert (again["status"], again["entry_id"], again["recurrence"]) == ("reinforced", first["entry_id"], 2), again
    capture(SKILL, "learning", "Right-align numeric columns.", "column alignment", "z")
    flipped = capture(SKILL, "learning", "Never right-align numeric columns.", "column alignment", "w")
    assert flipped["status"] == "conflict", flipped
    other = capture(SKILL, "learning", "Band alternate rows in light grey.", "row banding", "v")
    assert other["status"] == "committed"


def test_index_keys_vectors_by_the_table(static_env, monkeypatch) -> None:
    for body, scope in LEARNINGS:
        capture(SKILL, "learning", body, scope, "said so", config=with_backend("hashing"))
    calls: list[tuple[str, int]] = []
    real = freshness.embed_texts
    monkeypatch.setattr(freshness, "embed_texts", lambda texts, embedder: calls.append((embedder.identity, len(texts)))
                        or real(texts, embedder))
    recall(SKILL, "styling a table")
    assert calls and {who for who, _ in calls} == {STATIC.identity}
    recall(SKILL, "styling a table", config=with_backend("hashing"))
    freshness.LIVE.clear()  # a new process: the static vectors are all in index.sqlite already
    calls.clear()
    recall(SKILL, "styling a table")
    assert calls == []
    from git_whetstone.ops.sync.hooks import reindex
    assert reindex(SKILL)["backend"] == STATIC.identity


def imported(stderr: str) -> set[str]:
    """Top-level package names in `python -X importtime` output."""
    return {m.group(1).strip().split(".")[0] for m in re.finditer(r"^import time:[^|]*\|[^|]*\|\s*(\S+)", stderr, re.M)}


HEAVY = {"torch", "sentence_transformers", "transformers", "tokenizers", "mcp"}


def test_cli_recall_and_capture_never_import_torch(static_env) -> None:
    for body, scope in LEARNINGS:
        assert run_cli("capture", SKILL, body, "--scope", scope, env=static_env).returncode == 0
    env = {**os.environ, **static_env}
    for args in (["recall", SKILL, PARAPHRASE, "--json"],
                 ["capture", SKILL, "Keep the legend out of the plot.", "--scope", "legends", "--json"],
                 ["reindex", SKILL]):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "git_whetstone", *args], capture_output=True,
                              text=True, env=env, cwd=REPO, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        mods = imported(proc.stderr)
        assert "git_whetstone" in mods and "numpy" in mods
        assert not mods & HEAVY, (args[0], mods & HEAVY)
    proc = run_cli("recall", SKILL, PARAPHRASE, "--json", env=static_env)
    assert json.loads(proc.stdout)["learnings"][0]["scope"] == "currency formatting"


def test_a_hand_commit_hook_refreshes_the_static_index(static_env, store_root, monkeypatch) -> None:
    """The table loads in tens of milliseconds, so the post-commit hook keeps the index fresh."""
    assert run_cli("capture", "hooked", "Bold the header row", "--scope", "headers", env=static_env).returncode == 0
    store = store_root / "hooked"
    path = next((store / "learnings").glob("*.md"))
    path.write_text(path.read_text().replace("Bold the header row\n", "Bold the header row, always\n"))
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1", **static_env,
               PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["git", "-C", str(store), "commit", "-qam", "hand edit"], capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    mods = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines()
            if line.startswith("import time:")}
    assert "numpy" in mods and not mods & HEAVY, mods & HEAVY
    calls: list[int] = []
    real = freshness.embed_texts
    monkeypatch.setattr(freshness, "embed_texts", lambda texts, embedder: calls.append(len(texts)) or real(texts, embedder))
    freshness.LIVE.clear()
    result = recall("hooked", "header row styling")
    assert calls == [] and "always" in result["learnings"][0]["rule"]


# --- the same floats as a plain loop -----------------------------------------------------------------

def reference_vectors(embedder: embed.StaticEmbedder, texts: list[str]) -> np.ndarray:
    """The static backend's definition, one text and one token at a time: each text's token rows
    (int8 code times its scale, in float32) added in order to a zero row, then its unknown words'
    directions, then every row L2-normalised. The batched path must give these floats, bit for bit."""
    from git_whetstone.semantics.wordpiece import WordPiece, basic_words

    embedder.embed(["load the table"])
    spell = WordPiece(embedder._wordpiece.vocab).word  # a tokenizer of its own: no cache shared
    out = np.zeros((len(texts), embedder.dim), np.float32)
    for row, text in enumerate(texts):
        unknown = []
        for word in embed._without_negations(basic_words(text)):
            ids = spell(word)
            if ids is None:
                unknown.append(word)
                continue
            for token in ids:
                out[row] += embedder._codes[token].astype(np.float32) * embedder._scales[token]
        for word in unknown:
            out[row] += embed._unknown_vector(word, embedder.dim, float(embedder.meta["unknown_norm"]))
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return out / norms


ODD_TEXTS = ["", " ", "\t\n", "🔥", "Use 🔥 for 🎉 hot items", "表格的圆角不要", "Ünïcödé Straße ΣΑΣ ΌΣΟΣ",
             "x" * 101, "supercalifragilisticexpialidocious" * 3, "don't, never, won’t!", "!!!...,,,;;",
             "a\x00b\tc\r\nd\x7fe", "\u200bzero\u200dwidth", "word " * 700, "Right-align the MSRP column."]


def eval_texts() -> list[str]:
    """Every text of the labeled set: entries, queries and pair texts."""
    found: list[str] = []
    for path in sorted((REPO / "tests" / "eval").rglob("*.json")):
        def walk(node) -> None:
            if isinstance(node, str):
                found.append(node)
            elif isinstance(node, dict):
                for value in node.values():
                    walk(value)
            elif isinstance(node, list):
                for value in node:
                    walk(value)
        walk(json.loads(path.read_text(encoding="utf-8")))
    return found


def same_floats(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit for bit (a bool: pytest would print both megabyte strings)."""
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_batched_vectors_are_the_plain_loops_floats() -> None:
    texts = eval_texts()
    assert len(texts) > 1000
    rng = np.random.default_rng(3)
    mixed = texts + ODD_TEXTS * 3
    mixed = [mixed[i] for i in rng.permutation(len(mixed))]  # odd texts among ordinary ones, batches of every length
    expected = reference_vectors(STATIC, mixed)
    fresh = embed.StaticEmbedder()  # nothing cached yet: words met for the first time
    assert same_floats(fresh.embed(mixed), expected)
    assert same_floats(fresh.embed(mixed), expected)  # and again, every word cached
    for text in ODD_TEXTS:
        assert same_floats(fresh.embed([text]), reference_vectors(STATIC, [text])), text
    many = (mixed * (2 * STATIC.BATCH // len(mixed) + 2))[: 2 * STATIC.BATCH + 77]  # across batch and pool edges
    assert same_floats(fresh.embed(many), reference_vectors(STATIC, many))


def test_negations_are_left_out_as_the_plain_loop_does() -> None:
    """`_without_negations` (its shortcut for texts without an apostrophe included) against the
    rule read one word at a time: a negation word goes, and so does a contraction "…n ' t"."""
    from git_whetstone.semantics.words import NEGATIONS

    def plain(words: list[str]) -> list[str]:
        out, i = [], 0
        while i < len(words):
            if words[i] in NEGATIONS:
                i += 1
            elif i + 2 < len(words) and words[i + 1] in ("'", "\u2019") and words[i + 2] == "t" and words[i].endswith("n"):
                i += 3
            else:
                out.append(words[i])
                i += 1
        return out

    vocabulary = ["never", "not", "no", "avoid", "without", "don", "can", "won", "in", "t", "'", "\u2019",
                  "s", "use", "tables", "n", ",", "."]
    rng = np.random.default_rng(11)
    shortcut = 0
    for _ in range(20_000):
        words = [vocabulary[i] for i in rng.integers(0, len(vocabulary), rng.integers(0, 9))]
        assert embed._without_negations(words) == plain(words), words
        shortcut += not NEGATIONS.isdisjoint(words) and "'" not in words and "\u2019" not in words
    assert shortcut > 1000  # the shortcut was taken, and agreed
