"""Fit the judge's `ask` and `mention` bars per backend on the dev split, and show the frontier.

    .venv/bin/python scripts/fit_judge.py                     # every installed backend
    .venv/bin/python scripts/fit_judge.py --backend static

The judge is sure of "same" and "contradicts" from the words alone (semantics/judge.py); these
bars decide the rest. `ask`: the cosine from which two rules in close scopes that share much of
their wording are *likely* one rule or opposites (the caller is asked). `mention`: how far above
the new rule's mean cosine to its store a stored rule must score to be *related* (written, and
named in `similar`). Two sets measure them (tests/eval, LABELING.md):

- the labeled pairs: each pair's new rule judged against its skill's entries and the pair's
  existing rule, as `python3 dev.py eval` captures it;
- the stream stores: every rule of a skill judged against the rules captured before it (all
  distinct and consistent, so every question is noise).

For each (ask, mention) on a grid the script replays what capture does with the judge's answers
(`judge.triage` over the nearest entries, ordered as `Context.nearest` orders them) and chooses, on
the dev split, in the order the product puts them: questions within their targets (stream ≤ 10%,
distinct and compatible pairs ≤ 25%; on dev within 80% of them, so the held-out split keeps to
them); then the most look-alikes caught (asked or mentioned),
within 0.02 of the best; then the most contradictions stopped, within 0.02; then the fewest
mentions. It prints the frontier and the chosen bars with their held-out figures; the bars go into
git_whetstone/base/config.py's DEFAULT_THRESHOLDS by hand, and `python3 dev.py eval` (captures
through the MCP server) reports the figures that count.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from git_whetstone.base.config import BACKENDS, load  # noqa: E402
from git_whetstone.format.layout import scope_key  # noqa: E402
from git_whetstone.ops.writing.context import BASELINE_FROM, NEAREST, SCOPE_PULL  # noqa: E402
from git_whetstone.semantics import judge  # noqa: E402
from git_whetstone.semantics.embed import get_embedder  # noqa: E402
from tests.eval.run import load_set, split_of  # noqa: E402

ASK = [round(x, 2) for x in np.arange(0.55, 0.91, 0.05)]
MENTION = [round(x, 2) for x in np.arange(0.10, 0.36, 0.025)]
QUESTIONS = {"stream": 0.10, "pairs": 0.25}  # the targets questions must stay within
MARGIN = 0.8  # on dev, within this share of them, so that the held-out split stays within them too
TIE = 0.02


class Replay:
    """The stores of the pairs and the streams of one split, embedded once: each new rule with its
    candidates (entry id, body, cosine, same or close scope) and its store's baseline."""

    def __init__(self, config, data, split: str) -> None:
        self.config = config
        embedder = get_embedder(config.embedding_backend, config.embedding_model)
        texts = set()
        for p in data["dedup"] + data["conflict"] + data["judge"]:
            texts |= {p["new"], p["existing"], p.get("scope") or "general", p.get("new_scope") or p.get("scope") or "general"}
        for skill in data["skills"]:
            texts |= {t for e in skill["entries"] for t in (e["body"], e["scope"])}
        for stream in data["streams"]:
            texts |= {t for r in stream["rules"] for t in (r["body"], r["scope"])}
        ordered = sorted(texts)
        self.vector = dict(zip(ordered, embedder.embed(ordered)))
        skills = {s["skill"]: s for s in data["skills"]}
        self.pairs = []  # (label, first id, new body, candidates, baseline)
        for p in data["dedup"] + data["conflict"] + data["judge"]:
            if split_of(p["id"]) != split:
                continue
            scope = p.get("scope") or "general"
            entries = [(e["id"], e["body"], e["scope"]) for e in skills.get(p.get("skill"), {}).get("entries", [])]
            first = next((i for i, body, s in entries if self._same(p["existing"], scope, body, s)), None)
            if first is None:
                first = "X"
                entries.append((first, p["existing"], scope))
            self.pairs.append((p["label"], first, p["new"], *self._near(p["new"], p.get("new_scope") or scope, entries)))
        self.stream = []  # (new body, candidates, baseline)
        for stream in data["streams"]:
            if stream["split"] != split:
                continue
            entries = []
            for r in stream["rules"]:
                self.stream.append((r["body"], *self._near(r["body"], r["scope"], entries)))
                entries.append((r["id"], r["body"], r["scope"]))

    def _same(self, new: str, new_scope: str, old: str, scope: str) -> bool:
        cos = float(self.vector[new] @ self.vector[old])
        close = scope_key(new_scope) == scope_key(scope) or \
            float(self.vector[new_scope] @ self.vector[scope]) >= self.config.threshold("scope")
        return judge.judge(new, old, cos, self.config, same_scope=close).relation == judge.SAME

    def _near(self, body: str, scope: str, entries: list[tuple[str, str, str]]):
        """`Context.nearest` over `entries`: the closest by cosine plus a close scope's pull."""
        rows = []
        for entry_id, other, other_scope in entries:
            cos = float(self.vector[body] @ self.vector[other])
            scope_cos = float(self.vector[scope] @ self.vector[other_scope])
            if cos >= self.config.threshold("candidate"):
                close = scope_key(scope) == scope_key(other_scope) or scope_cos >= self.config.threshold("scope")
                rows.append((-(cos + SCOPE_PULL * scope_cos), entry_id, other, cos, close))
        rows.sort()
        baseline = 0.0
        if len(entries) >= BASELINE_FROM:
            baseline = float(np.mean([self.vector[body] @ self.vector[other] for _, other, _ in entries]))
        return [(entry_id, other, cos, close) for _, entry_id, other, cos, close in rows[:NEAREST]], baseline

    def outcome(self, config, body: str, near, baseline: float) -> tuple[str, list[str]]:
        """What a balanced capture of `body` does: reinforce, conflict, ask or write (with the ids it names)."""
        judged = [(entry_id, judge.judge(body, other, cos, config, same_scope=close, baseline=baseline))
                  for entry_id, other, cos, close in near]
        found = judge.triage(judged)
        if found.decisive:
            return ("reinforce" if found.decisive[1].relation == judge.SAME else "conflict"), [found.decisive[0]]
        if found.likely:
            return "ask", [e for e, _ in found.likely]
        return "write", [e for e, _ in found.mentioned]

    def figures(self, ask: float, mention: float) -> dict[str, float]:
        config = dataclasses.replace(self.config, thresholds={
            **self.config.thresholds, self.config.embedding_backend: {
                **self.config.thresholds[self.config.embedding_backend], "ask": ask, "mention": mention}})
        t = dict.fromkeys(("related", "caught", "cons", "stopped", "unrelated", "asked", "mentioned"), 0)
        for label, first, body, near, baseline in self.pairs:
            status, named = self.outcome(config, body, near, baseline)
            related = label in ("duplicate", "conflict")
            t["related"] += related
            t["caught"] += related and first in named and not (label == "conflict" and status == "reinforce")
            t["cons"] += label == "conflict"
            t["stopped"] += label == "conflict" and status in ("ask", "conflict") and first in named
            t["unrelated"] += not related
            t["asked"] += not related and status in ("ask", "conflict")
            t["mentioned"] += not related and status == "write" and bool(named)
        stream = [self.outcome(config, body, near, baseline) for body, near, baseline in self.stream]
        return {"caught": t["caught"] / t["related"], "stopped": t["cons"] and t["stopped"] / t["cons"],
                "pairs_asked": t["asked"] / t["unrelated"], "pairs_mentioned": t["mentioned"] / t["unrelated"],
                "stream_asked": sum(s in ("ask", "conflict") for s, _ in stream) / len(stream),
                "stream_mentioned": sum(s == "write" and bool(n) for s, n in stream) / len(stream)}


def choose(grid: dict[tuple[float, float], dict[str, float]]) -> tuple[float, float]:
    """The bars the product's order of figures picks (see the module's docstring)."""
    fits = {k: f for k, f in grid.items()
            if f["stream_asked"] <= MARGIN * QUESTIONS["stream"] and f["pairs_asked"] <= MARGIN * QUESTIONS["pairs"]} or grid
    best = max(f["caught"] for f in fits.values())
    fits = {k: f for k, f in fits.items() if f["caught"] >= best - TIE}
    best = max(f["stopped"] for f in fits.values())
    fits = {k: f for k, f in fits.items() if f["stopped"] >= best - TIE}
    return min(fits, key=lambda k: (fits[k]["stream_mentioned"] + fits[k]["pairs_mentioned"],
                                    fits[k]["stream_asked"] + fits[k]["pairs_asked"], k))


def row(name: str, f: dict[str, float]) -> str:
    return (f"{name:<22} caught {f['caught']:.2f}  contradictions stopped {f['stopped']:.2f}  "
            f"pairs asked {f['pairs_asked']:.2f} mentioned {f['pairs_mentioned']:.2f}  "
            f"stream asked {f['stream_asked']:.2f} mentioned {f['stream_mentioned']:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=BACKENDS)
    args = parser.parse_args()
    backends = args.backend or [b for b in BACKENDS
                                if b != "sentence-transformers" or importlib.util.find_spec("sentence_transformers")]
    data = load_set()
    for backend in backends:
        config = dataclasses.replace(load(), embedding_backend=backend)
        if backend == "sentence-transformers" and not os.environ.get("WHETSTONE_EMBEDDING_MODEL"):
            from tests.helpers import model_dir
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            config = dataclasses.replace(config, embedding_model=str(model_dir()))
        dev, test = Replay(config, data, "dev"), Replay(config, data, "test")
        grid = {(a, m): dev.figures(a, m) for a in ASK for m in MENTION}
        ask, mention = choose(grid)
        now = (config.threshold("ask"), config.threshold("mention"))
        print(f"{backend}: ask = {ask:.2f}, mention = {mention:.3f} (now {now[0]:.2f}, {now[1]:.3f})")
        print("  " + row("dev", grid[(ask, mention)]))
        print("  " + row("held-out", test.figures(ask, mention)))
        print("  the frontier on dev at that ask (mention: caught against mentions):")
        for m in MENTION:
            print("    " + row(f"mention {m:.3f}", grid[(ask, m)]))
        print("  at that mention (ask: questions against contradictions stopped):")
        for a in ASK:
            print("    " + row(f"ask {a:.2f}", grid[(a, mention)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
