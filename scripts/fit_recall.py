"""Fit recall's bars per backend on the dev split of tests/eval, and show the frontier.

    .venv/bin/python scripts/fit_recall.py                     # every installed backend
    .venv/bin/python scripts/fit_recall.py --backend static --prefeval

Recall keeps an entry when its relevance to some clause of the intent (its scope's and its own
text's likeness, plus the words it shares with the clause, weighted by `lexical`) clears the bar of
its kind (`learning_cutoff`, `issue_cutoff`) and lies within `band` of that clause's best match, or
shares a word as rare as `rare_word` with the intent; an intent whose best match stays under
`silence` gets the always-on entries and only those hits.
For every point of a grid the script recalls each dev query of the labeled set (tests/eval), from
the stores with their always-on marks and without them, as `python3 dev.py eval` does, and
chooses, in the order the product puts them: quiet first (off-topic intents get at most 0.5
entries that are not always-on, on average); then the best macro F1 with marks (the matching
itself: without marks two thirds of the relevant pairs are rules for every task, which no likeness
finds), within 0.005 of the best; then the best without marks. It prints the frontier (the best F1 at
each precision) and the chosen bars with their held-out figures; the bars go into
git_whetstone/base/config.py's DEFAULT_THRESHOLDS by hand.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

GRID = {
    "learning_cutoff": {"hashing": [0.17, 0.20, 0.23], "static": [0.25, 0.28, 0.31],
                        "sentence-transformers": [0.22, 0.25, 0.28]},
    "silence": {"hashing": [0.22, 0.26, 0.30, 0.34], "static": [0.30, 0.34, 0.38, 0.42],
                "sentence-transformers": [0.30, 0.34, 0.38, 0.42]},
    "band": [0.10, 0.14],
    "lexical": [0.0, 0.1, 0.2],
    "rare_word": [1.0],  # SPEC §5's promise: a word no other entry holds (the cost is in bench/RESULTS.md)
}


def memo(embedder):
    """The backend's embedder, remembering what it embedded (the grid asks the same clauses again)."""
    seen: dict[str, object] = {}
    embed = embedder.embed

    def cached(texts):
        import numpy as np
        missing = [t for t in texts if t not in seen]
        if missing:
            seen.update(zip(missing, embed(missing)))
        return np.stack([seen[t] for t in texts])
    embedder.embed = cached
    return embedder


def main() -> int:
    from tests.eval.run import DAY, PREFEVAL, eval_prefeval, eval_recall, installed, load_set, load_skill

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=["hashing", "static", "sentence-transformers"])
    parser.add_argument("--prefeval", action="store_true", help="also report PrefEval for the chosen bars")
    args = parser.parse_args()
    data = load_set()
    for backend in args.backend or [b for b in ("hashing", "static", "sentence-transformers") if installed(b)]:
        with tempfile.TemporaryDirectory(prefix="whetstone-fit-") as root:
            os.environ.update(WHETSTONE_STORE_ROOT=root, WHETSTONE_TODAY=DAY, HF_HUB_OFFLINE="1")
            from git_whetstone.base.config import load
            from git_whetstone.semantics.embed import get_embedder
            config = dataclasses.replace(load(Path(root)), embedding_backend=backend, consult_global=False)
            if backend == "sentence-transformers":
                from tests.helpers import model_dir
                config = dataclasses.replace(config, embedding_model=str(model_dir()))
            memo(get_embedder(backend, config.embedding_model))
            for skill in data["skills"]:
                load_skill(config, skill)
                load_skill(config, skill, marked=False)

            def figures(bars: dict[str, float], split: str) -> dict[str, float]:
                thresholds = {**config.thresholds, backend: {**config.thresholds[backend], **bars}}
                c = dataclasses.replace(config, thresholds=thresholds)
                marked = eval_recall(c, data["skills"], split, [])
                plain = eval_recall(c, data["skills"], split, [], marked=False)
                return {"f1": plain["f1"], "p": plain["precision"], "r": plain["recall"], "f1_marked": marked["f1"],
                        "off": marked["offtopic_not_always"], "c": c}

            grid = {}
            cutoffs = GRID["learning_cutoff"][backend]
            for lc, ic, silence, band, lexical, rare in itertools.product(
                    cutoffs, cutoffs, GRID["silence"][backend], GRID["band"], GRID["lexical"], GRID["rare_word"]):
                if ic > lc:  # issues are cheap to include and costly to miss: their bar is never higher
                    continue
                bars = {"learning_cutoff": lc, "issue_cutoff": ic, "silence": silence, "band": band,
                        "lexical": lexical, "rare_word": rare}
                grid[tuple(bars.items())] = figures(bars, "dev")
            quiet = {k: f for k, f in grid.items() if f["off"] <= 0.5} or grid
            top = max(f["f1_marked"] for f in quiet.values())
            near = {k: f for k, f in quiet.items() if f["f1_marked"] >= top - 0.005}
            best = max(near, key=lambda k: (near[k]["f1"], near[k]["f1_marked"]))
            print(f"\n== {backend}: {len(grid)} points, {len(quiet)} quiet on dev; frontier (no marks, dev):")
            frontier: dict[float, tuple] = {}
            for k, f in quiet.items():
                p = round(f["p"], 2)
                if p not in frontier or f["f1"] > quiet[frontier[p]]["f1"]:
                    frontier[p] = k
            for p in sorted(frontier):
                f = quiet[frontier[p]]
                print(f"  P {f['p']:.3f} R {f['r']:.3f} F1 {f['f1']:.3f} marked {f['f1_marked']:.3f} "
                      f"off {f['off']:.2f}  {dict(frontier[p])}")
            chosen = dict(best)
            test = figures(chosen, "test")
            f = grid[best]
            print(f"chosen {chosen}\n  dev  F1 {f['f1']:.3f} (P {f['p']:.3f} R {f['r']:.3f}) marked {f['f1_marked']:.3f} "
                  f"off {f['off']:.2f}\n  test F1 {test['f1']:.3f} (P {test['p']:.3f} R {test['r']:.3f}) "
                  f"marked {test['f1_marked']:.3f} off {test['off']:.2f}")
            if args.prefeval:
                print("  PrefEval", eval_prefeval(test["c"], PREFEVAL))
    return 0


if __name__ == "__main__":
    sys.exit(main())
