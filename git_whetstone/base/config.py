"""Configuration (SPEC §6): defaults, `config.toml`, then `WHETSTONE_<KEY>` environment overrides.

Every value is checked here, so the rest of the library can trust a `Config`. A bad file or value
is a `WhetstoneError` that names the key and where it came from.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .errors import WhetstoneError

BACKENDS = ("hashing", "static", "sentence-transformers")
SUPERVISION_MODES = ("autonomous", "balanced", "supervised")

# Similarity thresholds are properties of an embedding backend, never shared between backends.
#   candidate the lowest cosine at which the judge looks at a stored rule for a new one at all
#   ask       the cosine from which two rules in the same or a close scope that share much of their
#             wording are "likely" one rule or opposites, and the caller is asked
#   mention   how far above the new rule's mean cosine to the store's entries a stored rule must
#             score to be mentioned as a look-alike of it (`similar`)
#   dedup     cosine from which two stored rules are compared as possible duplicates (compact, the
#             global layer's clusters, a global entry repeating a skill's in recall); the judge decides
#   grey, conflict   accepted in older config files, no longer used (the judge asks by the words, and
#             mentions by `mention`)
#   scope     cosine between two scope phrases that makes them "the same or close" scopes
#   learning_cutoff / issue_cutoff   relevance an entry needs to be recalled at all (issues lower)
#   band      how far below the intent's best match an entry may score and still be recalled
#   lexical   how much the words an entry shares with the intent add to its relevance (BM25, each
#             word's idf on a 0-1 scale: a word only one entry holds adds about this much)
#   silence   the relevance the intent's best match must reach for anything to be matched at all: an
#             off-topic intent gets the always-on entries, and those of the scopes it names, only
#   rare_word a word's idf (the same 0-1 scale) from which an entry that shares it with the intent is a
#             candidate whatever its cosine (1: only words no other entry holds; above 1: never)
#   scope_merge   cosine between two scope phrases from which compact's report suggests merging
#                 scopes whose names differ (it merges only names that are the same after normalisation)
# `ask` and `mention` are fitted by scripts/fit_judge.py on the dev split of the labeled pairs and
# stream stores in tests/eval, the recall bars (cutoffs, band, lexical, rare_word, silence) by
# scripts/fit_recall.py on the dev split of its recall set; `python3 dev.py eval` reports the
# held-out split. `lexical` fitted to 0 where adding the words to every relevance cost PrefEval more
# than it bought on the labeled set (bench/RESULTS.md#quality).
THRESHOLD_NAMES = ("candidate", "dedup", "ask", "mention", "scope", "scope_merge", "learning_cutoff", "issue_cutoff",
                   "band", "lexical", "rare_word", "silence")
RETIRED_THRESHOLDS = ("grey", "conflict")  # read in a config file without complaint, and not used
DEFAULT_THRESHOLDS: dict[str, dict[str, float]] = {
    "hashing": {
        "candidate": 0.25, "dedup": 0.66, "ask": 0.65, "mention": 0.20, "scope": 0.45, "scope_merge": 0.90,
        "learning_cutoff": 0.20, "issue_cutoff": 0.20, "band": 0.14, "lexical": 0.0, "rare_word": 1.0,
        "silence": 0.22,
    },
    # The token table distilled from all-MiniLM-L6-v2 (the default backend).
    "static": {
        "candidate": 0.30, "dedup": 0.55, "ask": 0.75, "mention": 0.15, "scope": 0.50, "scope_merge": 0.90,
        "learning_cutoff": 0.28, "issue_cutoff": 0.25, "band": 0.10, "lexical": 0.0, "rare_word": 1.0,
        "silence": 0.34,
    },
    # all-MiniLM-L6-v2
    "sentence-transformers": {
        "candidate": 0.25, "dedup": 0.50, "ask": 0.80, "mention": 0.22, "scope": 0.40, "scope_merge": 0.90,
        "learning_cutoff": 0.25, "issue_cutoff": 0.22, "band": 0.10, "lexical": 0.0, "rare_word": 1.0,
        "silence": 0.30,
    },
}


def _default_store_root() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "whetstone"


def config_path() -> Path:
    """Where the config file is read from: $WHETSTONE_CONFIG, else the XDG config directory."""
    explicit = os.environ.get("WHETSTONE_CONFIG")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "whetstone" / "config.toml"


@dataclass(frozen=True)
class Config:
    store_root: Path = field(default_factory=_default_store_root)
    embedding_backend: str = "static"
    embedding_model: str = "all-MiniLM-L6-v2"
    learnings_k: int = 12
    issues_k: int = 8
    always_k: int = 20  # entries marked `applies: always` recall returns on every call
    learnings_half_life_days: float = 180.0
    learnings_decay: bool = True
    promotion_threshold: int = 4
    retire_weight_threshold: float = 0.15
    consult_global: bool = True
    global_skill_count: int = 3
    supervision: str = "balanced"
    lock_timeout: float = 10.0
    # seconds the MCP server waits for the host's model when it asks it about a look-alike (MCP
    # sampling, when the client offers it); 0: never ask it
    sampling_timeout: float = 8.0  # under lock_timeout: the store stays locked while the host's model answers
    thresholds: dict[str, dict[str, float]] = field(
        default_factory=lambda: {b: dict(t) for b, t in DEFAULT_THRESHOLDS.items()})

    def threshold(self, name: str) -> float:
        """The named similarity threshold for the configured embedding backend."""
        return self.thresholds[self.embedding_backend][name]


# --- parsing -------------------------------------------------------------------------------------

def _as_int(low: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        if isinstance(value, bool):
            raise ValueError(f"expected an integer ≥ {low}")
        try:
            number = int(value) if isinstance(value, (int, str)) else None
        except ValueError:
            number = None
        if number is None or number < low:
            raise ValueError(f"expected an integer ≥ {low}")
        return number
    return parse


def _as_float(low: float, high: float | None = None, *, open_low: bool = False) -> Callable[[Any], float]:
    def parse(value: Any) -> float:
        if isinstance(value, bool):
            raise ValueError("expected a number")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError("expected a number") from None
        too_low = number <= low if open_low else number < low
        if too_low or (high is not None and number > high) or number != number:
            bound = f"> {low}" if open_low else f"≥ {low}"
            raise ValueError(f"expected a number {bound}" + (f" and ≤ {high}" if high is not None else ""))
        return number
    return parse


def _as_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _one_of(choices: tuple[str, ...]) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if not isinstance(value, str) or value.strip().lower() not in choices:
            raise ValueError("expected one of " + ", ".join(choices))
        return value.strip().lower()
    return parse


def _as_text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a non-empty string")
    return value.strip()


def _as_path(value: Any) -> Path:
    try:
        return Path(_as_text(value)).expanduser()
    except RuntimeError:  # "~someone/…" for a user this machine does not know
        raise ValueError("expected a directory path (its '~user' part names no known user)") from None


PARSERS: dict[str, Callable[[Any], Any]] = {
    "store_root": _as_path,
    "embedding_backend": _one_of(BACKENDS),
    "embedding_model": _as_text,
    "learnings_k": _as_int(1),
    "issues_k": _as_int(1),
    "always_k": _as_int(0),
    "learnings_half_life_days": _as_float(0, open_low=True),
    "learnings_decay": _as_bool,
    "promotion_threshold": _as_int(2),
    "retire_weight_threshold": _as_float(0, 1),
    "consult_global": _as_bool,
    "global_skill_count": _as_int(2),
    "supervision": _one_of(SUPERVISION_MODES),
    "lock_timeout": _as_float(0, open_low=True),
    "sampling_timeout": _as_float(0),
}
RETIRED_KEYS = ("vector_scan",)  # read in a config file without complaint, and not used
_unit = _as_float(-1, 1)


def _env_name(*parts: str) -> str:
    return "WHETSTONE_" + "_".join(p.upper().replace("-", "_") for p in parts)


def _closest(name: str, known: list[str]) -> str:
    import difflib

    def norm(text: str) -> str:
        return text.strip().lower().replace("-", "_")

    exact = [k for k in known if norm(k) == norm(name)]
    match = exact or difflib.get_close_matches(norm(name), known, n=1)
    return f" (did you mean '{match[0]}'?)" if match else ""


def _read_file(path: Path, explicit: bool = False) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if explicit:  # WHETSTONE_CONFIG names a file that is not there: a typo, not "no config"
            raise WhetstoneError(f"WHETSTONE_CONFIG: config file {path} does not exist") from None
        return {}
    except OSError as exc:
        raise WhetstoneError(f"{path}: cannot read config: {exc.strerror}") from None
    try:
        import tomllib  # only when there is a file to read
        return tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:  # TOMLDecodeError is a ValueError
        raise WhetstoneError(f"{path}: not a valid TOML file: {exc}") from None


def load(store_root: str | os.PathLike[str] | None = None) -> Config:
    """Build the effective configuration: defaults < config file < environment < `store_root`."""
    path = config_path()
    values: dict[str, Any] = {}
    thresholds = {b: dict(t) for b, t in DEFAULT_THRESHOLDS.items()}

    def put(key: str, value: Any, origin: str) -> None:
        try:
            values[key] = PARSERS[key](value)
        except ValueError as exc:
            raise WhetstoneError(f"{origin}: {key}: {exc}, got {value!r}") from None

    def put_threshold(backend: str, name: str, value: Any, origin: str) -> None:
        try:
            thresholds[backend][name] = _unit(value)
        except ValueError as exc:
            raise WhetstoneError(f"{origin}: {backend}.{name}: {exc}, got {value!r}") from None

    for key, value in _read_file(path, explicit=bool(os.environ.get("WHETSTONE_CONFIG"))).items():
        if key in RETIRED_KEYS:
            continue
        if key in PARSERS:
            put(key, value, str(path))
        elif key in BACKENDS and not isinstance(value, dict):
            raise WhetstoneError(
                f"{path}: {key}: expected a table of similarity thresholds ([{key}] with "
                f"{', '.join(THRESHOLD_NAMES)}), got {value!r}")
        elif key in BACKENDS:
            for name, number in value.items():
                if name in RETIRED_THRESHOLDS:
                    continue
                if name not in THRESHOLD_NAMES:
                    raise WhetstoneError(
                        f"{path}: unknown threshold '{key}.{name}'{_closest(name, list(THRESHOLD_NAMES))}")
                put_threshold(key, name, number, str(path))
        else:
            known = list(PARSERS) + list(BACKENDS)
            raise WhetstoneError(f"{path}: unknown key '{key}'{_closest(key, known)}")

    for key in PARSERS:
        env = os.environ.get(_env_name(key))
        if env is not None and env != "":
            put(key, env, _env_name(key))
    for backend in BACKENDS:
        for name in THRESHOLD_NAMES:
            env = os.environ.get(_env_name(backend, name))
            if env:
                put_threshold(backend, name, env, _env_name(backend, name))

    if store_root is not None and str(store_root) != "":
        put("store_root", str(store_root), "--store-root")
    return Config(**values, thresholds=thresholds)
