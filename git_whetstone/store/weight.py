"""How firmly a learning holds today (SPEC §5): `weight = r × recency`.

`r = 1 − 1/(1 + recurrence)` grows with each repetition; `recency = exp(−ln2 · Δdays / H)` halves
every half-life `H` (`learnings_half_life_days`) since the learning was last seen. The weight is
derived, never stored.
"""
from __future__ import annotations

import datetime as dt
import math

import numpy as np

from ..base.config import Config


def weight(recurrence: int, last_seen: str | None, day: dt.date, config: Config) -> float:
    """One learning's weight, rounded as shown to people and agents."""
    seen = dt.date.fromisoformat(last_seen).toordinal() if last_seen else 0
    return round(float(weights(np.array([recurrence]), np.array([seen]), day, config)[0]), 4)


def strength(recurrence: np.ndarray) -> np.ndarray:
    """A learning's weight before decay: `1 − 1/(1 + recurrence)`."""
    return 1.0 - 1.0 / (1.0 + recurrence)


def weights(recurrence: np.ndarray, last_seen: np.ndarray, day: dt.date, config: Config) -> np.ndarray:
    """`weight` over arrays (last_seen as day numbers, 0 when unknown: no decay)."""
    r = strength(recurrence)
    if not config.learnings_decay:
        return r
    days = np.where(last_seen > 0, np.maximum(0, day.toordinal() - last_seen), 0)
    return r * np.exp(-math.log(2) * days / config.learnings_half_life_days)


def days_to_retire(weight_now: np.ndarray, config: Config) -> np.ndarray:
    """Days until each weight decays below `retire_weight_threshold` (when compact retires it),
    assuming it is not seen again: `H · log2(w / threshold)`; 0 when it is below already, inf
    when nothing retires (no decay, or a threshold of 0)."""
    if not config.learnings_decay or config.retire_weight_threshold <= 0:
        return np.full(len(weight_now), np.inf)
    ratio = np.maximum(np.asarray(weight_now, float), 1e-300) / config.retire_weight_threshold
    return np.maximum(0.0, config.learnings_half_life_days * np.log2(ratio))
