"""recall (SPEC §4, §5): the learnings and issues that matter for an elaborated intent.

Recipe: embed the intent and each of its clauses; a scope matches when its centroid or phrase
clears the cutoff for its kind (issues have the lower one), and an entry also counts on its own
when its text is close enough to the intent. Learnings are ranked by relevance and weight and
picked by MMR so the k returned are not k paraphrases; issues are ranked and capped, and what is
left out is counted. When nothing matches, a small floor of the strongest learnings and the
nearest issue scope is returned instead, flagged `fallback`.
"""
from __future__ import annotations

import datetime as dt
import math
import re
from typing import Any

import numpy as np

from . import events
from . import index as index_mod
from .config import Config, load
from .embed import content_words, get_embedder
from .errors import WhetstoneError, shown
from .judge import contradiction
from .store import Store, today

MAX_INTENT = 20_000
MMR_LAMBDA = 0.75
MMR_POOL = 200
FALLBACK_LEARNINGS = 3

HOW_TO_USE = (
    "Issues are mandatory: apply every returned issue, whatever else the task suggests. Learnings are "
    "preferences weighted 0-1 (how firmly to apply them): follow strong ones by default and weigh weak ones "
    "against the request. 'conflicts' names returned entries that contradict each other: the issue wins, or "
    "ask the user. 'fallback' true means nothing matched the intent closely and these are the strongest "
    "entries overall; 'omitted' counts relevant entries left out by the caps.")
CAPTURE_CONTRACT = (
    "The moment you act on a correction from the user, call capture with the generalized rule as body, "
    "polarity 'learning' for a taste or 'issue' for an always/never rule, a short scope phrase for when it "
    "applies, the user's words as provenance, and this run_id. To strengthen, weaken, reword or remove an entry "
    "shown here, call revise with its id. Relay the returned confirmation to the user.")


def weight(recurrence: int, last_seen: str | None, day: dt.date, config: Config) -> float:
    """`r × recency`: r = 1 − 1/(1 + recurrence), recency halves every half-life since last_seen."""
    seen = dt.date.fromisoformat(last_seen).toordinal() if last_seen else 0
    return round(float(weights(np.array([recurrence]), np.array([seen]), day, config)[0]), 4)


def weights(recurrence: np.ndarray, last_seen: np.ndarray, day: dt.date, config: Config) -> np.ndarray:
    """`weight` over arrays (last_seen as day numbers, 0 when unknown: no decay)."""
    r = 1.0 - 1.0 / (1.0 + recurrence)
    if not config.learnings_decay:
        return r
    days = np.where(last_seen > 0, np.maximum(0, day.toordinal() - last_seen), 0)
    return r * np.exp(-math.log(2) * days / config.learnings_half_life_days)


def clauses(intent: str) -> list[str]:
    """The intent and its parts: an elaborated intent lists several dimensions of one task."""
    parts = [p.strip() for p in re.split(r"[,;:\n•|()]|\s[-–—]\s|\band\b|\bthen\b|&", intent)]
    seen, out = set(), [intent]
    for part in parts:
        key = " ".join(content_words(part))
        if key and key not in seen and part != intent:
            seen.add(key)
            out.append(part)
    return out[:16]


def check_k(value: Any, name: str = "learnings_k") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100:
        raise WhetstoneError(f"{name} must be a whole number from 1 to 100, got {shown(value)}")
    return value


def recall(skill: str, intent: str, learnings_k: int | None = None, *, config: Config | None = None) -> dict[str, Any]:
    """The learnings and issues relevant to `intent` in `skill`'s store, as the JSON of SPEC §4.
    An unknown or empty skill gives empty lists, not an error."""
    config = config or load()
    if not isinstance(intent, str) or not intent.strip():
        raise WhetstoneError("intent is empty: describe the task and its dimensions")
    if len(intent) > MAX_INTENT:
        raise WhetstoneError(f"intent is too long ({len(intent)} characters; at most {MAX_INTENT})")
    k = check_k(config.learnings_k if learnings_k is None else learnings_k)
    store = Store.open(config, skill)
    day = today()
    result: dict[str, Any] = {
        "skill": store.skill, "run_id": events.new_run_id(day), "learnings": [], "issues": [],
        "conflicts": [], "fallback": False, "omitted": {"learnings": 0, "issues": 0},
        "how_to_use": HOW_TO_USE, "capture_contract": CAPTURE_CONTRACT, "warnings": [],
    }
    if not store.exists:
        return result
    embedder = get_embedder(config.embedding_backend, config.embedding_model)
    snap = index_mod.snapshot(store, embedder)
    result["warnings"] = list(snap.warnings)
    if snap.count:
        _rank(snap, embedder.embed(clauses(intent)), k, day, config, result)
    events.append(store.path, "recall", run_id=result["run_id"], intent=intent[:500],
                  learnings=[e["id"] for e in result["learnings"]], issues=[e["id"] for e in result["issues"]],
                  fallback=result["fallback"], omitted=result["omitted"])
    return result


def _rank(snap: index_mod.Snapshot, queries: np.ndarray, k: int, day: dt.date, config: Config,
          result: dict[str, Any]) -> None:
    entry_sim = (snap.vectors @ queries.T).max(axis=1)
    scope_sim = np.maximum(snap.centroids @ queries.T, snap.phrases @ queries.T).max(axis=1)
    scope_score = scope_sim[snap.scope_of]
    alive, key = snap.alive, snap.id_key
    is_learning = alive & snap.is_learning
    is_issue = alive & ~snap.is_learning
    weight_of = np.where(is_learning, weights(snap.recurrence, snap.last_seen, day, config), 0.0)
    relevance = 0.5 * scope_score + 0.5 * entry_sim
    entry_cut = config.threshold("entry_cutoff")

    learn_hit = is_learning & ((scope_score >= config.threshold("learning_cutoff")) | (entry_sim >= entry_cut))
    candidates = np.flatnonzero(learn_hit)
    if len(candidates):
        value = relevance[candidates] * (0.5 + 0.5 * weight_of[candidates])
        chosen = _mmr(snap.vectors, candidates, value, key[candidates], k)
        result["omitted"]["learnings"] = int(len(candidates) - len(chosen))
    else:
        pool = np.flatnonzero(is_learning)
        chosen = list(pool[np.lexsort((key[pool], -weight_of[pool]))][: min(k, FALLBACK_LEARNINGS)])
        result["fallback"] = bool(chosen)

    issue_hit = is_issue & ((scope_score >= config.threshold("issue_cutoff")) | (entry_sim >= entry_cut))
    issues = np.flatnonzero(issue_hit)
    if not len(issues) and is_issue.any():
        nearest = np.flatnonzero(is_issue)
        best = nearest[np.lexsort((key[nearest], -scope_score[nearest]))[0]]
        issues = nearest[snap.scope_of[nearest] == snap.scope_of[best]]
        result["fallback"] = True
    issues = issues[np.lexsort((key[issues], -relevance[issues]))]
    result["omitted"]["issues"] = int(max(0, len(issues) - config.issues_k))
    issues = issues[: config.issues_k]

    for i in chosen:
        e = snap.entries[i]
        result["learnings"].append({"id": e.id, "rule": e.body, "scope": e.scope, "recurrence": e.recurrence,
                                    "weight": round(float(weight_of[i]), 4), "origin": "skill"})
    for i in issues:
        e = snap.entries[i]
        result["issues"].append({"id": e.id, "rule": e.body, "scope": e.scope, "origin": "skill"})
    result["conflicts"] = _conflicts(snap, [*chosen, *issues], config)


def _mmr(vectors: np.ndarray, candidates: np.ndarray, value: np.ndarray, key: np.ndarray, k: int) -> list[int]:
    """Maximal marginal relevance: each pick trades value against likeness to what was picked.
    Equal scores go to the lower id, so the result never depends on row order."""
    order = np.lexsort((key, -value))[:MMR_POOL]
    pool, value = candidates[order], value[order]
    sims = vectors[pool] @ vectors[pool].T
    picked: list[int] = []
    closest = np.zeros(len(pool))
    available = np.ones(len(pool), bool)
    for step in range(min(k, len(pool))):
        score = np.where(available, MMR_LAMBDA * value - (1 - MMR_LAMBDA) * closest, -np.inf)
        best = int(np.argmax(score))  # pool is in (value, id) order, so the first maximum is the lowest id
        picked.append(best)
        available[best] = False
        closest = sims[best] if step == 0 else np.maximum(closest, sims[best])
    return [int(pool[i]) for i in picked]


def _conflicts(snap: index_mod.Snapshot, rows: list[int], config: Config) -> list[dict[str, Any]]:
    found = []
    sims = snap.vectors[rows] @ snap.vectors[rows].T if rows else np.zeros((0, 0))
    for i, a in enumerate(rows):
        for j in range(i + 1, len(rows)):
            b = rows[j]
            reason = contradiction(snap.entries[a].body, snap.entries[b].body, float(sims[i, j]), config)
            if reason:
                found.append({"ids": [snap.entries[a].id, snap.entries[b].id], "reason": reason})
    return found
