"""Configuration (SPEC §6): defaults < config.toml < WHETSTONE_<KEY> < --store-root, every value
checked, and a bad file or value a WhetstoneError that names the key (and where it came from)."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from git_whetstone.base import config
from git_whetstone.base.config import DEFAULT_THRESHOLDS, THRESHOLD_NAMES, Config, load
from git_whetstone.base.errors import WhetstoneError

from ..helpers import run_cli


@pytest.fixture
def cfg_file(tmp_path: Path) -> Path:
    """The default config file location (under the isolated XDG_CONFIG_HOME), not yet written."""
    path = Path(os.environ["XDG_CONFIG_HOME"]) / "whetstone" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def error_of(**env: str) -> WhetstoneError:
    """The WhetstoneError load() raises (with extra environment), failing the test if none."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        with pytest.raises(WhetstoneError) as info:
            load()
    assert "\n" not in info.value.message
    assert info.value.exit_code == 2
    return info.value


# --- where things come from -------------------------------------------------------------------------

def test_defaults(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("WHETSTONE_STORE_ROOT")
    monkeypatch.delenv("WHETSTONE_EMBEDDING_BACKEND")
    c = load()
    assert c.store_root == Path(os.environ["XDG_DATA_HOME"]) / "whetstone"
    assert (c.embedding_backend, c.embedding_model) == ("static", "all-MiniLM-L6-v2")
    assert (c.learnings_k, c.learnings_half_life_days, c.learnings_decay) == (12, 180.0, True)
    assert (c.promotion_threshold, c.retire_weight_threshold, c.consult_global) == (4, 0.15, True)
    assert c.supervision == "balanced" and c.lock_timeout > 0
    assert c.thresholds == DEFAULT_THRESHOLDS and c.thresholds is not DEFAULT_THRESHOLDS
    assert c.threshold("dedup") == DEFAULT_THRESHOLDS["static"]["dedup"]
    assert c == Config(store_root=c.store_root)


def test_default_store_root_without_xdg_data_home(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("WHETSTONE_STORE_ROOT")
    monkeypatch.delenv("XDG_DATA_HOME")
    assert load().store_root == Path(os.environ["HOME"]) / ".local" / "share" / "whetstone"


def test_config_path_follows_xdg_and_whetstone_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    assert config.config_path() == Path(os.environ["XDG_CONFIG_HOME"]) / "whetstone" / "config.toml"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert config.config_path() == Path(os.environ["HOME"]) / ".config" / "whetstone" / "config.toml"
    monkeypatch.setenv("WHETSTONE_CONFIG", str(tmp_path / "elsewhere.toml"))
    assert config.config_path() == tmp_path / "elsewhere.toml"


def test_file_values_are_read_and_typed(cfg_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv("WHETSTONE_STORE_ROOT")
    monkeypatch.delenv("WHETSTONE_EMBEDDING_BACKEND")
    write(cfg_file, f"""
store_root = "{tmp_path / 'from-file'}"
embedding_backend = "sentence-transformers"
embedding_model = "/models/minilm"
learnings_k = 7
issues_k = 3
learnings_half_life_days = 90
learnings_decay = false
promotion_threshold = 5
retire_weight_threshold = 0.2
consult_global = false
supervision = "Supervised"
lock_timeout = 2.5
""")
    c = load()
    assert c.store_root == tmp_path / "from-file"
    assert (c.embedding_backend, c.embedding_model) == ("sentence-transformers", "/models/minilm")
    assert (c.learnings_k, c.issues_k, c.promotion_threshold) == (7, 3, 5)
    assert c.learnings_half_life_days == 90.0 and isinstance(c.learnings_half_life_days, float)
    assert (c.learnings_decay, c.consult_global) == (False, False)
    assert (c.retire_weight_threshold, c.lock_timeout) == (0.2, 2.5)
    assert c.supervision == "supervised"
    assert c.threshold("dedup") == DEFAULT_THRESHOLDS["sentence-transformers"]["dedup"]


def test_environment_wins_over_the_file(cfg_file: Path, monkeypatch: pytest.MonkeyPatch):
    write(cfg_file, 'learnings_k = 7\nsupervision = "supervised"\nconsult_global = true\n')
    monkeypatch.setenv("WHETSTONE_LEARNINGS_K", "5")
    monkeypatch.setenv("WHETSTONE_CONSULT_GLOBAL", "no")
    c = load()
    assert (c.learnings_k, c.consult_global, c.supervision) == (5, False, "supervised")


def test_empty_environment_value_is_ignored(cfg_file: Path, monkeypatch: pytest.MonkeyPatch):
    write(cfg_file, "learnings_k = 7\n")
    monkeypatch.setenv("WHETSTONE_LEARNINGS_K", "")
    monkeypatch.setenv("WHETSTONE_HASHING_DEDUP", "")
    assert load().learnings_k == 7


def test_store_root_precedence(cfg_file: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    write(cfg_file, f'store_root = "{tmp_path / "file"}"\n')
    monkeypatch.setenv("WHETSTONE_STORE_ROOT", str(tmp_path / "env"))
    assert load().store_root == tmp_path / "env"
    assert load(tmp_path / "flag").store_root == tmp_path / "flag"
    assert load(str(tmp_path / "flag")).store_root == tmp_path / "flag"
    assert load("").store_root == tmp_path / "env"  # an empty --store-root means "not given"
    monkeypatch.delenv("WHETSTONE_STORE_ROOT")
    assert load().store_root == tmp_path / "file"


def test_store_root_expands_the_home_directory(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WHETSTONE_STORE_ROOT", "~/stores")
    assert load().store_root == Path(os.environ["HOME"]) / "stores"
    assert load("~/flag").store_root == Path(os.environ["HOME"]) / "flag"


def test_store_root_naming_an_unknown_user_is_a_clear_error(monkeypatch: pytest.MonkeyPatch):
    error = error_of(WHETSTONE_STORE_ROOT="~no-such-user-whetstone/stores")
    assert "WHETSTONE_STORE_ROOT" in error.message and "store_root" in error.message


def test_cli_store_root_flag_wins(cfg_file: Path, tmp_path: Path):
    write(cfg_file, f'store_root = "{tmp_path / "file"}"\n')
    proc = run_cli("--store-root", str(tmp_path / "flag"), "list", "--json",
                   env={"WHETSTONE_STORE_ROOT": str(tmp_path / "env")})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["store_root"] == str(tmp_path / "flag")
    proc = run_cli("list", "--json", env={"WHETSTONE_STORE_ROOT": str(tmp_path / "env")})
    assert json.loads(proc.stdout)["store_root"] == str(tmp_path / "env")


@pytest.mark.parametrize("key", [f.name for f in dataclasses.fields(Config) if f.name != "thresholds"])
def test_every_key_has_a_parser_and_an_environment_override(key: str, monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path):
    assert key in config.PARSERS
    samples = {"store_root": str(tmp_path / "r"), "embedding_backend": "sentence-transformers",
               "embedding_model": "other-model", "supervision": "autonomous",
               "learnings_decay": "false", "consult_global": "false", "vector_scan": "numpy"}
    default = getattr(Config(), key)
    raw = samples.get(key) or ("9" if isinstance(default, int) else "0.5")
    monkeypatch.setenv(f"WHETSTONE_{key.upper()}", raw)
    value = getattr(load(), key)
    assert value != default and value == config.PARSERS[key](raw)


# --- value parsing ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "expected"), [
    ("1", True), ("true", True), ("TRUE", True), ("yes", True), ("on", True), (" True ", True),
    ("0", False), ("false", False), ("No", False), ("off", False),
])
def test_booleans_from_the_environment(raw: str, expected: bool, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WHETSTONE_LEARNINGS_DECAY", raw)
    assert load().learnings_decay is expected


@pytest.mark.parametrize(("toml", "expected"), [("true", True), ("false", False), ('"yes"', True)])
def test_booleans_from_the_file(toml: str, expected: bool, cfg_file: Path):
    write(cfg_file, f"consult_global = {toml}\n")
    assert load().consult_global is expected


@pytest.mark.parametrize(("key", "raw"), [
    ("learnings_decay", "maybe"), ("consult_global", "2"),
    ("learnings_k", "twelve"), ("learnings_k", "0"), ("learnings_k", "-3"), ("learnings_k", "12.5"),
    ("promotion_threshold", "1"), ("issues_k", "none"), ("global_skill_count", "1"),
    ("learnings_half_life_days", "0"), ("learnings_half_life_days", "-5"), ("learnings_half_life_days", "nan"),
    ("learnings_half_life_days", "soon"), ("retire_weight_threshold", "1.5"), ("retire_weight_threshold", "-0.1"),
    ("lock_timeout", "0"), ("supervision", "lax"), ("embedding_backend", "openai"), ("embedding_model", "  "),
])
def test_bad_environment_value_names_the_key_and_the_variable(key: str, raw: str):
    error = error_of(**{f"WHETSTONE_{key.upper()}": raw})
    assert f"WHETSTONE_{key.upper()}" in error.message and f"{key}:" in error.message
    assert repr(raw) in error.message or not raw.strip()  # the message is one line: blanks fold


@pytest.mark.parametrize(("line", "key"), [
    ("learnings_k = 0", "learnings_k"), ("learnings_k = 12.0", "learnings_k"), ("learnings_k = true", "learnings_k"),
    ('learnings_k = "many"', "learnings_k"), ("learnings_k = [12]", "learnings_k"),
    ("learnings_decay = 1", "learnings_decay"), ('supervision = "always"', "supervision"),
    ("retire_weight_threshold = 2", "retire_weight_threshold"),
    ("learnings_half_life_days = nan", "learnings_half_life_days"),
    ('store_root = ""', "store_root"), ("store_root = 5", "store_root"), ("embedding_backend = 1", "embedding_backend"),
])
def test_bad_file_value_names_the_key_and_the_file(line: str, key: str, cfg_file: Path):
    write(cfg_file, line + "\n")
    error = error_of()
    assert str(cfg_file) in error.message and f"{key}:" in error.message


def test_numbers_accept_both_spellings(cfg_file: Path, monkeypatch: pytest.MonkeyPatch):
    write(cfg_file, 'learnings_k = "8"\nlearnings_half_life_days = "45.5"\n')
    c = load()
    assert (c.learnings_k, c.learnings_half_life_days) == (8, 45.5)
    monkeypatch.setenv("WHETSTONE_LEARNINGS_K", " 11 ")
    monkeypatch.setenv("WHETSTONE_RETIRE_WEIGHT_THRESHOLD", "1e-1")
    c = load()
    assert (c.learnings_k, c.retire_weight_threshold) == (11, 0.1)


# --- bad files and unknown keys ---------------------------------------------------------------------

def test_a_file_that_is_not_toml_is_an_error_naming_the_file(cfg_file: Path):
    write(cfg_file, "learnings_k = \n[unclosed\n")
    error = error_of()
    assert str(cfg_file) in error.message and "TOML" in error.message


def test_a_file_that_is_not_utf8_is_an_error_naming_the_file(cfg_file: Path):
    cfg_file.write_bytes(b'embedding_model = "caf\xe9"\n')
    assert str(cfg_file) in error_of().message


def test_a_config_path_that_is_a_directory_is_an_error(cfg_file: Path):
    cfg_file.mkdir()
    error = error_of()
    assert str(cfg_file) in error.message and "cannot read" in error.message


def test_whetstone_config_names_the_file_to_read(tmp_path: Path, cfg_file: Path):
    write(cfg_file, "learnings_k = 7\n")
    other = write(tmp_path / "other.toml", "learnings_k = 3\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WHETSTONE_CONFIG", str(other))
        assert load().learnings_k == 3


def test_whetstone_config_naming_a_missing_file_is_an_error(tmp_path: Path):
    error = error_of(WHETSTONE_CONFIG=str(tmp_path / "typo.toml"))
    assert "WHETSTONE_CONFIG" in error.message and "typo.toml" in error.message


def test_no_config_file_at_all_is_fine():
    assert not config.config_path().exists()
    assert load().learnings_k == 12


@pytest.mark.parametrize(("key", "hint"), [
    ("learning_k", "learnings_k"), ("learnings-k", "learnings_k"), ("LEARNINGS_K", "learnings_k"),
    ("supervison", "supervision"), ("hashin", "hashing"), ("sentence_transformers", "sentence-transformers"),
])
def test_unknown_key_suggests_the_close_one(key: str, hint: str, cfg_file: Path):
    value = "{ dedup = 0.5 }" if "hash" in key or "sentence" in key else "3"
    write(cfg_file, f'"{key}" = {value}\n')
    error = error_of()
    assert f"unknown key '{key}'" in error.message
    assert f"did you mean '{hint}'?" in error.message
    assert str(cfg_file) in error.message


def test_unknown_key_without_a_close_match_gets_no_guess(cfg_file: Path):
    write(cfg_file, "colour_scheme = 3\n")
    error = error_of()
    assert "unknown key 'colour_scheme'" in error.message and "did you mean" not in error.message


def test_cli_reports_a_config_that_is_not_toml_in_one_line_with_exit_2(cfg_file: Path):
    write(cfg_file, "this is not toml\n")
    proc = run_cli("list")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(cfg_file) in lines[0] and "Traceback" not in proc.stderr


# --- similarity thresholds, per backend ----------------------------------------------------------

def test_threshold_tables_per_backend(cfg_file: Path):
    write(cfg_file, """
[hashing]
dedup = 0.7
conflict = 0.55
grey = 0.4

["sentence-transformers"]
dedup = 0.9
issue_cutoff = 0.2
""")
    c = load()
    # conflict and grey: read without complaint from an older file, and not used
    assert c.thresholds["hashing"] == {**DEFAULT_THRESHOLDS["hashing"], "dedup": 0.7}
    assert c.thresholds["sentence-transformers"] == {**DEFAULT_THRESHOLDS["sentence-transformers"],
                                                     "dedup": 0.9, "issue_cutoff": 0.2}
    assert c.threshold("dedup") == 0.7  # the configured backend's table
    assert dataclasses.replace(c, embedding_backend="sentence-transformers").threshold("dedup") == 0.9
    assert load().thresholds["hashing"]["dedup"] == 0.7
    write(cfg_file, "")
    assert load().thresholds == DEFAULT_THRESHOLDS  # an override never leaks into the defaults


def test_every_threshold_has_a_default_for_every_backend():
    for backend in config.BACKENDS:
        assert set(DEFAULT_THRESHOLDS[backend]) == set(THRESHOLD_NAMES)
        assert all(-1 <= v <= 1 for v in DEFAULT_THRESHOLDS[backend].values())


def test_threshold_environment_overrides(cfg_file: Path, monkeypatch: pytest.MonkeyPatch):
    write(cfg_file, "[hashing]\ndedup = 0.7\n")
    monkeypatch.setenv("WHETSTONE_HASHING_DEDUP", "0.5")
    monkeypatch.setenv("WHETSTONE_SENTENCE_TRANSFORMERS_MENTION", "0.3")
    c = load()
    assert c.thresholds["hashing"]["dedup"] == 0.5
    assert c.thresholds["sentence-transformers"]["mention"] == 0.3
    assert c.thresholds["sentence-transformers"]["dedup"] == DEFAULT_THRESHOLDS["sentence-transformers"]["dedup"]


@pytest.mark.parametrize("raw", ["1.5", "-2", "high", "nan"])
def test_bad_threshold_in_the_environment_names_it(raw: str):
    error = error_of(WHETSTONE_HASHING_ASK=raw)
    assert "WHETSTONE_HASHING_ASK" in error.message and "hashing.ask" in error.message


@pytest.mark.parametrize("value", ["1.5", '"x"', "true"])
def test_bad_threshold_in_the_file_names_it(value: str, cfg_file: Path):
    write(cfg_file, f"[hashing]\nscope = {value}\n")
    error = error_of()
    assert "hashing.scope" in error.message and str(cfg_file) in error.message


def test_unknown_threshold_name_suggests_the_close_one(cfg_file: Path):
    write(cfg_file, "[hashing]\ndedupe = 0.7\n")
    error = error_of()
    assert "unknown threshold 'hashing.dedupe'" in error.message and "did you mean 'dedup'?" in error.message


def test_a_backend_key_that_is_not_a_table_is_a_clear_error(cfg_file: Path):
    write(cfg_file, "hashing = 0.5\n")
    error = error_of()
    assert "hashing" in error.message and "table" in error.message and "unknown key" not in error.message
